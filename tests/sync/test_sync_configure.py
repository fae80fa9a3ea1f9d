"""agentlib_sync.configure: a script picks its store (and the runtime's other settings) in
code, before its first session; called later, it stops the engine and the next call starts
one on the new settings."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import trio

import agentlib
import agentlib_sync as agents

from ._support import Gate, call_tool


@pytest.fixture(autouse=True)
def default_settings() -> Iterator[None]:
    """Each test leaves the engine as it found it: in memory, or on ``AGENTLIB_STORE``."""
    yield
    agents.configure()


@agents.tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order's id.
    """
    return f"refunded {order}"


def refunder() -> agents.Agent:
    return agents.Agent(
        "refunder",
        model=agents.ScriptedModel([call_tool("refund", order="A-17"), "Refunded."]),
        tools=[refund],
    )


def stored_session(store: str, session_id: str, turn_id: str) -> agentlib.TurnState[object]:
    """The turn as a new runtime on ``store`` reads it (in trio, outside the engine)."""

    async def read() -> agentlib.TurnState[object]:
        async with agentlib.open_runtime(store):
            agent = agentlib.Agent("refunder", model=agentlib.ScriptedModel([]))
            return await agent.session(session_id).turn(turn_id).get()

    return trio.run(read)


def test_a_store_configured_in_code_keeps_the_scripts_sessions(tmp_path: pathlib.Path) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agents.configure(store=store)
    session = refunder().start_session()
    record = session.run("Refund A-17.")
    assert isinstance(record, agents.Blocked)
    agents.configure()  # the engine lets go of the file
    again = stored_session(store, session.id, record.turn_id)
    assert isinstance(again, agentlib.Blocked)
    assert again.callbacks[0].id == record.callbacks[0].id


def test_the_store_given_in_code_wins_over_agentlib_store(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_STORE", f"sqlite:///{tmp_path / 'from_env.db'}")
    agents.configure(store=f"sqlite:///{tmp_path / 'in_code.db'}")
    agents.Agent("a", model=agents.ScriptedModel(["hi"])).start_session().run("hello")
    assert (tmp_path / "in_code.db").exists()
    assert not (tmp_path / "from_env.db").exists()


def test_without_a_store_in_code_agentlib_store_is_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_STORE", f"sqlite:///{tmp_path / 'from_env.db'}")
    agents.configure(lease_seconds=60)
    agents.Agent("a", model=agents.ScriptedModel(["hi"])).start_session().run("hello")
    assert (tmp_path / "from_env.db").exists()


def test_memory_given_in_code_wins_over_agentlib_store(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_STORE", f"sqlite:///{tmp_path / 'from_env.db'}")
    agents.configure(store=":memory:")
    agents.Agent("a", model=agents.ScriptedModel(["hi"])).start_session().run("hello")
    assert not (tmp_path / "from_env.db").exists()


def test_configure_after_the_first_session_moves_the_next_sessions_to_the_new_store(
    tmp_path: pathlib.Path,
) -> None:
    agent = agents.Agent("a", model=agents.ScriptedModel(["one", "two", "three"]))
    before = agent.start_session()
    assert isinstance(before.run("hello"), agents.Completed)
    agents.configure(store=f"sqlite:///{tmp_path / 'later.db'}")
    after = agent.start_session()
    assert isinstance(after.run("hello"), agents.Completed)
    assert (tmp_path / "later.db").exists()
    with pytest.raises(RuntimeError, match="closed"):  # the stopped engine's session
        before.run("again")


def test_configure_ends_a_running_turn_as_interrupted() -> None:
    gate = Gate()
    session = agents.Agent("a", model=agents.ScriptedModel([gate])).start_session()
    turn = session.start_turn("a long job")
    gate.wait_reached()
    agents.configure()
    record = turn.get()
    assert isinstance(record, agents.Interrupted)
    assert record.cause == "cancelled"


def test_a_turn_blocked_on_a_durable_store_goes_on_in_the_next_engine(
    tmp_path: pathlib.Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agents.configure(store=store)
    agent = refunder()
    session = agent.start_session()
    record = session.run("Refund A-17.")
    assert isinstance(record, agents.Blocked)
    agents.configure(store=store)  # a new engine on the same file, as a new script would
    turn = agent.session(session.id).turn(record.turn_id)
    assert isinstance(turn.answer(record.callbacks[0].id, agents.AllowApproval()), agents.Answered)
    final = turn.result()
    assert isinstance(final, agents.Completed)
    assert final.output == "Refunded."


def test_an_unknown_store_is_refused_at_once_and_the_settings_stay(
    tmp_path: pathlib.Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agents.configure(store=store)
    with pytest.raises(ValueError, match=r"unknown store 'sqlite:/x\.db'.*'sqlite:///path"):
        agents.configure(store="sqlite:/x.db")
    agents.Agent("a", model=agents.ScriptedModel(["hi"])).start_session()
    assert (tmp_path / "sessions.db").exists()


def test_a_bad_lease_is_said_by_the_first_call_and_the_next_settings_start(
    tmp_path: pathlib.Path,
) -> None:
    agent = agents.Agent("a", model=agents.ScriptedModel(["hi"]))
    agents.configure(lease_seconds=-1)
    with pytest.raises(ValueError, match="lease_seconds must be a positive number, not -1"):
        agent.start_session()
    agents.configure(store=f"sqlite:///{tmp_path / 'sessions.db'}", lease_seconds=5)
    assert isinstance(agent.start_session().run("hello"), agents.Completed)


def test_a_store_in_a_missing_directory_says_the_directory_does_not_exist(
    tmp_path: pathlib.Path,
) -> None:
    missing = tmp_path / "missing" / "dir"
    agents.configure(store=f"sqlite:///{missing / 'x.db'}")
    with pytest.raises(agents.StoreError) as raised:
        agents.Agent("a", model=agents.ScriptedModel(["hi"])).start_session()
    assert f"the directory {missing} does not exist" in str(raised.value)
    assert not missing.exists()


SCRIPT = """
import json, sys
import agentlib_sync as agents

agents.configure(store="sqlite:///" + sys.argv[1])


@agents.tool(requires_approval=True)
def refund(order: str) -> str:
    \"\"\"Refund an order.\"\"\"
    return f"refunded {order}"


call = agents.ToolCallRequest(name="refund", arguments={"order": "A-17"})
agent = agents.Agent(
    "refunder",
    model=agents.ScriptedModel([agents.ModelReply(tool_calls=[call]), "Refunded."]),
    tools=[refund],
)
if len(sys.argv) == 2:
    session = agent.start_session()
    record = session.run("Refund A-17.")
    print(json.dumps([session.id, record.turn_id, record.callbacks[0].id]))
else:
    session_id, turn_id, callback_id = json.loads(sys.argv[2])
    turn = agent.session(session_id).turn(turn_id)
    turn.answer(callback_id, agents.AllowApproval())
    print(turn.result().output_or_raise())
"""


def run_script(*arguments: str, env: dict[str, str]) -> str:
    """Run SCRIPT with ``arguments`` in a new interpreter; its output."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_script_run_again_on_the_store_it_configured_answers_its_blocked_turn(
    tmp_path: pathlib.Path,
) -> None:
    path = str(tmp_path / "sessions.db")
    # AGENTLIB_STORE names another file: the store given in code wins.
    env = {**os.environ, "AGENTLIB_STORE": f"sqlite:///{tmp_path / 'other.db'}"}
    ids = run_script(path, env=env)
    assert len(json.loads(ids)) == 3
    assert run_script(path, ids.strip(), env=env) == "Refunded.\n"
    assert not (tmp_path / "other.db").exists()
