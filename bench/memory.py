"""Peak memory: the tap process's peak RSS for a full sync at small, medium and large sizes.

    .venv/bin/python bench/memory.py [--sizes small,medium,large] [--streams all]

Peak RSS is the tap process's own `ru_maxrss` from `os.wait4` (the sandbox and the counting sink
are other processes). Limits off. Target: flat, large within 20% of small.
"""

from __future__ import annotations

import sys
from typing import Any

import harness


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,medium,large")
    parser.add_argument("--streams", default="all", help="comma list, or all")
    args = parser.parse_args()
    selected = None if args.streams == "all" else args.streams.split(",")
    results: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        with (
            harness.sandbox(size, args.seed, limits=False) as server,
            harness.scratch_dir(f"memory-{size}") as scratch,
        ):
            config = harness.tap_config(server, extra=harness.parse_settings(args.tap_setting))
            tap = harness.prepare_tap(scratch, config, selected)
            run = harness.run_measured(f"tap {size}", tap.argv())
        results.append(
            {
                "size": size,
                "peak_rss_mb": run.max_rss_mb,
                "records": run.total_records,
                "state_messages": run.state_messages,
                "wall_s": run.wall_s,
                "by_stream": run.records,
            }
        )
        print(f"# {size}: {run.max_rss_mb:.1f} MB, {run.total_records:,} records", file=sys.stderr)

    print(f"\npeak memory of the tap process, full sync, streams={args.streams}\n")
    smallest = results[0]["peak_rss_mb"]
    rows = [
        (
            result["size"],
            result["records"],
            result["peak_rss_mb"],
            result["peak_rss_mb"] / smallest,
            result["wall_s"],
        )
        for result in results
    ]
    harness.print_table(
        ["size", "records", "peak RSS MB", f"/ {results[0]['size']}", "wall s"], rows
    )
    growth = results[-1]["peak_rss_mb"] / smallest
    verdict = "met" if growth <= 1.2 else "NOT met"
    print(
        f"\n{results[-1]['size']} / {results[0]['size']} peak RSS: {growth:.2f} "
        f"(target <= 1.20: {verdict})"
    )
    harness.save_results(
        "memory", {"seed": args.seed, "streams": args.streams, "results": results, "growth": growth}
    )


if __name__ == "__main__":
    main()
