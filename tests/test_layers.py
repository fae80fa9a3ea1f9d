"""The import graph of ``agentlib/``: no cycle, and each layer depends only on those below.

Every import counts, at any depth of a module (in a function, under ``TYPE_CHECKING``): a
cycle that only type checkers see still ties two modules together. Importing a submodule
runs its subpackage's ``__init__`` too, which counts; ``agentlib/__init__.py`` itself, the
public face that re-exports everything, is the top and counts for nobody.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentlib"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def typing_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``, by id."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            found.update(id(inner) for part in node.body for inner in ast.walk(part))
    return found


def imported(name: str, *, typing: bool = True) -> Iterator[str]:
    """The agentlib modules ``name`` imports, at any depth of its code (those it imports for
    type checkers only too, with ``typing``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = set() if typing else typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # "from . import _machine" imports the module _machine; "from ._x import y", _x.
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != "agentlib" and target != name:
                yield target
                # A submodule's subpackage runs first (unless the importer is in it: its
                # package is running already).
                parent = target.rpartition(".")[0]
                while parent and parent != "agentlib":
                    if not name.startswith(parent + ".") and parent != name:
                        yield parent
                    parent = parent.rpartition(".")[0]


GRAPH = {name: set(imported(name)) for name in MODULES if name != "agentlib"}
#: The imports that run: what a module needs in order to work, not only to be checked.
RUNNING = {name: set(imported(name, typing=False)) for name in MODULES if name != "agentlib"}


def reachable(start: str, graph: dict[str, set[str]] = GRAPH) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles() == []


def test_the_state_machine_imports_neither_trio_nor_the_store() -> None:
    below = reachable("agentlib._engine._machine")
    assert not {name for name in below if name.startswith("agentlib._store")}
    assert not {name for name in below if name.startswith("agentlib._engine.")} - {
        "agentlib._engine"
    }
    for name in {"agentlib._engine._machine", *below}:
        source = MODULES[name].read_text()
        assert "import trio" not in source, f"{name}, below the machine, imports trio"


def test_agent_imports_nothing_of_the_engine_nor_of_the_references() -> None:
    # Its methods name the Session they return for type checkers: no module runs for it.
    below = reachable("agentlib._agent", RUNNING)
    assert not {name for name in below if name.startswith("agentlib._engine")}
    assert "agentlib._session" not in below
    assert "agentlib._open" not in below


def test_the_store_never_imports_the_engine() -> None:
    below = set()
    for name in MODULES:
        if name.startswith("agentlib._store"):
            below |= reachable(name)
    assert not {name for name in below if name.startswith("agentlib._engine")}


@pytest.mark.parametrize("name", ["agentlib._engine._machine", "agentlib._engine._runtime"])
def test_the_engine_never_imports_a_reference(name: str) -> None:
    assert "agentlib._session" not in reachable(name)
    assert "agentlib._open" not in reachable(name)


def test_the_asyncio_door_builds_on_the_public_face_and_nothing_imports_it() -> None:
    # Its references are the public face's, run through agentlib_sync's portal (outside this
    # graph), as the blocking facade's are; of agentlib's private modules it names only the
    # types of its signatures, as the facade does.
    door = {name for name in MODULES if name.startswith("agentlib.aio")}
    imported_by_door = set().union(*(GRAPH[name] for name in door)) - door
    assert imported_by_door <= {
        "agentlib._session",
        "agentlib._models",
        "agentlib._models._options",
    }
    importers = {name for name in GRAPH if GRAPH[name] & door} - door
    assert importers == set(), "agentlib's own modules never import the asyncio door"
