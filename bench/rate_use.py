"""Rate use, limits on: the tap's achieved requests per (time-scaled) minute divided by the
allowance, with 1 key and with 5 keys, and the 429s it drew, from the sandbox's request log.

    .venv/bin/python bench/rate_use.py [--size medium] [--time-scale 0.05] [--latency 0.02]
                                       [--windows 8] [--streams members,member_ledger]

The sandbox enforces spec 8 (120 requests per key per rolling minute, 600 per address) with the
minute scaled to 60*time_scale seconds; every answer is delayed by --latency. The tap gets
requests_per_minute=120 and its window setting = 60*time_scale, syncs a request-heavy selection
(one ledger read per member) and is stopped after --windows scaled minutes. Use per key = mean
accepted requests per full scaled minute, counted from the key's first request, over the last
full minute, divided by 120. The tap is the only client while it runs.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
import time
from collections import Counter
from typing import Any

import harness
from harness import OWNER_KEYS

ALLOWANCE_PER_KEY = 120  # spec 8: requests per key per minute
ALLOWANCE_PER_ADDRESS = 600  # spec 8: requests per IP address per minute
TAP_STARTUP_S = 4.0  # generous: the tap's imports and discovery before its first request


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0], default_size="medium")
    parser.add_argument("--time-scale", type=float, default=0.05)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds added per answer")
    parser.add_argument("--windows", type=int, default=8, help="scaled minutes to run for")
    parser.add_argument("--streams", default="members,member_ledger")
    parser.add_argument("--key-counts", default="1,5")
    args = parser.parse_args()
    minute = 60 * args.time_scale
    names = harness.tap_setting_names()
    window_setting = harness.window_setting_name(names)
    if window_setting is None:
        print(f"# the tap has no rate-limit window setting ({sorted(names)})", file=sys.stderr)
    extra: dict[str, Any] = {window_setting: minute} if window_setting else {}
    extra.update(harness.parse_settings(args.tap_setting))

    results = []
    with (
        harness.sandbox(args.size, args.seed, limits=True, time_scale=args.time_scale) as server,
        harness.scratch_dir("rate-use") as scratch,
    ):
        server.latency(args.latency)
        for key_count in [int(count) for count in args.key_counts.split(",")]:
            keys = OWNER_KEYS[:key_count]
            config = harness.tap_config(
                server, keys, requests_per_minute=ALLOWANCE_PER_KEY, extra=extra
            )
            directory = scratch / f"keys-{key_count}"
            directory.mkdir()
            tap = harness.prepare_tap(directory, config, args.streams.split(","))
            time.sleep(2 * minute)  # let the previous run's rolling minute drain
            server.clear_requests()
            run = harness.run_measured(
                f"tap, {key_count} key(s)",
                tap.argv(),
                stop_after_s=TAP_STARTUP_S + args.windows * minute + 0.5,
            )
            log = [entry for entry in server.requests_log() if entry.get("key") in keys]
            results.append(analyse(log, keys, minute, run))
            print(f"# {key_count} key(s): {len(log):,} requests logged", file=sys.stderr)
    report(args, minute, window_setting, results)


def timestamp(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def analyse(
    log: list[dict[str, Any]], keys: list[str], minute: float, run: harness.RunResult
) -> dict[str, Any]:
    statuses = Counter(entry["status"] for entry in log)
    accepted = [entry for entry in log if entry["status"] != 429]
    if not accepted:
        sys.exit(f"no accepted requests logged; tap stderr:\n{run.stderr_tail}")
    times = [timestamp(entry["time"]) for entry in accepted]
    first, last = min(times), max(times)
    full_minutes = math.floor((last - first) / minute)
    per_key_use: dict[str, float] = {}
    for key in keys:
        counts = Counter(
            math.floor((timestamp(entry["time"]) - first) / minute)
            for entry in accepted
            if entry["key"] == key
        )
        per_minute = [counts.get(index, 0) for index in range(full_minutes)]
        per_key_use[key] = (
            (sum(per_minute) / len(per_minute) / ALLOWANCE_PER_KEY) if per_minute else 0.0
        )
    overall = sum(per_key_use.values()) / len(keys)
    return {
        "keys": len(keys),
        "full_minutes": full_minutes,
        "requests": len(log),
        "accepted": len(accepted),
        "status_counts": dict(statuses),
        "count_429": statuses.get(429, 0),
        "use": overall,
        "use_per_key": per_key_use,
        "requests_per_scaled_minute": overall * ALLOWANCE_PER_KEY * len(keys),
        "records": run.total_records,
        "tap_returncode": run.returncode,
    }


def report(
    args: Any, minute: float, window_setting: str | None, results: list[dict[str, Any]]
) -> None:
    print(
        f"\nrate use, size={args.size}, streams={args.streams}, scaled minute={minute:g}s "
        f"(time_scale={args.time_scale}), latency={args.latency * 1000:g} ms, "
        f"tap requests_per_minute=120, {window_setting}={minute:g}"
    )
    sequential_ceiling = minute / args.latency if args.latency else math.inf
    print(
        f"note: one connection in sequence can make at most ~{sequential_ceiling:,.0f} requests "
        f"per scaled minute at this latency; 5 keys allow {5 * ALLOWANCE_PER_KEY} "
        f"(the per-address ceiling is {ALLOWANCE_PER_ADDRESS})\n"
    )
    rows = [
        (
            result["keys"],
            result["full_minutes"],
            result["accepted"],
            result["requests_per_scaled_minute"],
            result["keys"] * ALLOWANCE_PER_KEY,
            result["use"],
            min(result["use_per_key"].values()),
            result["count_429"],
        )
        for result in results
    ]
    harness.print_table(
        ["keys", "full min", "accepted", "req/min", "allowance", "use", "worst key", "429s"], rows
    )
    print()
    for result in results:
        verdict = "met" if result["use"] >= 0.95 and result["count_429"] == 0 else "NOT met"
        print(
            f"{result['keys']} key(s): use {result['use']:.3f} of the allowance, "
            f"{result['count_429']} x 429 (target >= 0.95 and 0: {verdict})"
        )
        if result["full_minutes"] < 3:
            print(f"  warning: only {result['full_minutes']} full scaled minutes; use --windows")
    harness.save_results(
        "rate_use",
        {
            "size": args.size,
            "seed": args.seed,
            "time_scale": args.time_scale,
            "latency_s": args.latency,
            "streams": args.streams,
            "window_setting": window_setting,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
