"""Profile the tap's hot path with pyinstrument and say where the time goes.

    .venv/bin/python bench/profile.py [--size medium] [--streams guests,members,rewards,redemptions]
                                      [--writer asis] [--conformance asis]

Runs the tap (through bench/tap_variant.py, so SDK switches can be tried without editing the tap)
under pyinstrument against a sandbox with limits off, stdout to /dev/null. Prints the share of
samples per cost category (each sample goes to the highest-priority category on its stack), the
top functions by self time and the top of the call tree. Saves the session (.pyisession), the text
report and the HTML report in bench/results/.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import harness
from harness import LIST_ENDPOINTS

# (category, substrings of "file_path:function"), highest priority first: a sample whose stack
# contains a frame matching an earlier category is counted there.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("start-up (imports)", ("<frozen importlib", "importlib/__init__")),
    ("type conformance", ("singer_sdk/helpers/conform", "singer_sdk/helpers/_typing")),
    ("schema validation", ("jsonschema", "fastjsonschema", ":_validate")),
    (
        "JSON encoding + stdout",
        (
            "singer_sdk/singerlib/encoding",
            "singer_sdk/contrib/msgspec",
            "singer_sdk/io_base",
            "simplejson/encoder",
            "simplejson/__init__.py:dumps",
            "json/encoder",
            "orjson",
            "msgspec",
            ":write_message",
        ),
    ),
    (
        "JSON decoding",
        ("json/decoder", "json/__init__.py:loads", "simplejson/decoder", "requests/models.py:json"),
    ),
    ("JSONPath extraction", ("jsonpath", "singer_sdk/helpers/jsonpath")),
    ("rate limiter / sleeping", ("time.sleep", ":sleep", "limit")),
    ("HTTP (requests, urllib3, socket)", ("requests/", "urllib3/", "http/client", "socket.py")),
    ("record messages, selection, maps", ("singer_sdk/mapper", "_generate_record_messages")),
    ("state and bookmarks", ("singer_sdk/helpers/_state", "increment_state")),
    ("logging and metrics", ("logging/", "singer_sdk/metrics")),
    ("dates and times", ("pendulum", "dateutil", "_strptime", "datetime")),
    ("tap code", ("tap_guestdata/",)),
    ("SDK, other", ("singer_sdk/",)),
]


def categorise(chain: Sequence[str]) -> str:
    for category, needles in CATEGORIES:
        if any(needle in frame for frame in chain for needle in needles):
            return category
    return "other"


def self_time_by_category(root: Any) -> Counter[str]:
    totals: Counter[str] = Counter()
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        frame, chain = stack.pop()
        chain = (*chain, f"{frame.file_path or ''}:{frame.function}")
        if (own := frame.total_self_time) > 0:
            totals[categorise(chain)] += own
        stack.extend((child, chain) for child in frame.children if not child.is_synthetic)
    return totals


def self_time_by_function(root: Any) -> Counter[str]:
    totals: Counter[str] = Counter()
    stack = [root]
    while stack:
        frame = stack.pop()
        if (own := frame.total_self_time) > 0:
            totals[f"{frame.function}  {frame.file_path_short or ''}:{frame.line_no or ''}"] += own
        stack.extend(child for child in frame.children if not child.is_synthetic)
    return totals


def hot_tree(root: Any, total: float, threshold: float, limit: int) -> list[str]:
    """The call tree with same-named sibling frames merged (e.g. one `sync` per stream), frames
    holding at least `threshold` of the samples, heaviest first; import subtrees not opened."""
    lines: list[str] = []
    stack: list[tuple[list[Any], int]] = [([root], 0)]
    while stack and len(lines) < limit:
        frames, depth = stack.pop()
        seconds = sum(frame.time for frame in frames)
        first = frames[0]
        where = f"{first.file_path_short or ''}:{first.line_no or ''}"
        name = f"{'.' * depth}{first.function}  {where}"
        lines.append(f"{seconds:7.2f}s {seconds / total:4.0%} {name}")
        if "importlib" in (first.file_path or ""):
            continue
        groups: dict[tuple[str, str], list[Any]] = {}
        for frame in frames:
            for child in frame.children:
                if not child.is_synthetic:
                    key = (child.function, child.file_path or "")
                    groups.setdefault(key, []).append(child)
        heavy = [
            group
            for group in groups.values()
            if sum(child.time for child in group) >= threshold * total
        ]
        heavy.sort(key=lambda group: sum(child.time for child in group))
        stack.extend((group, depth + 1) for group in heavy)
    return lines


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0], default_size="medium")
    parser.add_argument("--streams", default=",".join(LIST_ENDPOINTS), help="comma list, or all")
    parser.add_argument("--writer", default="asis")
    parser.add_argument("--conformance", default="asis")
    parser.add_argument("--tree-lines", type=int, default=80)
    parser.add_argument("--threshold", type=float, default=0.03)
    parser.add_argument("--tap", default=harness.TAP_CLASS, help="module:Class")
    args = parser.parse_args()
    from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer
    from pyinstrument.session import Session

    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    label = f"profile-{args.size}-{args.writer}-{args.conformance}"
    session_path = harness.RESULTS / f"{label}.pyisession"
    selected = None if args.streams == "all" else args.streams.split(",")
    with (
        harness.sandbox(args.size, args.seed, limits=False) as server,
        harness.scratch_dir("profile") as scratch,
    ):
        config = harness.tap_config(server, extra=harness.parse_settings(args.tap_setting))
        tap = harness.prepare_tap(scratch, config, selected)
        argv = [str(harness.VENV_PYTHON), "-m", "pyinstrument", "-r", "pyisession"]
        argv += ["-o", str(session_path), str(harness.BENCH / "tap_variant.py")]
        argv += ["--tap", args.tap, "--writer", args.writer, "--conformance", args.conformance]
        argv += ["--"]
        argv += tap.arguments()
        completed = subprocess.run(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=harness.process_env()
        )
        if completed.returncode != 0:
            sys.exit(f"profiled run failed:\n{completed.stderr.decode()[-3000:]}")

    session = Session.load(str(session_path))
    root = session.root_frame()
    assert root is not None
    total = root.time
    categories = self_time_by_category(root)
    print(f"\nprofile of the tap, size={args.size}, streams={args.streams}, writer={args.writer}")
    print(f"conformance={args.conformance}; {total:.2f}s sampled (under the profiler)\n")
    harness.print_table(
        ["category", "seconds", "share"],
        [(name, seconds, f"{seconds / total:.0%}") for name, seconds in categories.most_common()],
    )
    print("\ntop functions by self time:")
    harness.print_table(
        ["function", "seconds", "share"],
        [
            (name, seconds, f"{seconds / total:.0%}")
            for name, seconds in self_time_by_function(root).most_common(25)
        ],
    )
    tree = ConsoleRenderer(unicode=False, color=False, show_all=True).render(session)
    (harness.RESULTS / f"{label}.txt").write_text(tree)
    (harness.RESULTS / f"{label}.html").write_text(HTMLRenderer().render(session))
    print(f"\nhot path (frames with >= {args.threshold:.0%} of the samples):")
    print("\n".join(hot_tree(root, total, args.threshold, args.tree_lines)))
    harness.save_results(
        "profile",
        {
            "size": args.size,
            "streams": args.streams,
            "writer": args.writer,
            "conformance": args.conformance,
            "sampled_s": total,
            "categories_s": dict(categories.most_common()),
            "session": str(session_path.relative_to(harness.ROOT)),
        },
    )


if __name__ == "__main__":
    main()
