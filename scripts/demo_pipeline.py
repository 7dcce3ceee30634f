"""The demo behind `scripts/demo`: sandbox -> Meltano -> PostgreSQL, checked against ground truth.

Steps: start the sandbox on a free port; pick a PostgreSQL (a server that answers, else an
embedded one from the `pgserver` wheel: real PostgreSQL binaries, so target-postgres runs
unchanged); recreate the demo database; `meltano install`; `meltano --environment=dev run
guestdata-to-postgres` (load, then `dbt build` of transform/); compare every table with the
sandbox's `/_sandbox/truth`: row count, primary keys and every field's value; print a short
report from the marts. Exits 1 on any difference (or a failed dbt test).

The comparison helpers are also used by the end-to-end tests (tests/e2e), so the demo's verdict
is itself tested.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from tap_guestdata.tap import STREAM_TYPES

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MELTANO = PROJECT_ROOT / ".venv" / "bin" / "meltano"
DEMO_DATABASE = "guestdata_demo"
TARGET_SCHEMA = "guestdata"
MODELS_SCHEMA = f"{TARGET_SCHEMA}_analytics"  # transform/profiles.yml: <raw schema>_analytics
DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
EMBEDDED_PGDATA = PROJECT_ROOT / ".meltano" / "demo-postgres"

# What the job needs; `meltano install` alone would also fetch target-snowflake and the mapper.
DEMO_PLUGINS = ("tap-guestdata", "target-postgres", "guestdata-pg-types", "dbt-postgres")

# Stream -> primary key, as the tap's stream classes declare them; the order is the report's order.
# The API's streams, which the sandbox's truth holds; not the tap's bookkeeping (read_windows, the
# reads it made), which is selected by name only.
STREAM_KEYS: dict[str, tuple[str, ...]] = {
    stream.name: tuple(stream.primary_keys or ())
    for stream in STREAM_TYPES
    if stream.selected_by_default
}


# ---------------------------------------------------------------- destination


@dataclass
class Destination:
    """A PostgreSQL server the demo (or a test) loads into."""

    label: str
    host: str  # a host name, or a Unix socket directory (embedded server)
    port: int
    user: str
    password: str

    def conninfo(self, database: str) -> str:
        return psycopg.conninfo.make_conninfo(
            host=self.host,
            port=str(self.port),
            user=self.user,
            password=self.password or None,
            dbname=database,
            connect_timeout="5",
        )

    def target_env(self, database: str, schema: str = TARGET_SCHEMA) -> dict[str, str]:
        """Environment for target-postgres and guestdata-pg-types (they share a namespace)."""
        env = {
            "TARGET_POSTGRES_HOST": self.host,
            "TARGET_POSTGRES_PORT": str(self.port),
            "TARGET_POSTGRES_USER": self.user,
            "TARGET_POSTGRES_PASSWORD": self.password,
            "TARGET_POSTGRES_DATABASE": database,
            "TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": schema,
        }
        if self.host.startswith("/"):
            # target-postgres renders host/port/database into a URL that mangles a socket
            # directory; its sqlalchemy_url setting passes one through (libpq's host=).
            env["TARGET_POSTGRES_SQLALCHEMY_URL"] = (
                f"postgresql+psycopg://{self.user}@/{database}?host={self.host}&port={self.port}"
            )
        return env


def server_from_url(url: str, label: str) -> Destination:
    parts = urlsplit(url)
    host = parts.hostname or parse_qs(parts.query).get("host", ["127.0.0.1"])[0]
    return Destination(
        label=label,
        host=host,
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password or "",
    )


def server_answers(destination: Destination) -> bool:
    try:
        with psycopg.connect(destination.conninfo("postgres")):
            return True
    except psycopg.OperationalError:
        return False


@contextmanager
def choose_destination(
    pg_url: str | None, *, embedded: bool = False, pgdata: Path = EMBEDDED_PGDATA
) -> Iterator[Destination]:
    """The configured server, else 127.0.0.1:5432 if it answers, else an embedded server."""
    if embedded:
        with embedded_server(pgdata) as server:
            yield server
        return
    if pg_url:
        destination = server_from_url(pg_url, f"PostgreSQL at {pg_url} (GUESTDATA_DEMO_PG_URL)")
        if not server_answers(destination):
            raise SystemExit(f"GUESTDATA_DEMO_PG_URL={pg_url}: no PostgreSQL answers there")
        yield destination
        return
    destination = server_from_url(DEFAULT_SERVER_URL, "PostgreSQL at 127.0.0.1:5432")
    if server_answers(destination):
        yield destination
        return
    with embedded_server(pgdata) as server:
        yield server


@contextmanager
def embedded_server(pgdata: Path) -> Iterator[Destination]:
    """A PostgreSQL 16 from the pgserver wheel, on a Unix socket; stopped (data kept) on exit."""
    import pgserver  # the demo extra installs it; imported late so servers need not have it

    pgdata.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    try:
        yield Destination(
            label=f"embedded PostgreSQL 16 (pgserver), data in {pgdata}",
            host=socket_dir,
            port=5432,
            user="postgres",
            password="",
        )
    finally:
        server.cleanup()


def recreate_database(destination: Destination, database: str) -> None:
    with psycopg.connect(destination.conninfo("postgres"), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


# ---------------------------------------------------------------- meltano


def meltano_env(base_url: str, destination: Destination, database: str, state_dir: Path) -> dict:
    """The process environment for `meltano`: sandbox, database and a throwaway state store."""
    env = {
        key: value
        for key, value in os.environ.items()
        # A user's own settings must not redirect the demo's run.
        if not key.startswith(("TAP_GUESTDATA", "TARGET_POSTGRES", "MELTANO_"))
    }
    env.update(destination.target_env(database))
    env.update(
        {
            "TAP_GUESTDATA_BASE_URL": base_url,
            # Fresh state per run, so the demo always loads everything it then checks.
            "MELTANO_DATABASE_URI": f"sqlite:///{state_dir / 'meltano.db'}",
            "MELTANO_SEND_ANONYMOUS_USAGE_STATS": "false",
            "NO_COLOR": "1",
        }
    )
    return env


def run_meltano(args: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
    """Run `meltano ARGS` in the project root, logging to a file; on failure show its tail."""
    with log_path.open("a") as log:
        log.write(f"\n$ meltano {' '.join(args)}\n")
        log.flush()
        result = subprocess.run(
            [str(MELTANO), *args],
            cwd=PROJECT_ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        tail = log_path.read_text().splitlines()[-40:]
        raise RuntimeError(
            f"meltano {' '.join(args)} failed ({result.returncode}); last lines of {log_path}:\n"
            + "\n".join(tail)
        )


# ---------------------------------------------------------------- comparison


def truth_tables(truth: Mapping[str, Any]) -> dict[str, list[dict]]:
    """The sandbox's truth as rows per stream (account and programme are single objects)."""
    tables: dict[str, list[dict]] = {}
    for stream in STREAM_KEYS:
        value = truth.get(stream)
        if value is None:
            tables[stream] = []
        elif isinstance(value, dict):
            tables[stream] = [value]
        else:
            tables[stream] = list(value)
    tables["programme_venues"] = [fixed_mirror_columns(row) for row in tables["programme_venues"]]
    return tables


