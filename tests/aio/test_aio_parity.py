"""agentlib.aio mirrors agentlib: the same names and signatures, each awaited method one
hop into the engine, no engine logic."""

from __future__ import annotations

import ast
import inspect
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

import agentlib
import agentlib.aio
from agentlib.aio import _facade, _loop

REFERENCES = ("Agent", "RemoteAgent", "Session", "Turn")
#: The door's own names, which agentlib has no twin of: trio code passes the same settings
#: to ``open_runtime``.
DOOR_ONLY = ("configure",)
#: Longest body (docstring, blank lines and comments left out) of a door method: one hop,
#: with its arguments spelled one a line.
MAX_BODY_LINES = 14


@pytest.fixture
def event_loop_kind() -> str:
    """These tests read the door's code and run none of it on a loop: once is enough."""
    return "none"


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default, ``self`` left out (annotations may differ)."""
    found = list(inspect.signature(fn).parameters.values())
    if found and found[0].name == "self":
        found = found[1:]
    return [(p.name, p.kind, p.default) for p in found]


def trio_method(cls: str, name: str) -> Callable[..., Any]:
    method: Callable[..., Any] = getattr(getattr(agentlib, cls), name)
    return method


ASYNC_METHODS = [
    (cls, name) for cls in REFERENCES for name in sorted(public_methods(getattr(agentlib, cls)))
]
AWAITED = [
    (cls, name)
    for cls, name in ASYNC_METHODS
    if inspect.iscoroutinefunction(trio_method(cls, name))
]
ITERATED = [
    (cls, name) for cls, name in ASYNC_METHODS if inspect.isasyncgenfunction(trio_method(cls, name))
]
SHARED_NAMES = sorted(set(agentlib.__all__) - set(REFERENCES))


def ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{cls}.{name}" for cls, name in pairs]


def door_method(cls: str, name: str) -> Callable[..., Any]:
    method: Callable[..., Any] = getattr(getattr(agentlib.aio, cls), name)
    return method


def function_node(fn: Callable[..., Any]) -> ast.AsyncFunctionDef | ast.FunctionDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    assert isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef))
    return node


def door_functions() -> list[Any]:
    """Every function the door's reference classes define or inherit, properties included."""
    found = []
    for cls_name in REFERENCES:
        # Its own, and those of the base it shares with the other door (agentlib_sync._twins).
        for cls in getattr(agentlib.aio, cls_name).__mro__[:-1]:
            for name, member in vars(cls).items():
                if isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    found.append(pytest.param(member, id=f"{cls.__name__}.{name}"))
    return found


def hops(node: ast.AST) -> int:
    """The calls of the loop module's functions (``_loop.call``, ``_loop.iterate``...)."""
    return sum(
        1
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and isinstance(sub.func.value, ast.Name)
        and getattr(_facade, sub.func.value.id, None) is _loop
    )


# -- the same surface ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", REFERENCES)
def test_door_references_have_exactly_the_trio_public_methods(cls: str) -> None:
    assert sorted(public_methods(getattr(agentlib.aio, cls))) == sorted(
        public_methods(getattr(agentlib, cls))
    )


@pytest.mark.parametrize(("cls", "name"), ASYNC_METHODS, ids=ids(ASYNC_METHODS))
def test_each_trio_method_has_an_asyncio_twin_with_the_same_parameters(cls: str, name: str) -> None:
    assert parameters(door_method(cls, name)) == parameters(trio_method(cls, name))


@pytest.mark.parametrize(("cls", "name"), AWAITED, ids=ids(AWAITED))
def test_each_awaited_trio_method_is_awaited_in_the_door_too(cls: str, name: str) -> None:
    assert inspect.iscoroutinefunction(door_method(cls, name))


@pytest.mark.parametrize(("cls", "name"), ITERATED, ids=ids(ITERATED))
def test_each_async_iterator_of_agentlib_is_an_async_iterator_of_the_door(
    cls: str, name: str
) -> None:
    method = door_method(cls, name)
    assert not inspect.iscoroutinefunction(method)
    assert "AsyncIterator" in str(inspect.signature(method).return_annotation)


