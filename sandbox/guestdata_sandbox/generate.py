"""Deterministic seeded data: a pure function of (seed, size, anchor), cut at the start time.

Every generated timestamp falls before `cutoff` = min(end of the anchor's London day, start time
minus a minute), so "today" has data but nothing lies in the future. Each resource draws from
its own `random.Random` stream, seeded from (seed, size, account, resource).
"""

from __future__ import annotations

import bisect
import datetime as dt
import random
import time

from guestdata_sandbox import names
from guestdata_sandbox.accounts import ACCOUNTS, COLLIDING_ACCOUNT, Account
from guestdata_sandbox.dataset import ID_BASES, SECONDARY, SIZES, AccountData, Dataset, Size
from guestdata_sandbox.generate_members import generate_rewards
from guestdata_sandbox.rules import london_day_end, london_day_start, zone
from guestdata_sandbox.seeded import stream

START_MARGIN_S = 60  # generated times end this long before the server started


def generate(
    seed: int,
    size: str,
    anchor: dt.date,
    started_at: float | None = None,
    colliding_account: bool = False,
) -> Dataset:
    """`colliding_account`: account 1006 too, its own data drawn under account 1001's ids."""
    began = time.perf_counter()
    started_at = time.time() if started_at is None else started_at
    cutoff = min(london_day_end(anchor), started_at - START_MARGIN_S)
    dataset = Dataset(seed, size, anchor, cutoff, {}, dict(ID_BASES))
    for account in ACCOUNTS.values():
        if account.account_id != COLLIDING_ACCOUNT:
            make_account(dataset, account, size)
    if colliding_account:
        # Its ids drawn again from the bases (account 1001's); later ids go on after them all.
        after_all, dataset.next_ids = dataset.next_ids, dict(ID_BASES)
        make_account(dataset, ACCOUNTS[COLLIDING_ACCOUNT], size)
        dataset.next_ids = {kind: max(n, after_all[kind]) for kind, n in dataset.next_ids.items()}
    dataset.generation_seconds = time.perf_counter() - began
    return dataset


def make_account(dataset: Dataset, account: Account, size: str) -> None:
    """One account's rows, drawn from its own random streams, with ids from the dataset's."""
    shape = SIZES[size] if account.main else SECONDARY
    data = AccountData(account)
    make_venues(dataset, data, shape)
    make_persons(dataset, data, shape)
    make_guests(dataset, data, shape)
    if account.plan.rewards:  # accounts whose plan has Rewards have a programme
        generate_rewards(dataset, data, shape)
    whole_seconds(data)
    data.build_indexes()
    dataset.accounts[account.account_id] = data


TIME_FIELDS = frozenset(
    [
        "created_at",
        "visited_at",
        "updated_at",
        "activated_at",
        "starts_at",
        "ends_at",
        "issued_at",
        "expires_at",
        "locked_until",
        "delivered_email_at",
        "delivered_sms_at",
        "viewed_at",
        "voided_at",
        "restored_at",
        "tier_reached_at",
        "last_visit_at",
        "membership_consent_at",
        "left_at",
        "anonymised_at",
    ]
)


def whole_seconds(data: AccountData) -> None:
    """Timestamps render to the second, so they are stored to the second: windows stay exact."""
    rows: list[dict] = [*data.venues, *data.guests, *data.offers, *data.members]
    rows += [line for member in data.members for line in member["ledger"]]
    rows += [*data.rewards, *data.redemptions]
    if data.programme:
        rows.append(data.programme)
    for row in rows:
        for name in TIME_FIELDS.intersection(row):
            if isinstance(row[name], float):
                row[name] = int(row[name])


def make_venues(dataset: Dataset, data: AccountData, shape: Size) -> None:
    rng = stream(dataset.seed, dataset.size, data.account.account_id, "venues")
    words = rng.sample(names.VENUE_WORDS, shape.venues)
    low, high = shape.venue_age_days
    ages = sorted((rng.randint(low, high) for _ in range(shape.venues)), reverse=True)
    ages[0] = high  # the oldest venue sets how far back the account goes
    # spec 2.6: venues on non-UTC zones, and one still on the UTC default
    cities = [names.CITIES[0], names.CITIES[6], names.CITIES[4], names.CITIES[3], names.CITIES[2]]
    cities += [rng.choice(names.CITIES) for _ in range(max(0, shape.venues - len(cities)))]
    if shape.venues < 5:
        cities = [names.CITIES[0], names.CITIES[rng.choice((3, 4, 6))]]
    for index in range(shape.venues):
        city, country, zone_name, currency, _ = cities[index]
        day = dataset.anchor - dt.timedelta(days=ages[index])
        created = london_day_start(day) + rng.randint(9 * 3600, 17 * 3600)
        data.venues.append(
            {
                "id": dataset.new_id("venues"),
                "name": f"The {words[index]} {rng.choice(names.VENUE_KINDS)} {city}",
                "city": city,
                "country": country,
                "created_at": created,
                "timezone": zone_name,
                "timezone_is_default": zone_name == "UTC",
                "currency": currency,
                "earn_multiplier": rng.choice((1.0, 1.0, 1.5, 2.0)),
                "is_active": index != shape.venues - 1 or shape.venues < 4,
            }
        )


