"""Test-only changes to the data (POST /_sandbox/mutate). Each stamps the real clock; whether a
reward has expired is read at the store's clock (`Store.now`), as the API reads it.

The API itself never changes state (spec 1); these stand in for what happens in the venues and
on the dashboard between two syncs.
"""

from __future__ import annotations

import bisect
import datetime as dt
import random
import time
from typing import Any

from guestdata_sandbox import names, row_fields
from guestdata_sandbox.accounts import KEYS, ApiKey
from guestdata_sandbox.dataset import AccountData
from guestdata_sandbox.generate import phone_number
from guestdata_sandbox.generate_members import new_member, touch
from guestdata_sandbox.generate_rewards import TIERS, MemberLife
from guestdata_sandbox.rules import london_date
from guestdata_sandbox.seeded import pick
from guestdata_sandbox.store import Store

MAIN_ACCOUNT = 1001
SANDBOX_USER_ID = 79


def now_s() -> int:
    """Mutations stamp the real clock, to the second like every stored timestamp."""
    return int(time.time())


class MutationError(Exception):
    """A mutation that cannot apply (unknown id, wrong state): answered 400/404."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def rng_for(store: Store, purpose: str) -> random.Random:
    store.mutation_count = getattr(store, "mutation_count", 0) + 1
    return random.Random(f"{store.seed}:mutation:{purpose}:{store.mutation_count}")


def find(store: Store, index: str, row_id: Any, account_id: Any = None) -> tuple[AccountData, dict]:
    """The row of that id: in `account_id` if given (ids may collide across accounts: the
    colliding account), else in the first account holding it."""
    accounts = [account_of(store, account_id)] if account_id is not None else None
    for data in accounts or store.dataset.accounts.values():
        row = getattr(data, index).get(int(row_id))
        if row is not None:
            return data, row
    raise MutationError(f"no row {row_id} in {index}", status=404)


def account_of(store: Store, account_id: Any = None, venue_id: Any = None) -> AccountData:
    if venue_id is not None and account_id is not None:
        data = account_of(store, account_id)
        if data.venue(int(venue_id)) is None:
            raise MutationError(f"no venue {venue_id} in account {account_id}", status=404)
        return data
    if venue_id is not None:
        for data in store.dataset.accounts.values():
            if data.venue(int(venue_id)) is not None:
                return data
        raise MutationError(f"no venue {venue_id}", status=404)
    data = store.dataset.accounts.get(int(account_id or MAIN_ACCOUNT))
    if data is None:
        raise MutationError(f"no account {account_id}", status=404)
    return data


def new_person(data: AccountData, rng: random.Random) -> int:
    first, last = pick(rng, names.FIRST_NAMES), pick(rng, names.LAST_NAMES)
    email = f"{first}.{last}.{len(data.persons)}@{pick(rng, names.EMAIL_DOMAINS)}".lower()
    data.persons.append((first, last, email, phone_number(rng, "+44")))
    data.consent.append(rng.random() < 0.6)
    return len(data.persons) - 1


def add_guests(
    store: Store,
    count: int = 1,
    venue_id: Any = None,
    account_id: Any = None,
    visited_at: Any = None,
):
    """New guests visiting now, or at `visited_at` (an ISO 8601 instant with offset): arrivals
    that reach the service late, e.g. from a venue that was offline. /stats counts them on
    their London day at once (it is computed from the guests held)."""
    data = account_of(store, account_id, venue_id)
    rng, ids = rng_for(store, "guests"), []
    when = None if visited_at is None else past_instant(str(visited_at))
    for _ in range(int(count)):
        venue = data.venue(int(venue_id)) if venue_id is not None else pick(rng, data.venues)
        moment = now_s() if when is None else when
        if moment < venue["created_at"]:
            raise MutationError(f"venue {venue['id']} did not exist at {visited_at}")
        row = {
            "id": store.dataset.new_id("guests"),
            "venue_id": venue["id"],
            "person": new_person(data, rng),
            "is_return_visit": False,
            "visited_at": moment,
            "date": london_date(moment).isoformat(),
        }
        at = bisect.bisect_right(data.guest_times, moment)  # the lists stay in time order
        data.guests.insert(at, row)
        data.guest_times.insert(at, moment)
        data.guests_by_id[row["id"]] = row
        ids.append(row["id"])
    return {"ids": ids}


def past_instant(value: str) -> int:
    """An ISO 8601 instant with offset, not in the future, to the second like stored times."""
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MutationError(f"{value!r} is not an ISO 8601 instant") from None
    if moment.tzinfo is None:
        raise MutationError(f"{value!r} has no UTC offset")
    if moment.timestamp() > now_s():
        raise MutationError(f"{value!r} is in the future")
    return int(moment.timestamp())


def set_marketing_consent(store: Store, guest_id: Any, value: Any, account_id: Any = None) -> dict:
    """spec 2.3: consent is the guest's (person's) answer now, on every arrival row."""
    data, row = find(store, "guests_by_id", guest_id, account_id)
    data.consent[row["person"]] = bool(value)
    return {"ids": [row["id"]]}


def delete_guest(store: Store, guest_id: Any, account_id: Any = None) -> dict:
    """A guest deleted in the service (spec 1): gone from /guests and, in this sandbox, from
    /stats too (its counts are recomputed from the guests still held; docs/sandbox.md)."""
    data, row = find(store, "guests_by_id", guest_id, account_id)
    index = data.guests.index(row)
    del data.guests[index]
    del data.guest_times[index]  # kept parallel to data.guests (the time index of /guests)
    del data.guests_by_id[row["id"]]
    return {"ids": [row["id"]]}


def recompute_tier(member: dict, now: float) -> None:
    tier = next((t for t in reversed(TIERS) if member["points_12m"] >= t["min_points_12m"]), None)
    key = tier["key"] if tier else None
    if key != member["tier_key"]:
        member["tier_key"], member["tier_reached_at"] = key, now if key else None


def life_of(store: Store, data: AccountData, member: dict, purpose: str) -> MemberLife:
    life = MemberLife(store.dataset, data, rng_for(store, purpose), member)
    life.balance, life.lifetime = member["points_balance"], member["lifetime_points"]
    return life


def settle_member(life: MemberLife, before: int, now: float) -> None:
    member = life.member
    member["points_balance"], member["lifetime_points"] = life.balance, life.lifetime
    member["points_12m"] += life.lifetime - before
    recompute_tier(member, now)
    member["updated_at"] = now  # spec 4.2 updated_since: points moved


def add_ledger_lines(store: Store, member_id: Any, count: int = 1, account_id: Any = None) -> dict:
    data, member = find(store, "members_by_id", member_id, account_id)
    life = life_of(store, data, member, "ledger")
    before, ids, now = life.lifetime, [], now_s()
    site = data.venue(member["last_visit_site_id"]) or data.venues[0]
    for index in range(int(count)):
        line = life.line(now, site, "earn_bonus", 10 + 5 * (index % 4), "bonus:sandbox")
        line["id"] = store.dataset.new_id("member_ledger")
        ids.append(line["id"])
    settle_member(life, before, now)
    return {"ids": ids}


def update_member(
    store: Store, member_id: Any, fields: dict | None = None, account_id: Any = None
) -> dict:
    _, member = find(store, "members_by_id", member_id, account_id)
    now, fields = now_s(), fields or {}
    if "tier_key" in fields:
        keys = {tier["key"] for tier in TIERS}
        if fields["tier_key"] is not None and fields["tier_key"] not in keys:
            raise MutationError(f"tier_key must be one of {sorted(keys)} or null")
        member["tier_key"] = fields["tier_key"]
        member["tier_reached_at"] = now if fields["tier_key"] else None
    status = fields.get("status")
    if status == "left":
        member["left_at"] = now
    elif status == "active":
        member["left_at"] = member["anonymised_at"] = None
    elif status == "anonymised" or fields.get("anonymise"):
        member["left_at"] = member["left_at"] or now
        member["anonymised_at"] = now
    elif status is not None:
        raise MutationError("status must be active, left or anonymised")
    if fields.get("visit"):
        member["visits_count"] += 1
        member["last_visit_at"] = now
    member["updated_at"] = now  # spec 4.2: tier, status or visits changed
    return {"ids": [member["id"]]}


def redeem(store: Store, data: AccountData, reward: dict) -> dict:
    now = now_s()
    if reward["redemption"] is not None or reward["status"] != "issued":
        raise MutationError(f"reward {reward['id']} is not unused (status {reward['status']})")
    if reward["expires_at"] <= store.now():
        raise MutationError(f"reward {reward['id']} has expired")
    member, offer = reward["member"], reward["offer"]
    life = life_of(store, data, member, "redeem")
    before, lines_before = life.lifetime, len(member["ledger"])
    site = data.venue(reward["site_id"]) or data.venue(member["last_visit_site_id"])
    if offer["site_ids"] and (site is None or site["id"] not in offer["site_ids"]):
        site = data.venue(offer["site_ids"][0])  # redeemed where the reward is valid
    site = site or data.venues[0]
    shortfall = (reward["points_spent"] or 0) - life.balance
    if shortfall > 0:  # keep balance_after >= 0 and following the deltas (spec 2.9)
        life.line(now, site, "adjust", shortfall, f"adjust:{SANDBOX_USER_ID}", note="Top-up")
    life.open = [reward]
    life.redeem(now - 5400, site)
    redemption = reward["redemption"]
    if redemption is None:
        raise MutationError(f"reward {reward['id']} cannot be redeemed at venue {site['id']}")
    redemption["id"] = store.dataset.new_id("redemptions")
    redemption["created_at"] = now
    ledger_ids = []
    for line in member["ledger"][lines_before:]:
        line["id"], line["created_at"] = store.dataset.new_id("member_ledger"), now
        if line["reason"] == "redeem":
            line["reference"] = f"redeem:{redemption['id']}"
        ledger_ids.append(line["id"])
    data.redemptions_by_id[redemption["id"]] = redemption
    settle_member(life, before, now)
    return {"redemption_id": redemption["id"], "ledger_ids": ledger_ids}


def redeem_reward(store: Store, reward_id: Any, account_id: Any = None) -> dict:
    data, reward = find(store, "rewards_by_id", reward_id, account_id)
    return redeem(store, data, reward)


def add_redemptions(store: Store, count: int = 1, account_id: Any = None) -> dict:
    data = account_of(store, account_id)
    now, ids = store.now(), []
    for reward in reversed(data.rewards):
        if len(ids) >= int(count):
            break
        if reward["status"] == "issued" and not reward["redemption"] and reward["expires_at"] > now:
            ids.append(redeem(store, data, reward)["redemption_id"])
    return {"ids": ids}


def add_members(store: Store, count: int = 1, account_id: Any = None) -> dict:
    data = account_of(store, account_id)
    rng, ids = rng_for(store, "members"), []
    for _ in range(int(count)):
        now = now_s()
        home = pick(rng, data.venues)
        member = new_member(rng, new_person(data, rng), now, home)
        member["visits_count"] = 1
        life = MemberLife(store.dataset, data, rng, member)
        line = life.line(now, home, "earn_signup", 50, f"signup:{member['member_number']}")
        line["id"] = store.dataset.new_id("member_ledger")
        member["id"] = store.dataset.new_id("members")
        settle_member(life, 0, now)
        touch(member)
        data.members.append(member)
        data.members_by_id[member["id"]] = member
        ids.append(member["id"])
    return {"ids": ids}


def add_rewards(store: Store, count: int = 1, account_id: Any = None) -> dict:
    data = account_of(store, account_id)
    rng, ids = rng_for(store, "rewards"), []
    offers = [offer for offer in data.offers if offer["status"] == "active"]
    for index in range(int(count)):
        member = data.members[-1 - index % len(data.members)]
        life = MemberLife(store.dataset, data, rng, member)
        life.issue(now_s(), data.venue(member["first_site_id"]), pick(rng, offers), "api")
        reward = data.rewards[-1]
        reward["id"] = store.dataset.new_id("rewards")
        data.rewards_by_id[reward["id"]] = reward
        data.rewards_by_offer.setdefault(reward["offer"]["id"], []).append(reward)
        ids.append(reward["id"])
    return {"ids": ids}


def void_redemption(store: Store, redemption_id: Any, account_id: Any = None) -> dict:
    _, row = find(store, "redemptions_by_id", redemption_id, account_id)
    if row["status"] != "completed":
        raise MutationError(f"redemption {row['id']} is {row['status']}, not completed")
    row["status"], row["voided_at"] = "voided", now_s()
    row["voided_by_user_id"], row["void_reason"] = SANDBOX_USER_ID, "Voided in the sandbox"
    row["restored_at"] = row["restored_by_user_id"] = None
    return {"ids": [row["id"]]}


def restore_redemption(store: Store, redemption_id: Any, account_id: Any = None) -> dict:
    """spec 3 leaves the restored status unshown; the sandbox answers completed + restored_at."""
    _, row = find(store, "redemptions_by_id", redemption_id, account_id)
    if row["status"] != "voided":
        raise MutationError(f"redemption {row['id']} is {row['status']}, not voided")
    row["status"], row["restored_at"] = "completed", now_s()
    row["restored_by_user_id"] = SANDBOX_USER_ID
    return {"ids": [row["id"]]}


def archive_offer(store: Store, offer_id: Any, account_id: Any = None) -> dict:
    _, row = find(store, "offers_by_id", offer_id, account_id)
    row["status"], row["updated_at"] = "archived", now_s()
    return {"ids": [row["id"]]}


def remove_programme(store: Store, account_id: Any) -> dict:
    """The account as before its programme was created: data null (spec 2.6)."""
    account_of(store, account_id).programme = None
    return {}


def add_field(store: Store, path: Any, field: Any, value: Any = None, values: Any = None) -> dict:
    """From now on every row of `path` carries `field` (a field already there takes the new
    value): `value` on every row, or `values` cycled over the rows by id."""
    try:
        resource, rule = row_fields.resource_of(path), row_fields.added_rule(value, values)
    except row_fields.FieldChangeError as error:
        raise MutationError(str(error)) from None
    store.field_changes.setdefault(resource, {})[str(field)] = rule
    return {"resource": resource}


def remove_field(store: Store, path: Any, field: Any) -> dict:
    """From now on the rows of `path` come without `field`."""
    try:
        resource = row_fields.resource_of(path)
    except row_fields.FieldChangeError as error:
        raise MutationError(str(error)) from None
    store.field_changes.setdefault(resource, {})[str(field)] = row_fields.REMOVED_RULE
    return {"resource": resource}


def known_key(key: Any) -> str:
    if key not in KEYS:
        raise MutationError(f"unknown key {key!r}", status=404)
    return key


def revoke_key(store: Store, key: Any) -> dict:
    store.revoked.add(known_key(key))  # spec 5.4: immediate and final
    return {}


def grant_permission(store: Store, key: Any) -> dict:
    store.granted.add(known_key(key))  # spec 4.5.4: takes effect on the next request
    return {}


def set_rewards(store: Store, account_id: Any, enabled: Any) -> dict:
    account_of(store, account_id)
    store.rewards_enabled[int(account_id)] = bool(enabled)
    return {}


INSERTERS = {"guests", "members", "rewards", "redemptions", "member_ledger"}


def insert_while_paging(store: Store, resource: str, count: int = 1, times: int = 1) -> dict:
    if resource not in INSERTERS:
        raise MutationError(f"resource must be one of {sorted(INSERTERS)}")
    store.inserts[resource] = [int(count), int(times)]
    return {}


def before_list(store: Store, api_key: ApiKey, resource: str, member_id: int | None = None):
    """insert_while_paging: new records at the head before the next list requests."""
    pending = store.inserts.get(resource)
    if not pending or pending[1] <= 0:
        return
    pending[1] -= 1
    count, account_id = pending[0], api_key.account_id
    if resource == "guests":
        add_guests(store, count, account_id=account_id)
    elif resource == "members":
        add_members(store, count, account_id=account_id)
    elif resource == "rewards":
        add_rewards(store, count, account_id=account_id)
    elif resource == "redemptions":
        add_redemptions(store, count, account_id=account_id)
    elif member_id is not None:
        add_ledger_lines(store, member_id, count)
    store.invalidate()


ACTIONS = {
    "add_guests": add_guests,
    "set_marketing_consent": set_marketing_consent,
    "delete_guest": delete_guest,
    "add_ledger_lines": add_ledger_lines,
    "update_member": update_member,
    "redeem_reward": redeem_reward,
    "add_redemptions": add_redemptions,
    "add_members": add_members,
    "add_rewards": add_rewards,
    "void_redemption": void_redemption,
    "restore_redemption": restore_redemption,
    "archive_offer": archive_offer,
    "remove_programme": remove_programme,
    "revoke_key": revoke_key,
    "set_rewards": set_rewards,
    "grant_permission": grant_permission,
    "insert_while_paging": insert_while_paging,
    "add_field": add_field,
    "remove_field": remove_field,
}


def apply(store: Store, action: str, fields: dict[str, Any]) -> dict:
    handler = ACTIONS.get(action)
    if handler is None:
        raise MutationError(f"unknown action {action!r}; one of {sorted(ACTIONS)}")
    with store.lock:
        try:
            result = handler(store, **fields)
        except TypeError as error:
            raise MutationError(f"{action}: {error}") from error
        store.invalidate()
    return result