def fixed_mirror_columns(venue: Mapping[str, Any]) -> dict[str, Any]:
    """The table shape the tap promises for `meta.venues[]` (spec 2.6): `mirror_to_<partner>`
    arrives as `mirror_partner` (the name) and `mirror_to_partner` (the flag)."""
    row = {name: value for name, value in venue.items() if not name.startswith("mirror_to_")}
    flags = [(name, value) for name, value in venue.items() if name.startswith("mirror_to_")]
    partner, flag = flags[0] if flags else ("mirror_to_", None)
    row["mirror_partner"] = partner.removeprefix("mirror_to_") or None
    row["mirror_to_partner"] = flag
    return row


def table_exists(connection: psycopg.Connection, schema: str, table: str) -> bool:
    row = connection.execute("SELECT to_regclass(%s)", (f'"{schema}"."{table}"',)).fetchone()
    return row is not None and row[0] is not None


def database_rows(connection: psycopg.Connection, schema: str, table: str) -> list[dict]:
    """Rows not soft-deleted by ACTIVATE_VERSION (target-postgres keeps those, dated)."""
    if not table_exists(connection, schema, table):
        return []
    query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
    rows = connection.cursor(row_factory=dict_row).execute(query).fetchall()
    return [row for row in rows if row.get("_sdc_deleted_at") is None]


