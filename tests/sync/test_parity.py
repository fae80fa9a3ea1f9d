"""agentlib_sync mirrors agentlib: the same names, the same signatures, no engine logic."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

import agentlib
import agentlib_sync
from agentlib_sync import _facade, _portal

REFERENCES = ("Agent", "RemoteAgent", "Session", "Turn")
#: The facade's own names, which agentlib has no twin of: trio code passes the same settings
#: to ``open_runtime``.
FACADE_ONLY = ("configure",)

#: Longest body (docstring, blank lines and comments left out) of a facade method: one call
#: through the portal (or to agentlib's Agent), with its arguments spelled one a line.
MAX_BODY_LINES = 14


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


ASYNC_METHODS = [
    (cls, name) for cls in REFERENCES for name in sorted(public_methods(getattr(agentlib, cls)))
]
AWAITED_METHODS = [
    (cls, name)
    for cls, name in ASYNC_METHODS
    if inspect.iscoroutinefunction(getattr(getattr(agentlib, cls), name))
    or inspect.isasyncgenfunction(getattr(getattr(agentlib, cls), name))
]
SHARED_NAMES = sorted(set(agentlib.__all__) - set(REFERENCES))


def facade_functions() -> list[Any]:
    """Every function the facade's reference classes define or inherit, properties included."""
    found = []
    for cls_name in REFERENCES:
        # Its own, and those of the base it shares with the other door (agentlib_sync._twins).
        for cls in getattr(agentlib_sync, cls_name).__mro__[:-1]:
            for name, member in vars(cls).items():
                if isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    found.append(pytest.param(member, id=f"{cls.__name__}.{name}"))
    return found


def function_node(fn: Callable[..., Any]) -> tuple[ast.FunctionDef, list[str]]:
    source = textwrap.dedent(inspect.getsource(fn))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node, source.splitlines()


def body_without_docstring(node: ast.FunctionDef) -> list[ast.stmt]:
    body = list(node.body)
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    return body


def is_portal(expression: ast.expr) -> bool:
    """Whether ``expression`` names the portal (or its module) in the facade's namespace."""
    if isinstance(expression, ast.Name):
        value = getattr(_facade, expression.id, None)
        return value is _portal.portal or value is _portal
    if isinstance(expression, ast.Attribute):
        return is_portal(expression.value) or expression.attr == "portal"
    return False


def portal_calls(node: ast.AST) -> int:
    return sum(
        1
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call)
        and isinstance(sub.func, ast.Attribute)
        and is_portal(sub.func.value)
    )


# -- the same surface ---------------------------------------------------------------------


@pytest.mark.parametrize("cls", REFERENCES)
def test_sync_references_have_exactly_the_async_public_methods(cls: str) -> None:
    assert sorted(public_methods(getattr(agentlib_sync, cls))) == sorted(
        public_methods(getattr(agentlib, cls))
    )


@pytest.mark.parametrize(("cls", "name"), ASYNC_METHODS, ids=[f"{c}.{n}" for c, n in ASYNC_METHODS])
def test_each_async_method_has_a_blocking_twin_with_the_same_parameters(
    cls: str, name: str
) -> None:
    async_method = getattr(getattr(agentlib, cls), name)
    sync_method = getattr(getattr(agentlib_sync, cls), name, None)
    assert sync_method is not None, f"agentlib_sync.{cls} has no {name}"
    assert parameters(sync_method) == parameters(async_method)
    assert not inspect.iscoroutinefunction(sync_method)
    assert not inspect.isasyncgenfunction(sync_method)


def test_agent_constructors_take_the_same_parameters() -> None:
    assert parameters(agentlib_sync.Agent.__init__) == parameters(agentlib.Agent.__init__)


def test_the_references_are_the_facades_own_classes() -> None:
    for cls in REFERENCES:
        assert getattr(agentlib_sync, cls) is not getattr(agentlib, cls)


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_every_other_public_name_is_agentlibs_own_object(name: str) -> None:
    assert getattr(agentlib_sync, name) is getattr(agentlib, name)


def test_all_names_the_same_public_names_as_agentlib_and_the_facades_own() -> None:
    assert sorted(agentlib_sync.__all__) == sorted([*agentlib.__all__, *FACADE_ONLY])
    assert len(set(agentlib_sync.__all__)) == len(agentlib_sync.__all__)


def test_all_is_sorted() -> None:
    assert agentlib_sync.__all__ == sorted(agentlib_sync.__all__)


def test_configure_takes_the_settings_open_runtime_takes() -> None:
    assert parameters(agentlib_sync.configure) == parameters(agentlib.open_runtime)


def test_every_name_in_all_exists() -> None:
    for name in agentlib_sync.__all__:
        assert hasattr(agentlib_sync, name), name


# -- a thin facade ------------------------------------------------------------------------


@pytest.mark.parametrize("fn", facade_functions())
def test_facade_method_bodies_are_short(fn: Callable[..., Any]) -> None:
    qualname = fn.__qualname__
    node, lines = function_node(fn)
    body = body_without_docstring(node)
    if not body:
        return
    start, end = body[0].lineno, max(stmt.end_lineno or stmt.lineno for stmt in body)
    code = [
        line for line in lines[start - 1 : end] if line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) <= MAX_BODY_LINES, (
        f"{qualname} has {len(code)} lines of code: engine logic belongs in agentlib"
    )


@pytest.mark.parametrize("fn", facade_functions())
def test_facade_methods_have_no_loops_retries_or_waits(fn: Callable[..., Any]) -> None:
    qualname = fn.__qualname__
    node, _ = function_node(fn)
    banned = (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.Await)
    found = [type(sub).__name__ for sub in ast.walk(node) if isinstance(sub, banned)]
    assert not found, f"{qualname} holds engine logic ({', '.join(found)}): put it in agentlib"


@pytest.mark.parametrize(
    ("cls", "name"), AWAITED_METHODS, ids=[f"{c}.{n}" for c, n in AWAITED_METHODS]
)
def test_each_blocking_twin_of_an_async_method_is_one_portal_call(cls: str, name: str) -> None:
    node, _ = function_node(getattr(getattr(agentlib_sync, cls), name))
    assert portal_calls(node) == 1


def test_the_facade_module_leaves_threads_and_loops_to_the_portal() -> None:
    tree = ast.parse(inspect.getsource(_facade))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & {"threading", "_thread", "trio", "asyncio", "concurrent", "queue"}


@pytest.mark.parametrize(("cls", "name"), ASYNC_METHODS, ids=[f"{c}.{n}" for c, n in ASYNC_METHODS])
def test_each_blocking_twin_points_to_its_async_twin(cls: str, name: str) -> None:
    doc = inspect.getdoc(getattr(getattr(agentlib_sync, cls), name)) or ""
    assert f"agentlib.{cls}.{name}" in doc
