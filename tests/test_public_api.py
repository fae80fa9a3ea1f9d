"""The public names of agentlib, agentlib_sync and agentlib.store (SPEC sections 1, 10 and
14)."""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest

import agentlib
import agentlib.store
import agentlib_sync

#: The modules that define the data classes and errors `agentlib_sync` re-exports unchanged.
DATA_MODULES = (
    agentlib._data._content,
    agentlib._data._entries,
    agentlib._data._history_items,
    agentlib._data._callbacks,
    agentlib._data._records,
    agentlib._data._events,
    agentlib._data._errors,
)
DATA_NAMES = sorted(
    {name for module in DATA_MODULES for name in module.__all__}
    | {"parse_history", "structure", "unstructure"}
)
ERROR_NAMES = sorted(agentlib._data._errors.__all__)


def public_namespace(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_all_is_sorted() -> None:
    assert agentlib.__all__ == sorted(agentlib.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(set(agentlib.__all__)) == len(agentlib.__all__)


def test_all_lists_exactly_the_public_names() -> None:
    assert set(agentlib.__all__) == public_namespace(agentlib)


def test_version_is_a_string_outside_all() -> None:
    assert isinstance(agentlib.__version__, str)
    assert "__version__" not in agentlib.__all__


@pytest.mark.parametrize(
    "name",
    [
        name
        for name in agentlib.__all__
        if isinstance(getattr(agentlib, name), (type, types.FunctionType))
    ],
)
def test_public_class_or_function_belongs_to_agentlib(name: str) -> None:
    assert getattr(agentlib, name).__module__ == "agentlib"


@pytest.mark.parametrize("name", DATA_NAMES)
def test_data_and_error_names_are_public(name: str) -> None:
    assert name in agentlib.__all__


@pytest.mark.parametrize("name", DATA_NAMES)
def test_agentlib_sync_reexports_data_and_error_names_unchanged(name: str) -> None:
    assert getattr(agentlib_sync, name) is getattr(agentlib, name)


@pytest.mark.parametrize("name", DATA_NAMES)
def test_agentlib_sync_all_lists_data_and_error_names(name: str) -> None:
    assert name in agentlib_sync.__all__


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_is_an_sdk_error(name: str) -> None:
    assert issubclass(getattr(agentlib, name), agentlib.SdkError)


def test_validation_error_is_also_a_value_error() -> None:
    assert issubclass(agentlib.ValidationError, ValueError)


def test_validation_error_keeps_one_line_per_problem() -> None:
    error = agentlib.ValidationError("invalid x: a @ $.a; b @ $.b", ("a @ $.a", "b @ $.b"))

    assert (str(error), error.errors) == ("invalid x: a @ $.a; b @ $.b", ("a @ $.a", "b @ $.b"))


def test_model_error_keeps_status_and_body() -> None:
    error = agentlib.ModelError("the model failed", status=503, body="overloaded")

    assert (str(error), error.status, error.body) == ("the model failed", 503, "overloaded")


@pytest.mark.parametrize(
    "name",
    [
        "ContentBlock",
        "Entry",
        "Callback",
        "TurnState",
        "Event",
        "HistoryImportEntry",
        "ApprovalAnswer",
    ],
)
def test_union_aliases_are_unions_of_public_classes(name: str) -> None:
    union = getattr(agentlib, name)

    assert typing.get_origin(union) is typing.Union
    for member in typing.get_args(union):
        cls = typing.get_origin(member) or member
        assert getattr(agentlib, cls.__name__) is cls


def error_tree(text: str) -> dict[str, str]:
    """Each error of a tree drawn as in ``agentlib/_data/_errors.py``, with its parent's name."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (column, name) of the branch being drawn
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "SdkError":
            stack = [(len(line) - len(line.lstrip()) - 4, "SdkError")]
            continue
        if not stack or "── " not in line:
            continue
        column = line.index("── ")
        name = line[column + 3 :].split()[0]
        while stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1]
        stack.append((column, name))
    return parents


TREES = {
    "the docstring of agentlib/_data/_errors.py": agentlib._data._errors.__doc__ or "",
    "docs/index.md": (Path(__file__).resolve().parent.parent / "docs" / "index.md").read_text(),
}


@pytest.mark.parametrize("where", sorted(TREES))
def test_the_error_tree_shows_every_error_under_its_base_class(where: str) -> None:
    tree = error_tree(TREES[where])
    errors = {
        name
        for name in agentlib.__all__
        if isinstance(getattr(agentlib, name), type)
        and issubclass(getattr(agentlib, name), agentlib.SdkError)
        and name != "SdkError"
    }
    assert set(tree) == errors, f"{where} does not draw every error agentlib exports"
    for name, parent in tree.items():
        assert getattr(agentlib, name).__bases__[0] is getattr(agentlib, parent), (
            f"{where} draws {name} under {parent}"
        )


def test_the_lease_errors_are_caught_as_a_busy_session_and_a_store_error() -> None:
    assert issubclass(agentlib.LeaseRefused, agentlib.SessionBusyError)
    assert issubclass(agentlib.LeaseLost, agentlib.StoreError)
    refused = agentlib.LeaseRefused("s-1", "runtime-a", 1_000_030.0)
    assert (refused.session_id, refused.owner, refused.until) == ("s-1", "runtime-a", 1_000_030.0)
    assert "s-1" in str(refused)
    assert "retry" in str(refused)
    lost = agentlib.LeaseLost("s-1", "runtime-b", store="/data/s.db")
    assert "/data/s.db" in str(lost)
    assert "let the session go" in str(lost)


# --- agentlib.store -----------------------------------------------------------------------

STORE_NAMES = agentlib.store.__all__


def test_store_all_is_sorted_and_lists_exactly_the_public_names() -> None:
    store_names = agentlib.store.__all__
    assert store_names == sorted(set(store_names))
    assert set(STORE_NAMES) == public_namespace(agentlib.store)


@pytest.mark.parametrize(
    "name",
    [
        "Store",
        "StoredSession",
        "Op",
        "SessionRow",
        "EventRow",
        "EntryRow",
        "TurnRow",
        "StepRow",
        "SteerRow",
        "CallbackRow",
        "KeyRow",
        "PruneRow",
        "StoreError",
        "StoreSchemaError",
        "LeaseLost",
        "LeaseRefused",
        "MemoryStore",
        "SQLiteStore",
        "open_store",
    ],
)
def test_store_exports_what_a_store_author_needs(name: str) -> None:
    assert name in STORE_NAMES


@pytest.mark.parametrize("name", [name for name in STORE_NAMES if name in agentlib.__all__])
def test_store_names_agentlib_exports_are_agentlibs_objects(name: str) -> None:
    assert getattr(agentlib.store, name) is getattr(agentlib, name)
    assert getattr(agentlib.store, name).__module__ == "agentlib"


@pytest.mark.parametrize(
    "name",
    [
        name
        for name in STORE_NAMES
        if name not in agentlib.__all__
        and isinstance(getattr(agentlib.store, name), (type, types.FunctionType))
    ],
)
def test_store_class_or_function_belongs_to_agentlib_store(name: str) -> None:
    assert getattr(agentlib.store, name).__module__ == "agentlib.store"


def test_op_is_the_union_of_the_row_classes() -> None:
    rows = {name for name in STORE_NAMES if name.endswith("Row")}
    assert {member.__name__ for member in typing.get_args(agentlib.store.Op)} == rows


def test_a_runtime_shows_only_what_its_users_use() -> None:
    """The runtime's public side (and its reference page): its store, its name in the
    leases, its settings and its health; the engine's methods are underscored."""
    public = {name for name in dir(agentlib.Runtime) if not name.startswith("_")}
    public |= {field.name for field in agentlib.Runtime.__attrs_attrs__}  # type: ignore[attr-defined]
    public = {name for name in public if not name.startswith("_")}
    assert public == {"event_retention", "health", "lease_seconds", "owner", "store"}
    assert agentlib_sync.Runtime is agentlib.Runtime
    assert agentlib_sync.RuntimeHealth is agentlib.RuntimeHealth


async def test_a_runtime_reports_its_settings_and_health(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    async with agentlib.open_runtime(store, event_retention=50, lease_seconds=7) as runtime:
        assert runtime is agentlib.current_runtime()
        assert isinstance(runtime.store, agentlib.SQLiteStore)
        assert runtime.lease_seconds == 7
        assert runtime.event_retention == 50
        host, pid, _ = runtime.owner.split(":")
        assert host
        assert pid.isdigit()
        assert runtime.health() == agentlib.RuntimeHealth(writable=True, reason=None)
    closed = runtime.health()
    assert not closed.writable
    assert closed.reason