def same_value(expected: Any, loaded: Any) -> bool:
    """Whether a JSON value from the API equals what PostgreSQL returned for it."""
    if expected is None or loaded is None:
        return expected is None and loaded is None
    if isinstance(loaded, dt.datetime):
        # timestamptz: the same instant; a naive value (a wrong column type) never matches.
        if loaded.tzinfo is None or not isinstance(expected, str):
            return False
        return dt.datetime.fromisoformat(expected.replace("Z", "+00:00")) == loaded
    if isinstance(loaded, dt.date):
        return isinstance(expected, str) and loaded.isoformat() == expected
    if isinstance(loaded, Decimal):
        return not isinstance(expected, bool) and Decimal(str(expected)) == loaded
    if isinstance(loaded, bool) or isinstance(expected, bool):
        return type(loaded) is type(expected) and loaded == expected
    if isinstance(loaded, float) and isinstance(expected, int | float):
        return abs(loaded - expected) <= 1e-9 * max(1.0, abs(expected))
    return loaded == expected


def key_of(row: Mapping[str, Any], key: Sequence[str]) -> tuple:
    """A comparable primary key; dates become ISO strings so DB and JSON keys meet."""
    parts = []
    for name in key:
        value = row.get(name)
        parts.append(value.isoformat() if isinstance(value, dt.date) else value)
    return tuple(parts)


@dataclass
class StreamCheck:
    stream: str
    rows_in_database: int
    rows_in_truth: int
    duplicate_keys: int = 0
    missing_keys: list = field(default_factory=list)
    unexpected_keys: list = field(default_factory=list)
    value_mismatches: list = field(default_factory=list)
    fields_compared: int = 0

    @property
    def matches(self) -> bool:
        return (
            self.rows_in_database == self.rows_in_truth
            and not self.duplicate_keys
            and not self.missing_keys
            and not self.unexpected_keys
            and not self.value_mismatches
        )


def compare_stream(stream: str, loaded: list[dict], expected: list[dict]) -> StreamCheck:
    """Row count, primary keys and every field the API gave, compared value for value."""
    key = STREAM_KEYS[stream]
    check = StreamCheck(stream, rows_in_database=len(loaded), rows_in_truth=len(expected))
    loaded_by_key: dict[tuple, dict] = {}
    for row in loaded:
        row_key = key_of(row, key)
        if row_key in loaded_by_key:
            check.duplicate_keys += 1
        loaded_by_key[row_key] = row
    expected_by_key = {key_of(row, key): row for row in expected}
    check.missing_keys = sorted(set(expected_by_key) - set(loaded_by_key), key=repr)
    check.unexpected_keys = sorted(set(loaded_by_key) - set(expected_by_key), key=repr)
    for row_key, expected_row in expected_by_key.items():
        loaded_row = loaded_by_key.get(row_key)
        if loaded_row is None:
            continue
        for name, expected_value in expected_row.items():
            check.fields_compared += 1
            if name not in loaded_row:
                check.value_mismatches.append((row_key, name, expected_value, "<no column>"))
            elif not same_value(expected_value, loaded_row[name]):
                check.value_mismatches.append((row_key, name, expected_value, loaded_row[name]))
    return check


