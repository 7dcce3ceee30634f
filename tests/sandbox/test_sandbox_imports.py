"""The sandbox's modules import each other top-down: no cycle, and no import hidden in a function.

Imports are read from the source with `ast`, so an import inside a function or under
`if TYPE_CHECKING:` counts as an edge just like one at the top of the module.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

PACKAGE = "guestdata_sandbox"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations, f"{PACKAGE} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def module_trees() -> dict[str, tuple[ast.Module, str]]:
    """Every module of the package by dotted name: its parsed source and the package it is in."""
    trees = {}
    for path in sorted(package_dir().rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(package_dir()).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = ".".join(parts)
        else:
            package = ".".join(parts[:-1])
        trees[".".join(parts)] = (ast.parse(path.read_text(), filename=str(path)), package)
    return trees


def imported_modules(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> set[str]:
    """The package's modules one import statement names (`from pkg import mod` names `pkg.mod`)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    base = node.module or ""
    if node.level:  # relative: `.` is the importing module's package, `..` its parent
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    submodules = {f"{base}.{alias.name}" for alias in node.names} & known
    return submodules or ({base} & known)


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Edges between the package's modules, and the imports made inside a function."""
    trees = module_trees()
    known = set(trees)
    graph: dict[str, set[str]] = {name: set() for name in trees}
    nested = []
    for module, (tree, package) in trees.items():
        functions = [node for node in ast.walk(tree) if isinstance(node, FUNCTIONS)]
        in_functions = {node for function in functions for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = imported_modules(node, package, known) - {module}
                graph[module] |= targets
                if targets and node in in_functions:
                    nested.append(f"{module}:{node.lineno} imports {sorted(targets)}")
    return graph, nested


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first module repeated at the end), or None if the graph is acyclic."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_sandbox_import_graph_has_no_cycle() -> None:
    graph, _ = import_graph()
    assert len(graph) > 10, f"found only {sorted(graph)}: is {PACKAGE} where it should be?"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_sandbox_imports_its_own_modules_at_module_level() -> None:
    """A function-level import is how a cycle hides; the package needs none."""
    _, nested = import_graph()
    assert nested == []


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
