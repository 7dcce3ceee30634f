"""Kill-and-resume cost: for each stream, SIGKILL a sync at several points and resume it from the
last STATE it wrote; print (killed + resumed requests) / uninterrupted requests, per stream.

    PYTHONPATH=tests:scripts .venv/bin/python bench/resume.py [--size medium] \
        [--streams guests,rewards] [--at 0.25,0.6,0.9]

It drives the reliability suite's own kill-and-resume code (tests/support/kill_resume.py), so it
runs with the path pytest's `pythonpath` setting gives the tests (tests/ and scripts/).

By default each stream runs on the account the test suite uses for it (STREAM_SIZES): big
enough that one page, the most a kill can waste, is a small share of the sync.

Requests are counted in the sandbox's request log; one request at a time (`max_workers=1`) and
STATE after every row, so the figure is what the resume logic keeps. The run also fails if the
two runs together lost a row (compared with the sandbox's ground truth).
"""

from __future__ import annotations

import argparse
import sys

from guestdata_sandbox.testing import SandboxProcess
from support.kill_resume import KILL_POINTS, STREAM_SIZES, measure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["small", "medium", "large"], help="one size for all")
    parser.add_argument("--streams", default=",".join(STREAM_SIZES))
    parser.add_argument("--at", default=",".join(map(str, KILL_POINTS)), help="kill points")
    args = parser.parse_args()
    fractions = [float(value) for value in args.at.split(",")]
    print("| stream | account | uninterrupted requests | kill at | killed + resumed | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for stream in args.streams.split(","):
        size = args.size or STREAM_SIZES[stream]
        with SandboxProcess(size=size, seed=42, limits=False) as server:
            for result in measure(server, stream, fractions):
                worst = max(worst, result.ratio)
                print(
                    f"| {stream} | {size} | {result.uninterrupted_requests} | "
                    f"{result.fraction:.0%} | {result.killed_requests} + "
                    f"{result.resumed_requests} | {result.ratio:.3f} |",
                    flush=True,
                )
    print(f"\nworst ratio: {worst:.3f} (target: at most 1.10); rows lost: 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