def check_database(conninfo: str, truth: Mapping[str, Any], schema: str) -> list[StreamCheck]:
    expected_tables = truth_tables(truth)
    with psycopg.connect(conninfo) as connection:
        return [
            compare_stream(stream, database_rows(connection, schema, stream), expected)
            for stream, expected in expected_tables.items()
        ]


def report(checks: Sequence[StreamCheck]) -> str:
    lines = [f"{'stream':<22}{'rows in database':>18}{'rows in sandbox':>17}  match"]
    for check in checks:
        verdict = "yes" if check.matches else "NO"
        lines.append(
            f"{check.stream:<22}{check.rows_in_database:>18}{check.rows_in_truth:>17}  {verdict}"
        )
    total_db = sum(check.rows_in_database for check in checks)
    total_truth = sum(check.rows_in_truth for check in checks)
    all_match = all(check.matches for check in checks)
    lines.append(f"{'total':<22}{total_db:>18}{total_truth:>17}  {'yes' if all_match else 'NO'}")
    fields = sum(check.fields_compared for check in checks)
    mismatched = sum(len(check.value_mismatches) for check in checks)
    lines.append(f"values compared field by field: {fields}, differing: {mismatched}")
    for check in checks:
        if check.matches:
            continue
        if check.duplicate_keys:
            lines.append(f"  {check.stream}: {check.duplicate_keys} duplicate key(s)")
        if check.missing_keys:
            lines.append(f"  {check.stream}: missing keys {check.missing_keys[:5]}")
        if check.unexpected_keys:
            lines.append(f"  {check.stream}: keys not in the sandbox {check.unexpected_keys[:5]}")
        for row_key, name, expected, loaded in check.value_mismatches[:5]:
            lines.append(f"  {check.stream} {row_key} {name}: sandbox {expected!r}, db {loaded!r}")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("GUESTDATA_DEMO_PG_URL"),
        help="PostgreSQL server to use (its database part is ignored: the demo recreates "
        f"{DEMO_DATABASE!r}); default 127.0.0.1:5432 if it answers, else an embedded server",
    )
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="use the embedded PostgreSQL even if a server answers",
    )
    parser.add_argument("--embedded-pgdata", type=Path, default=EMBEDDED_PGDATA)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from guestdata_sandbox.accounts import OWNER_KEYS
    from guestdata_sandbox.testing import SandboxProcess

    args = parse_args(argv)
    started = time.monotonic()
    log_dir = PROJECT_ROOT / "output"
    log_dir.mkdir(exist_ok=True)
    log_path = log_dir / "demo-meltano.log"
    log_path.write_text("")

    with (
        SandboxProcess(size=args.size, seed=args.seed, limits=True) as sandbox,
        choose_destination(
            args.pg_url, embedded=args.embedded, pgdata=args.embedded_pgdata
        ) as destination,
        tempfile.TemporaryDirectory(prefix="guestdata-demo-state-") as state_dir,
    ):
        print(f"==> sandbox (size {args.size}, seed {args.seed}) at {sandbox.base_url}")
        print(f"==> destination: {destination.label}, database {DEMO_DATABASE!r}")
        recreate_database(destination, DEMO_DATABASE)
        env = meltano_env(sandbox.base_url, destination, DEMO_DATABASE, Path(state_dir))
        # The sandbox enforces the spec's 120 requests a minute per key; the account's five
        # keys, pooled, let the member ledgers load in seconds rather than minutes.
        env["TAP_GUESTDATA_API_KEYS"] = json.dumps(list(OWNER_KEYS))
        print("==> meltano install (log: output/demo-meltano.log)")
        run_meltano(["install", *DEMO_PLUGINS], env, log_path)
        print("==> meltano --environment=dev run guestdata-to-postgres")
        run_meltano(["--environment=dev", "run", "guestdata-to-postgres"], env, log_path)
        truth = sandbox.truth(OWNER_KEYS[0])
        checks = check_database(destination.conninfo(DEMO_DATABASE), truth, TARGET_SCHEMA)
        print()
        print(report(checks))
        print()
        print(marts_report(destination.conninfo(DEMO_DATABASE)))
        print()
        print(query_hint(destination, args.embedded_pgdata))
    elapsed = time.monotonic() - started
    ok = all(check.matches for check in checks)
    print(f"==> {'OK' if ok else 'MISMATCH'}: demo finished in {elapsed:.0f} s")
    return 0 if ok else 1


