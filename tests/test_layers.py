"""The import graph of ``agentlib/``: its folders are its layers, and each imports only
the folders below it; no module cycle.

Every import counts, at any depth of a module (in a function, under ``TYPE_CHECKING``): a
cycle that only type checkers see still ties two modules together. Between folders, the
imports that run count (an annotation may name what a layer above returns, as ``Agent``'s
methods name ``Session``). Importing a submodule runs its subpackage's ``__init__`` too,
which counts; ``agentlib/__init__.py`` itself, the public face that re-exports everything,
is the top and counts for nobody.
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

#: agentlib's folders (and the modules that stand alone at its top), from the bottom up: a
#: folder imports only from the layers below its own, never from a peer of its layer.
LAYERS: list[set[str]] = [
    {"_data"},  # the frozen values that cross the API, the converter, the error tree
    {"_trio"},  # the current runtime's front door, worker threads
    {"_models", "_store"},  # the Model protocol and the models; the Store and the stores
    {"_toolkit"},  # tools, hooks, session inputs, output types, JSON schemas
    {"_mcp", "_sandboxes"},  # the tool sources: MCP servers, a session's computer
    {"_define"},  # Agent, and AgentDefinition, which the engine reads it through
    {"_engine"},  # the state machine, the event log, the runtime and its drivers
    {"_references"},  # Session and Turn, open_runtime
    {"_http"},  # the server and its client
    {"_cli", "store", "testing", "aio"},  # the command line; the public sub-namespaces
    {"__main__"},  # python -m agentlib
]
LAYER = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}


def folder(name: str) -> str:
    """The folder of agentlib that module ``name`` is in (or its name, at the top)."""
    return name.split(".")[1]


def in_folders(*folders: str) -> set[str]:
    return {name for name in MODULES if name != "agentlib" and folder(name) in folders}


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


def reachable(start: str | set[str], graph: dict[str, set[str]] = GRAPH) -> set[str]:
    seen: set[str] = set()
    todo = [start] if isinstance(start, str) else list(start)
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


def test_every_module_is_in_a_folder_of_the_layers() -> None:
    assert {folder(name) for name in MODULES if name != "agentlib"} - set(LAYER) == set()


@pytest.mark.parametrize("layer", sorted(LAYER, key=lambda name: (LAYER[name], name)))
def test_a_folder_imports_only_from_the_layers_below_its_own(layer: str) -> None:
    upward = sorted(
        f"{name} imports {target}"
        for name in in_folders(layer)
        for target in RUNNING[name]
        if folder(target) != layer and LAYER[folder(target)] >= LAYER[layer]
    )
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles() == []


def test_the_state_machine_imports_neither_trio_nor_the_store() -> None:
    # The machine is a module of the engine, or a package of it: its modules may import
    # one another and what the engine stands on, but neither the store nor the rest of the
    # engine, nor anything that imports trio.
    machine = {
        name
        for name in MODULES
        if name == "agentlib._engine._machine" or name.startswith("agentlib._engine._machine.")
    }
    assert machine
    below = reachable(machine) - machine - {"agentlib._engine"}
    assert {name for name in below if folder(name) in {"_store", "_engine"}} == set()
    for name in machine | below:
        source = MODULES[name].read_text()
        assert "import trio" not in source, f"{name}, below the machine, imports trio"


def test_agent_imports_nothing_of_the_engine_nor_of_the_references() -> None:
    # Its methods name the Session they return for type checkers: no module runs for it.
    below = reachable(in_folders("_define"), RUNNING)
    assert {name for name in below if LAYER[folder(name)] > LAYER["_define"]} == set()


def test_the_store_never_imports_the_engine() -> None:
    below = reachable(in_folders("_store"))
    assert {name for name in below if folder(name) not in {"_data", "_trio", "_store"}} == set()


def test_the_engine_never_imports_a_reference() -> None:
    # Not even for type checkers: what the engine tells the layers above, it tells through
    # what they wait on.
    below = reachable(in_folders("_engine"))
    assert {name for name in below if LAYER[folder(name)] > LAYER["_engine"]} == set()


def test_the_facade_reaches_into_no_module_of_the_engine() -> None:
    # Besides agentlib's public face, agentlib_sync takes a few private seams: the runtime
    # it opens (_references._open), its threads (_trio._threads), the options and session
    # classes it wraps, the store it opens, add_note; never the engine, nor the HTTP layer.
    reached = set()
    for path in (ROOT / "agentlib_sync").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                reached.add(node.module or "")
            elif isinstance(node, ast.Import):
                reached.update(alias.name for alias in node.names)
    private = {name for name in reached if name.startswith("agentlib._")}
    assert private
    assert {folder(name) for name in private} <= {
        "_data",
        "_trio",
        "_models",
        "_store",
        "_references",
    }


def test_the_asyncio_door_builds_on_the_public_face_and_nothing_imports_it() -> None:
    # Its references are the public face's, run through agentlib_sync's portal (outside this
    # graph), as the blocking facade's are; of agentlib's private modules it names only the
    # types of its signatures, as the facade does, and the queue that hands calls from one
    # thread to another's loop, as the portal does.
    door = {name for name in MODULES if name.startswith("agentlib.aio")}
    imported_by_door = set().union(*(GRAPH[name] for name in door)) - door
    assert imported_by_door <= {
        "agentlib._references",
        "agentlib._references._session",
        "agentlib._models",
        "agentlib._models._options",
        "agentlib._trio",
        "agentlib._trio._threads",
    }
    importers = {name for name in GRAPH if GRAPH[name] & door} - door
    assert importers == set(), "agentlib's own modules never import the asyncio door"
