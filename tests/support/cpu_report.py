"""`--cpu-durations=N`: the N tests that cost the most CPU (this process and the children it
waited for: Meltano, dbt, sandboxes), beside pytest's `--durations` (wall time, which on a
loaded machine mostly measures the neighbours). CI's budget is CPU on two cores."""

from __future__ import annotations

import resource
import time
from collections.abc import Generator

import pytest

_COSTS_KEY = pytest.StashKey[dict[str, tuple[float, float]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=0,
        metavar="N",
        help="list the N tests that cost the most CPU (own and waited children's; setup included)",
    )


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator:
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        return (yield)
    finally:
        costs = item.config.stash.setdefault(_COSTS_KEY, {})
        costs[item.nodeid] = (_cpu_seconds() - cpu, time.monotonic() - wall)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    count = config.getoption("--cpu-durations")
    costs = config.stash.get(_COSTS_KEY, {})
    if not count or not costs:
        return
    total = sum(cpu for cpu, _ in costs.values())
    terminalreporter.write_sep("=", f"most CPU, {count} tests (of {total:.0f} CPU s in tests)")
    for nodeid, (cpu, wall) in sorted(costs.items(), key=lambda kv: -kv[1][0])[:count]:
        terminalreporter.write_line(f"{cpu:7.1f} CPU s {wall:7.1f} wall s  {nodeid}")