# ---------------------------------------------------------------- the marts' report

BUSIEST_VENUES = """
SELECT venue_name, sum(visits)
FROM {schema}.fct_venue_daily
WHERE date > (SELECT max(date) FROM {schema}.fct_venue_daily) - 30
GROUP BY venue_id, venue_name ORDER BY sum(visits) DESC, venue_name LIMIT 5
"""
OPT_IN_RATE = """
SELECT sum(marketing_opt_ins), sum(visits),
       (SELECT count(*) FROM {schema}.marketing_audience)
FROM {schema}.fct_venue_daily
WHERE date > (SELECT max(date) FROM {schema}.fct_venue_daily) - 30
"""
TIER_MIX = """
SELECT coalesce(tier_name, 'untiered'), count(*)
FROM {schema}.dim_members WHERE member_status = 'active'
GROUP BY tier_name, tier_key ORDER BY min(coalesce(points_12m, 0)) , 1
"""
REDEMPTION_RATES = """
SELECT offer_name, issued, redeemed, redemption_rate
FROM {schema}.fct_offer_performance WHERE issued > 0
ORDER BY redemption_rate DESC, offer_name
"""


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def marts_report(conninfo: str, schema: str = MODELS_SCHEMA) -> str:
    """Four answers a venue operator asks first, read from the marts dbt built."""
    with psycopg.connect(conninfo) as connection:

        def rows(query: str) -> list[tuple]:
            return connection.execute(query.format(schema=schema)).fetchall()

        busiest = rows(BUSIEST_VENUES)
        opt_ins, visits, audience = rows(OPT_IN_RATE)[0]
        tiers = rows(TIER_MIX)
        offers = rows(REDEMPTION_RATES)
    members = sum(count for _, count in tiers)
    lines = [f"Report from the marts (schema {schema}):", "  busiest venues, last 30 days:"]
    lines += [f"    {name:<40}{count:>7} visits" for name, count in busiest]
    lines.append(
        f"  opt-in rate, last 30 days: {percent(opt_ins or 0, visits or 0)} of {visits or 0} "
        f"visits; {audience} people may be sent marketing now"
    )
    mix = ", ".join(f"{tier} {percent(count, members)}" for tier, count in tiers)
    lines.append(f"  member tier mix ({members} active): {mix}")
    lines.append("  redemption rate by offer:")
    lines += [
        f"    {name:<40}{percent(float(rate), 1):>5} ({redeemed} of {issued})"
        for name, issued, redeemed, rate in offers
    ]
    return "\n".join(lines)


def query_hint(destination: Destination, pgdata: Path) -> str:
    query = f"SELECT count(*) FROM {TARGET_SCHEMA}.guests"
    if destination.host.startswith("/"):
        # The embedded server stops with the demo; pgserver restarts it on the same data.
        code = (
            "import pgserver, psycopg; "
            f"s = pgserver.get_server('{pgdata}'); "
            f"print(psycopg.connect(s.get_uri('{DEMO_DATABASE}')).execute('{query}').fetchone())"
        )
        return f'Query it: .venv/bin/python -c "{code}"'
    url = f"postgresql://{destination.user}@{destination.host}:{destination.port}/{DEMO_DATABASE}"
    return f'Query it: psql {url} -c "{query}"'


if __name__ == "__main__":
    sys.path.insert(0, str(PROJECT_ROOT))
    try:
        sys.exit(main())
    except RuntimeError as error:  # a failed meltano step: its log tail is in the message
        print(f"demo failed: {error}", file=sys.stderr)
        sys.exit(1)
