"""BashkitSandbox: bashkit's bash interpreter in this process over a virtual file system, as
a session's computer. Commands run in the real interpreter."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated, Any

import attrs
import pytest
import trio

pytest.importorskip("bashkit", reason="BashkitSandbox needs the bashkit extra")

import agentlib
from agentlib import (
    Agent,
    BashkitSandbox,
    Completed,
    Depends,
    ModelReply,
    ModelRequest,
    SandboxCallbackContext,
    SandboxError,
    SandboxHook,
    ScriptedModel,
    SessionInput,
    ToolCallRequest,
    ToolResultEntry,
)


def call(name: str, **arguments: Any) -> ModelReply:
    """A model step that calls one sandbox tool."""
    return ModelReply(tool_calls=[ToolCallRequest(name=f"file_system.{name}", arguments=arguments)])


def agent_with(sandbox: BashkitSandbox, *steps: Any) -> Agent:
    return Agent(name="worker", model=ScriptedModel(steps), environment=sandbox)


async def results_of(
    session: agentlib.Session, record: agentlib.TurnState[Any]
) -> list[ToolResultEntry]:
    """The tool results of the turn ``record`` ended."""
    return [
        event.entry
        async for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agentlib.EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]


def text(result: ToolResultEntry) -> str:
    return result.content[0].text  # type: ignore[union-attr]


async def run_steps(sandbox: BashkitSandbox, *steps: Any) -> list[ToolResultEntry]:
    """The tool results of one turn of a new session whose model takes ``steps``."""
    async with agentlib.open_runtime():
        session = await agent_with(sandbox, *steps).start_session()
        with trio.fail_after(30):
            record = await session.run("go")
            assert isinstance(record, Completed), record
            results = await results_of(session, record)
            await session.cancel()
    return results


@pytest.mark.usefixtures("transport")
async def test_a_model_writes_a_script_runs_it_and_reads_its_result() -> None:
    script = "for n in 1 2 3; do echo $((n * n)); done > squares.txt\necho wrote\n"
    write, ran, read = await run_steps(
        BashkitSandbox(),
        call("write_file", path="tools/squares.sh", content=script),
        call("bash", command="bash tools/squares.sh && wc -l < squares.txt"),
        call("read_file", path="squares.txt"),
        "done",
    )
    assert text(write) == f"wrote {len(script)} bytes to tools/squares.sh"
    assert ran.structured_content == {
        "exit_code": 0,
        "stdout": "wrote\n3\n",
        "stderr": "",
        "timed_out": False,
    }
    assert text(read) == "1\n4\n9\n"


async def test_a_command_starts_in_the_workspace_with_its_env_and_leaves_no_shell_state() -> None:
    first, second, listed = await run_steps(
        BashkitSandbox(env={"GREETING": "hello"}),
        call("bash", command="pwd; echo $HOME $GREETING; mkdir -p a/b; cd /tmp; X=1"),
        call("bash", command="pwd; echo x=$X; exit 3"),
        call("list_files"),
        "done",
    )
    assert first.structured_content["stdout"] == "/workspace\n/workspace hello\n"
    assert second.structured_content["stdout"] == "/workspace\nx=\n"
    assert second.structured_content["exit_code"] == 3
    assert json.loads(text(listed)) == ["a/"]


async def test_a_command_past_its_timeout_is_stopped_and_says_so() -> None:
    (ran,) = await run_steps(
        # Each pass sleeps: the loop never reaches bashkit's limit on a session's commands.
        BashkitSandbox(timeout=0.5, max_commands=10**9, max_loop_iterations=10**9),
        call("bash", command="echo started; while :; do sleep 0.01; done"),
        "done",
    )
    assert ran.structured_content["timed_out"] is True
    assert ran.structured_content["stdout"] == "started\n"


async def test_the_model_may_ask_for_a_shorter_timeout_than_the_sandboxes() -> None:
    (ran,) = await run_steps(
        BashkitSandbox(timeout=30, max_commands=10**9, max_loop_iterations=10**9),
        call("bash", command="while :; do sleep 0.01; done", timeout=0.2),
        "done",
    )
    assert ran.structured_content["timed_out"] is True


async def test_a_flood_of_output_is_cut_to_the_cap_keeping_its_start_and_end() -> None:
    (ran,) = await run_steps(
        BashkitSandbox(max_output=100),
        call("bash", command="echo START; for i in $(seq 1 500); do echo line $i; done; echo END"),
        "done",
    )
    out = ran.structured_content["stdout"]
    assert out.startswith("START\n")
    assert out.endswith("line 500\nEND\n")
    assert "bytes cut: the output is capped at 100 bytes" in out


async def test_file_tools_refuse_paths_that_lead_outside_the_workspace() -> None:
    results = await run_steps(
        BashkitSandbox(),
        call("read_file", path="../etc/passwd"),
        call("read_file", path="/etc/passwd"),
        call("write_file", path="a/../../escaped.txt", content="x"),
        call("list_files", path=".."),
        call("bash", command="ls / | grep -c escaped"),
        "done",
    )
    for refused in results[:4]:
        assert refused.is_error
        assert "leads outside the workspace" in text(refused)
    assert results[4].structured_content["stdout"] == "0\n"


async def test_nothing_of_this_machine_is_in_its_file_system(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    listed, linked, read = await run_steps(
        BashkitSandbox(),
        call("bash", command=f"cat {secret}; ls {tmp_path}; echo $?"),
        call("bash", command=f"ln -s {secret} link.txt; cat /etc/hostname"),
        call("read_file", path="link.txt"),
        "done",
    )
    assert "host secret" not in listed.structured_content["stdout"]
    assert listed.structured_content["stdout"].strip().endswith("2")
    assert "host secret" not in json.dumps(linked.structured_content)
    assert read.is_error
    assert "host secret" not in text(read)
    assert not secret.with_name("link.txt").exists()


async def test_by_default_it_has_no_network_a_list_lets_only_its_urls_and_none_is_private() -> None:
    (closed,) = await run_steps(
        BashkitSandbox(),
        call("bash", command="curl -s https://example.org/"),
        "done",
    )
    assert closed.structured_content["exit_code"] != 0
    assert "network access not configured" in closed.structured_content["stderr"]
    (listed,) = await run_steps(
        BashkitSandbox(network=["https://api.example.com"]),
        call("bash", command="curl -s https://example.org/"),
        "done",
    )
    assert listed.structured_content["exit_code"] != 0
    assert "not in allowlist" in listed.structured_content["stderr"]
    (private,) = await run_steps(
        BashkitSandbox(network=True),
        call("bash", command="curl -s http://127.0.0.1:1/"),
        "done",
    )
    assert private.structured_content["exit_code"] != 0
    assert "private IP" in private.structured_content["stderr"]


def test_a_network_policy_it_cannot_enforce_is_refused_when_built() -> None:
    with pytest.raises(ValueError, match="filters HTTP and HTTPS requests by URL only"):
        BashkitSandbox(network=["ftp://files.example.com"])
    with pytest.raises(ValueError, match="filters HTTP and HTTPS requests by URL only"):
        BashkitSandbox(network=["10.0.0.0/8"])
    with pytest.raises(TypeError, match="network takes"):
        BashkitSandbox(network="https://example.com")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_commands must be a positive whole number"):
        BashkitSandbox(max_commands=0)


def test_without_bashkit_installed_building_one_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "bashkit", None)  # import bashkit raises ImportError
    with pytest.raises(SandboxError, match=r"pip install 'agentlib\[bashkit\]'"):
        BashkitSandbox()


@attrs.frozen
class Repo(SessionInput):
    input_id = "repo"
    name: str


class Prepare(SandboxHook):
    def __init__(self) -> None:
        self.destroyed: list[str] = []

    async def on_create(
        self, ctx: SandboxCallbackContext, repo: Annotated[Repo, Depends()]
    ) -> None:
        await ctx.sandbox.write_file("README.md", f"# {repo.name}\n")
        await ctx.sandbox.write_file("src/.keep", "")
        done = await ctx.sandbox.execute(
            'echo "$WHO" > who && wc -l < ../README.md', cwd="src", env={"WHO": "hook"}
        )
        assert done.exit_code == 0, done
        await ctx.sandbox.write_file("lines", done.stdout)

    async def on_destroy(self, ctx: SandboxCallbackContext) -> None:
        self.destroyed.append((await ctx.sandbox.read_file("src/who")).decode())


async def test_hooks_prepare_the_workspace_before_the_model_and_see_it_at_cancel() -> None:
    hook = Prepare()
    agent = agent_with(
        BashkitSandbox(hooks=[hook]),
        call("bash", command="cat README.md lines src/who"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session(inputs=[Repo(name="agentlib")])
        with trio.fail_after(30):
            record = await session.run("go")
        assert isinstance(record, Completed)
        (ran,) = await results_of(session, record)
        assert ran.structured_content["stdout"] == "# agentlib\n1\nhook\n"
        assert hook.destroyed == []
        await session.cancel()
    assert hook.destroyed == ["hook\n"]


class Refused(SandboxHook):
    def __init__(self, **options: Any) -> None:
        self.options = options

    async def on_create(self, ctx: SandboxCallbackContext) -> None:
        await ctx.sandbox.execute("true", **self.options)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"cwd": "../etc"}, "leads outside the workspace"),
        ({"env": {"A; echo injected #": "x"}}, "is not an environment variable's name"),
    ],
)
async def test_a_hooks_command_is_refused_a_folder_outside_the_workspace_or_a_bad_name(
    options: dict[str, Any], said: str
) -> None:
    agent = agent_with(BashkitSandbox(hooks=[Refused(**options)]), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(30):
            record = await session.run("go")
        assert isinstance(record, agentlib.Failed)
        assert said in str(record.error)
        await session.cancel()


async def test_cancel_during_a_command_stops_it_and_deletes_the_workspace() -> None:
    agent = agent_with(
        BashkitSandbox(timeout=600, max_commands=10**9, max_loop_iterations=10**9),
        call("bash", command="while :; do :; done"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.start_turn("go")
        with trio.fail_after(30):
            await until_bash_is_called(session)
            await session.cancel()  # returns only once the command has stopped
            again = agent_with(BashkitSandbox(), call("bash", command="ls"), "done")
            other = await again.start_session()
            record = await other.run("go")
            assert isinstance(record, Completed)
            await other.cancel()


async def until_bash_is_called(session: agentlib.Session) -> None:
    async with contextlib.aclosing(session.iter_events()) as events:
        async for event in events:
            entry = getattr(event, "entry", None)
            if isinstance(entry, agentlib.ToolCallEntry) and entry.name == "file_system.bash":
                return


async def test_interrupting_a_turn_stops_its_command_and_the_next_command_runs() -> None:
    agent = agent_with(
        BashkitSandbox(timeout=600, max_commands=10**9, max_loop_iterations=10**9),
        call("write_file", path="kept.txt", content="kept"),
        call("bash", command="while :; do :; done"),
        call("bash", command="cat kept.txt"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agentlib.Turn)
        with trio.fail_after(30):
            await until_bash_is_called(session)
            await turn.interrupt()
            assert isinstance(await turn.result(), agentlib.Interrupted)
            record = await session.run("again")
        assert isinstance(record, Completed)
        (ran,) = await results_of(session, record)
        assert ran.structured_content["stdout"] == "kept"
        await session.cancel()


async def test_each_of_fifty_sessions_in_parallel_has_its_own_file_system() -> None:
    def steps(request: ModelRequest) -> ModelReply | str:
        done = [e for e in request.entries if isinstance(e, ToolResultEntry)]
        if not done:
            return call("write_file", path="me.txt", content=request.session_id)
        if len(done) == 1:
            return call("bash", command="cat me.txt; echo; ls | wc -l")
        return "done"

    agent = Agent(name="worker", model=agentlib.FunctionModel(steps), environment=BashkitSandbox())
    async with agentlib.open_runtime():
        sessions = [await agent.start_session() for _ in range(50)]
        records: dict[str, agentlib.TurnState[Any]] = {}

        async def run(session: agentlib.Session) -> None:
            records[session.id] = await session.run("go")

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(run, session)
        for session in sessions:
            ran = (await results_of(session, records[session.id]))[-1]
            assert ran.structured_content["stdout"] == f"{session.id}\n1\n"
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(session.cancel)


async def test_a_durable_session_whose_runtime_restarted_gets_a_new_workspace(
    tmp_path: Path,
) -> None:
    hook = Prepare()
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agent = agent_with(
        BashkitSandbox(hooks=[hook]),
        call("write_file", path="kept.txt", content="in memory"),
        "first",
        call("bash", command="ls"),
        "second",
    )
    async with agentlib.open_runtime(store=store):
        session = await agent.start_session(inputs=[Repo(name="r")])
        await session.run("go")
    async with agentlib.open_runtime(store=store):
        again = agent.session(session.id)
        record = await again.run("again")
        assert isinstance(record, Completed)
        (listed,) = await results_of(again, record)
        # Lost with the runtime that made it; on_create ran again for the new one.
        assert listed.structured_content["stdout"].split() == ["README.md", "lines", "src"]
        await again.cancel()


def test_the_blocking_facade_runs_a_bashkit_session() -> None:
    import agentlib_sync

    agent = agentlib_sync.Agent(
        name="worker",
        model=ScriptedModel([call("bash", command="echo hi > hi.txt; cat hi.txt"), "done"]),
        environment=agentlib_sync.BashkitSandbox(),
    )
    session = agent.start_session()
    record = session.run("go")
    assert isinstance(record, Completed)
    (ran,) = [
        event.entry
        for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agentlib.EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]
    assert json.loads(text(ran))["stdout"] == "hi\n"
    session.cancel()