def test_methods_that_send_no_request_are_plain_in_both() -> None:
    for cls, name in ASYNC_METHODS:
        if (cls, name) not in AWAITED and (cls, name) not in ITERATED:
            assert not inspect.iscoroutinefunction(door_method(cls, name)), f"{cls}.{name}"


def test_agent_constructors_take_the_same_parameters() -> None:
    assert parameters(agentlib.aio.Agent.__init__) == parameters(agentlib.Agent.__init__)


def test_the_references_are_the_doors_own_classes() -> None:
    for cls in REFERENCES:
        assert getattr(agentlib.aio, cls) is not getattr(agentlib, cls)


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_every_other_public_name_is_agentlibs_own_object(name: str) -> None:
    assert getattr(agentlib.aio, name) is getattr(agentlib, name)


def test_all_names_the_same_public_names_as_agentlib_and_the_doors_own() -> None:
    assert sorted(agentlib.aio.__all__) == sorted([*agentlib.__all__, *DOOR_ONLY])
    assert agentlib.aio.__all__ == sorted(agentlib.aio.__all__)


def test_configure_takes_the_settings_open_runtime_takes() -> None:
    assert parameters(agentlib.aio.configure) == parameters(agentlib.open_runtime)


# -- a thin door --------------------------------------------------------------------------


@pytest.mark.parametrize("fn", door_functions())
def test_door_method_bodies_are_short(fn: Callable[..., Any]) -> None:
    node = function_node(fn)
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
    if not body:
        return
    start, end = body[0].lineno, max(stmt.end_lineno or stmt.lineno for stmt in body)
    code = [
        line for line in lines[start - 1 : end] if line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) <= MAX_BODY_LINES, f"{fn.__qualname__}: engine logic belongs in agentlib"


@pytest.mark.parametrize("fn", door_functions())
def test_door_methods_have_no_loops_retries_or_waits_of_their_own(fn: Callable[..., Any]) -> None:
    banned = (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith)
    found = [type(sub).__name__ for sub in ast.walk(function_node(fn)) if isinstance(sub, banned)]
    assert not found, f"{fn.__qualname__} holds engine logic ({', '.join(found)})"


@pytest.mark.parametrize(("cls", "name"), [*AWAITED, *ITERATED], ids=ids([*AWAITED, *ITERATED]))
def test_each_twin_is_one_hop(cls: str, name: str) -> None:
    node = function_node(door_method(cls, name))
    assert hops(node) == 1
    awaits = sum(isinstance(sub, ast.Await) for sub in ast.walk(node))
    assert awaits == (1 if (cls, name) in AWAITED else 0)


def test_the_door_module_leaves_threads_and_loops_to_the_loop_module() -> None:
    tree = ast.parse(inspect.getsource(_facade))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & {"threading", "_thread", "trio", "asyncio", "concurrent", "queue"}


@pytest.mark.parametrize(("cls", "name"), ASYNC_METHODS, ids=ids(ASYNC_METHODS))
def test_each_twin_points_to_its_trio_twin(cls: str, name: str) -> None:
    assert f"agentlib.{cls}.{name}" in (inspect.getdoc(door_method(cls, name)) or "")


def test_importing_agentlib_imports_neither_asyncio_nor_the_door() -> None:
    code = "import sys, agentlib; print(sorted({'asyncio', 'agentlib.aio'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", agentlib.aio.__all__)
def test_every_own_name_of_the_door_has_a_reference_entry(name: str) -> None:
    page = (
        pathlib.Path(__file__).parents[2] / "docs" / "reference" / "agentlib_aio.md"
    ).read_text()
    own = f"::: agentlib.aio.{name}\n" in page
    assert own or getattr(agentlib.aio, name) is getattr(agentlib, name)