def phone_number(rng: random.Random, prefix: str) -> str:
    """E.164 mobile numbers in each country's usual shape."""
    digits = "".join(rng.choices("0123456789", k=8))
    if prefix == "+44":
        return f"+447{rng.randint(4, 9)}{digits}"
    if prefix == "+1":
        return f"+1{rng.randint(201, 989)}{digits[:7]}"
    if prefix == "+61":
        return f"+614{digits}"
    if prefix == "+353":
        return f"+3538{rng.choice('35679')}{digits[:7]}"
    return f"+336{digits}"


def make_persons(dataset: Dataset, data: AccountData, shape: Size) -> None:
    """The people behind arrivals and members: one email, phone and consent each."""
    rng = stream(dataset.seed, dataset.size, data.account.account_id, "persons")
    prefixes = [
        city[4] for venue in data.venues for city in names.CITIES if city[0] == venue["city"]
    ]
    seen: set[str] = set()
    for index in range(max(60, int(shape.guests / 2.5))):
        first, last = rng.choice(names.FIRST_NAMES), rng.choice(names.LAST_NAMES)
        email = f"{first}.{last}{rng.randint(1, 99)}@{rng.choice(names.EMAIL_DOMAINS)}".lower()
        if email in seen:
            email = email.replace("@", f".{index}@")
        seen.add(email)
        data.persons.append((first, last, email, phone_number(rng, rng.choice(prefixes))))
        data.consent.append(rng.random() < 0.62)


def make_guests(dataset: Dataset, data: AccountData, shape: Size) -> None:
    """Arrivals per venue per local day, busier at weekends; ids follow arrival time."""
    rng = stream(dataset.seed, dataset.size, data.account.account_id, "guests")
    venue_weights = [rng.uniform(0.5, 1.5) for _ in data.venues]
    slots: list[tuple[int, float, float]] = []  # (venue index, open epoch, weight)
    for index, venue in enumerate(data.venues):
        tz = zone(venue["timezone"])
        first_day = dt.datetime.fromtimestamp(venue["created_at"], tz).date()
        day = first_day
        while day <= dataset.anchor:
            opens = dt.datetime(day.year, day.month, day.day, 8, tzinfo=tz).timestamp()
            weekend = 1.5 if day.weekday() >= 4 else 1.0
            slots.append((index, opens, venue_weights[index] * weekend * rng.uniform(0.6, 1.4)))
            day += dt.timedelta(days=1)
    total_weight = sum(slot[2] for slot in slots)
    person_count = len(data.persons)
    arrivals: list[tuple[float, int, int]] = []
    random_ = rng.random
    cutoff = dataset.cutoff
    for index, opens, weight in slots:
        expected = shape.guests * weight / total_weight
        created = data.venues[index]["created_at"]
        for _ in range(int(expected + random_())):
            visited = opens + int(random_() * 15 * 3600)  # open 08:00-23:00 local
            if created <= visited < cutoff:
                arrivals.append((visited, index, int(person_count * random_() ** 1.6)))
    arrivals.sort()
    seen: set[tuple[int, int]] = set()
    day_starts, day_labels = london_days(dataset, arrivals[0][0] if arrivals else cutoff)
    first_id = dataset.next_ids["guests"]
    for offset, (visited, index, person) in enumerate(arrivals):
        pair = (person, index)
        data.guests.append(
            {
                "id": first_id + offset,
                "venue_id": data.venues[index]["id"],
                "person": person,
                "is_return_visit": pair in seen,
                "visited_at": visited,
                "date": day_labels[bisect.bisect_right(day_starts, visited) - 1],
            }
        )
        seen.add(pair)
    dataset.next_ids["guests"] = first_id + len(arrivals)


def london_days(dataset: Dataset, earliest: float) -> tuple[list[float], list[str]]:
    """London day starts and labels from `earliest` to the anchor, for bisecting."""
    day = dt.datetime.fromtimestamp(earliest, zone("Europe/London")).date()
    starts, labels = [], []
    while day <= dataset.anchor + dt.timedelta(days=1):
        starts.append(london_day_start(day))
        labels.append(day.isoformat())
        day += dt.timedelta(days=1)
    return starts, labels
