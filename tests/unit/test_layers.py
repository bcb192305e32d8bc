"""The package's floors, read from its imports: each import goes down a floor or stays in its
own package, and no two files import each other in a circle. Every import counts, those
made inside a function or only for type checking too: a reader follows them all.

The floors, bottom to top (docs/architecture.md draws them):
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "taskherd"

FLOORS: list[tuple[str, ...]] = [
    ("model",),  # records and event constants
    ("policy",),  # pure rules
    ("config",),  # the settings and their parsing
    ("host", "store"),  # the machine; the database
    ("runtimes", "backups", "importers"),  # agent programs; backups; schedules people run
    ("ops",),  # every operation a door offers
    ("services",),  # the daemon's loops
    ("api", "agent"),  # the HTTP door; the agent's door and MCP
    ("daemon", "doctor"),  # what puts a node together; what checks it
    ("cli",),  # the command line
    ("demo", "__main__"),  # the demo; `python -m taskherd`
]
FLOOR_OF = {part: level for level, parts in enumerate(FLOORS) for part in parts}
__doc__ += "\n".join(f"    {level} {' '.join(parts)}" for level, parts in enumerate(FLOORS))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports, anywhere in its text."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("taskherd"):
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def floor(name: str) -> int | None:
    """The floor of a module: its first part below taskherd; None for the package itself
    (taskherd/__init__.py, the lazy public names)."""
    parts = name.split(".")
    if len(parts) == 1:
        return None
    return FLOOR_OF.get(parts[1], -1)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for name, targets in graph.items():
        for target in targets:
            here, there = floor(name), floor(target)
            if here is None or there is None:
                continue
            if name.split(".")[1] == target.split(".")[1]:
                continue  # within its own package
            if there >= here:
                found.append(f"{name} (floor {here}) imports {target} (floor {there})")
    return sorted(found)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more files (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in graph.get(name, ()):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_every_part_of_the_package_has_a_floor():
    unplaced = sorted({name.split(".")[1] for name in modules()
                       if floor(name) == -1})
    assert unplaced == [], f"give these a floor in FLOORS: {unplaced}"


def test_imports_only_go_down():
    assert upward_imports(import_graph()) == []


def test_no_two_files_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


def test_the_ground_floor_holds_few_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def test_the_checks_see_an_upward_import_and_a_circle():
    graph = {"taskherd.policy.a": {"taskherd.store.b"}, "taskherd.store.b": {"taskherd.policy.a"}}
    assert upward_imports(graph) == [
        "taskherd.policy.a (floor 1) imports taskherd.store.b (floor 3)"]
    assert circles(graph) == [["taskherd.policy.a", "taskherd.store.b"]]
