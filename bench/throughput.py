"""Throughput, limits off: the tap's records per second end to end against a bare `requests` +
`json` baseline and against dlt's `rest_api` source, side by side in one run.

    .venv/bin/python bench/throughput.py [--size large] [--repeat 3] [--what-if] [--no-dlt]
                                         [--without-drift]

All contenders read the same list endpoints (LIST_ENDPOINTS in harness.py) from one sandbox with
rate limits off. Each run is a whole process (start-up included), timed start to exit; runs are
interleaved (bare, tap, dlt, bare, tap, dlt, ...) and the median is reported, so the ratios come
from the same minutes of a shared machine. The tap's and the bare baseline's stdout go to a sink
that counts RECORD lines per stream and discards them; dlt writes uncompressed JSONL files.
--what-if adds rows for the tap with SDK switches applied from outside (bench/tap_variant.py) and
for a minimal singer-sdk tap over the same endpoints (bench/minimal_tap.py), the SDK's floor.
--without-drift adds the tap without its schema-drift check of every row (tap_variant.py
--drift off): the check's cost, side by side.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
from harness import LIST_ENDPOINTS, OWNER_KEYS, RunResult

WHAT_IF = {
    "tap+sdk-record-messages": ["--record-messages", "sdk"],
    "tap+msgspec": ["--writer", "msgspec"],
    "tap+msgspec+noconform": ["--writer", "msgspec", "--conformance", "none"],
    "tap+buffered+noconform": ["--writer", "buffered", "--conformance", "none"],
    "sdk-minimal": ["--tap", "minimal_tap:MinimalTap"],
    "sdk-minimal+msgspec+noconform": [
        "--tap",
        "minimal_tap:MinimalTap",
        "--writer",
        "msgspec",
        "--conformance",
        "none",
    ],
}


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0], default_size="large")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--streams", default=",".join(LIST_ENDPOINTS))
    parser.add_argument("--no-dlt", action="store_true", help="skip the dlt contender")
    parser.add_argument("--what-if", action="store_true", help="add tap rows with SDK switches")
    parser.add_argument("--without-drift", action="store_true", help="add the tap, drift off")
    args = parser.parse_args()
    streams = args.streams.split(",")
    dlt_python = None if args.no_dlt else harness.ensure_dlt_venv()

    with (
        harness.sandbox(args.size, args.seed, limits=False) as server,
        harness.scratch_dir("throughput") as scratch,
    ):
        expected = dict(harness.list_endpoint_truth(server, streams))
        settings = harness.parse_settings(args.tap_setting)
        # Warm-up (not counted): every contender once on the smallest stream, so bytecode caches
        # and the sandbox's first-request work are out of the measured runs.
        warm_up = contenders(
            server, scratch / "warm-up", ["redemptions"], settings, args, dlt_python
        )
        for label, run in warm_up.items():
            print(f"# warm-up {label}", file=sys.stderr)
            run(-1)
        measured = contenders(server, scratch / "measured", streams, settings, args, dlt_python)
        runs: dict[str, list[RunResult]] = {label: [] for label in measured}
        labels = list(measured)
        for repeat in range(args.repeat):
            order = labels[repeat % len(labels) :] + labels[: repeat % len(labels)]
            for label in order:
                result = measured[label](repeat)
                runs[label].append(result)
                print(
                    f"# run {repeat + 1}/{args.repeat} {label}: {result.total_records:,} records "
                    f"in {result.wall_s:.2f}s (cpu {result.cpu_s:.2f}s)",
                    file=sys.stderr,
                )

    report(args, streams, expected, runs)


def contenders(
    server: Any,
    directory: Path,
    streams: list[str],
    settings: dict[str, Any],
    args: Any,
    dlt_python: Path | None,
) -> dict[str, Callable[[int], RunResult]]:
    """label -> run(repeat) for every contender, all reading `streams` with the same key."""
    directory.mkdir(parents=True)
    key = OWNER_KEYS[0]
    tap = harness.prepare_tap(directory, harness.tap_config(server, extra=settings), streams)
    common = ["--base-url", server.base_url, "--api-key", key, "--streams", ",".join(streams)]
    bare_argv = [str(harness.VENV_PYTHON), str(harness.BENCH / "bare_baseline.py"), *common]
    runners: dict[str, Callable[[int], RunResult]] = {
        "bare": lambda _repeat: harness.run_measured("bare", bare_argv),
        "tap": lambda _repeat: harness.run_measured("tap", tap.argv()),
    }
    if dlt_python is not None:
        runners["dlt"] = lambda repeat: run_dlt(dlt_python, common, directory / f"dlt-{repeat}")
    variant = [str(harness.VENV_PYTHON), str(harness.BENCH / "tap_variant.py")]
    if args.without_drift:
        without_drift = [*variant, "--drift", "off", "--", *tap.arguments()]
        runners["tap-without-drift"] = lambda _repeat: harness.run_measured(
            "tap-without-drift", without_drift
        )
    if args.what_if:
        minimal_config = {"base_url": server.base_url, "api_key": key, "streams": streams}
        minimal = ["--config", str(harness.write_json(directory, "minimal.json", minimal_config))]
        for label, switches in WHAT_IF.items():
            tap_arguments = minimal if label.startswith("sdk-minimal") else tap.arguments()
            if not label.startswith("sdk-minimal"):
                switches = ["--tap", harness.TAP_CLASS, *switches]
            argv = [*variant, *switches, "--", *tap_arguments]
            runners[label] = lambda _repeat, label=label, argv=argv: harness.run_measured(
                label, argv
            )
    return runners


def run_dlt(python: Path, common: list[str], workdir: Path) -> RunResult:
    workdir.mkdir(parents=True, exist_ok=True)
    summary = workdir / "summary.json"
    argv = [str(python), str(harness.BENCH / "dlt_baseline.py"), *common]
    argv += ["--workdir", str(workdir), "--summary", str(summary)]
    result = harness.run_measured("dlt", argv)
    result.records = json.loads(summary.read_text())["records"]
    return result


def report(
    args: Any, streams: list[str], expected: dict[str, int], runs: dict[str, list[RunResult]]
) -> None:
    total = sum(expected.values())
    print(f"\nthroughput, size={args.size}, limits off, streams={','.join(streams)}")
    print(f"ground truth: {expected} = {total:,} records; median of {args.repeat} runs each\n")
    medians: dict[str, dict[str, float]] = {}
    rows = []
    problems = []
    for label, results in runs.items():
        wall = harness.median([result.wall_s for result in results])
        cpu = harness.median([result.cpu_s for result in results])
        rss = max(result.max_rss_mb for result in results)
        medians[label] = {"wall_s": wall, "cpu_s": cpu, "records_per_s": total / wall}
        for result in results:
            if result.records != expected:
                problems.append(f"{label}: counted {result.records}, truth {expected}")
        rows.append((label, results[0].total_records, wall, total / wall, cpu, rss))
    harness.print_table(["contender", "records", "wall s", "records/s", "cpu s", "peak MB"], rows)

    ratios: dict[str, float] = {}
    tap = medians["tap"]["records_per_s"]
    print()
    for label, figures in medians.items():
        if label == "bare":
            continue
        ratio = figures["records_per_s"] / medians["bare"]["records_per_s"]
        ratios[f"{label}/bare"] = ratio
        print(f"{label} / bare (records per second): {ratio:.2f}")
    if "tap-without-drift" in medians:
        drift_ratio = tap / medians["tap-without-drift"]["records_per_s"]
        ratios["tap/tap-without-drift"] = drift_ratio
        print(f"tap / tap-without-drift (records per second): {drift_ratio:.3f}")
    if "dlt" in medians:
        ratios["tap/dlt"] = tap / medians["dlt"]["records_per_s"]
        print(f"tap / dlt (records per second):  {ratios['tap/dlt']:.2f}")
    # Client CPU per record: the same comparison without the sandbox's share of the machine.
    for label in [name for name in medians if name != "bare"]:
        ratios[f"{label}/bare cpu"] = medians["bare"]["cpu_s"] / medians[label]["cpu_s"]
    print(
        "by the client's own CPU seconds (bare cpu / contender cpu): "
        + ", ".join(
            f"{label} {medians['bare']['cpu_s'] / medians[label]['cpu_s']:.2f}"
            for label in medians
            if label != "bare"
        )
    )
    print(
        f"targets: tap/bare >= 0.5 -> {'met' if ratios['tap/bare'] >= 0.5 else 'NOT met'}"
        + (
            f"; tap/dlt > 1 -> {'met' if ratios['tap/dlt'] > 1 else 'NOT met'}"
            if "tap/dlt" in ratios
            else ""
        )
    )
    if problems:
        print("\nRECORD COUNT MISMATCH (ratios are not comparable):")
        for problem in problems:
            print(f"  {problem}")
    else:
        print("record counts: every run of every contender matched the ground truth")
    harness.save_results(
        "throughput",
        {
            "size": args.size,
            "seed": args.seed,
            "streams": streams,
            "expected": expected,
            "medians": medians,
            "ratios": ratios,
            "count_mismatches": problems,
            "runs": {
                label: [result.as_dict() for result in results] for label, results in runs.items()
            },
        },
    )


if __name__ == "__main__":
    main()
