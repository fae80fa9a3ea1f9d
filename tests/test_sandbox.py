"""Sandboxes: a session's workspace, its commands and file tools, its hooks and lifecycle
(SPEC 17). Commands are real processes on this machine."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import attrs
import pytest
import trio

import agentlib
from agentlib import (
    Agent,
    AllowApproval,
    Completed,
    DangerousLocalSandbox,
    DenyApproval,
    Depends,
    Failed,
    ModelReply,
    ModelRequest,
    OpenApproval,
    RequestApproval,
    SandboxCallbackContext,
    SandboxHook,
    ScriptedModel,
    SessionInput,
    ToolCallEntry,
    ToolCallRequest,
    ToolResultEntry,
    pre_tool_call,
)

PYTHON = sys.executable


def call(name: str, **arguments: Any) -> ModelReply:
    """A model step that calls one sandbox tool."""
    return ModelReply(tool_calls=[ToolCallRequest(name=f"file_system.{name}", arguments=arguments)])


def agent_with(sandbox: DangerousLocalSandbox, *steps: Any, **options: Any) -> Agent:
    return Agent(name="worker", model=ScriptedModel(steps), environment=sandbox, **options)


async def results_of(
    session: agentlib.Session, record: agentlib.TurnState[Any]
) -> list[ToolResultEntry]:
    """The tool results of the turn ``record`` ended."""
    return [
        event.entry
        async for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agentlib.EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]


def result_json(result: ToolResultEntry) -> Any:
    return result.structured_content


def alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (a zombie is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def exit_watch(pid: int) -> int | None:
    """A pidfd of process ``pid``, readable once it has ended; None if it has already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


async def exited(pidfd: int | None) -> None:
    """Wait until the process of ``pidfd`` (from :func:`exit_watch`) has ended."""
    if pidfd is None:
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def running_with(argument: str) -> list[int]:
    """The live processes of this machine that have ``argument`` on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if argument.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return [pid for pid in found if alive(pid)]


async def wait_for_pid(fifo: Path) -> int:
    """The pid a command writes into the FIFO ``fifo``, once it has written it."""
    return int(await trio.to_thread.run_sync(fifo.read_text))


class KeepsWorkspace(SandboxHook):
    """A hook that keeps the workspace it is given, for a test to call."""

    workspace: agentlib.Workspace

    async def on_create(self, ctx: SandboxCallbackContext) -> None:
        self.workspace = ctx.sandbox


# -- the workspace and its tools -----------------------------------------------------------


@pytest.mark.parametrize("kind", [DangerousLocalSandbox, agentlib.IsolatedSandbox])
async def test_a_model_writes_a_script_runs_it_in_the_workspace_and_reads_its_result(
    tmp_path: Path, kind: type[DangerousLocalSandbox]
) -> None:
    script = "import pathlib\npathlib.Path('result.txt').write_text(str(6 * 7))\nprint('ok')\n"
    agent = agent_with(
        kind(root=tmp_path),
        call("write_file", path="script.py", content=script),
        call("bash", command=f"{PYTHON} script.py"),
        call("read_file", path="result.txt"),
        call("list_files"),
        "the answer is 42",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("compute")
        assert isinstance(record, Completed)
        written, ran, read, listed = await results_of(session, record)
        assert not any(r.is_error for r in (written, ran, read, listed))
        assert result_json(ran) == {
            "exit_code": 0,
            "stdout": "ok\n",
            "stderr": "",
            "timed_out": False,
        }
        assert read.content[0].text == "42"  # type: ignore[union-attr]
        assert result_json(listed) == ["result.txt", "script.py"]
        workspace = tmp_path / session.id / "workspace"
        assert (workspace / "result.txt").read_text() == "42"
        await session.cancel()


async def test_by_default_workspaces_are_in_a_temporary_folder_only_this_user_may_enter() -> None:
    agent = agent_with(DangerousLocalSandbox(), call("bash", command="pwd"), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        (ran,) = await results_of(session, record)
        workspace = Path(result_json(ran)["stdout"].strip())
        root = workspace.parent.parent
        assert root.name == f"agentlib-sandboxes-{os.getuid()}"
        assert root.stat().st_mode & 0o777 == 0o700
        await session.cancel()
        assert not workspace.parent.exists()


async def test_sandbox_calls_are_builtin_tool_call_entries(tmp_path: Path) -> None:
    agent = agent_with(DangerousLocalSandbox(root=tmp_path), call("bash", command="true"), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        assert isinstance(record, Completed)
        (entry,) = record.tool_calls
        assert entry.name == "file_system.bash"
        assert entry.tool_kind == "builtin"
        await session.cancel()


async def test_commands_get_a_scrubbed_environment_with_home_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLIB_TEST_SECRET", "do-not-leak")
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path, env={"GREETING": "hello"}),
        call("bash", command="env; pwd"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        (ran,) = await results_of(session, record)
        stdout = result_json(ran)["stdout"]
        workspace = str((tmp_path / session.id / "workspace").resolve())
        assert "do-not-leak" not in stdout
        assert "GREETING=hello" in stdout
        assert f"HOME={tmp_path / session.id / 'workspace'}" in stdout
        assert stdout.splitlines()[-1] == workspace
        await session.cancel()


@pytest.mark.parametrize(
    ("access", "tools"),
    [
        ("none", []),
        ("files", ["edit_file", "list_files", "read_file", "write_file"]),
        (
            "full",
            [
                "bash",
                "edit_file",
                "list_files",
                "process_output",
                "read_file",
                "start_process",
                "stop_process",
                "write_file",
            ],
        ),
    ],
)
async def test_access_decides_the_tools_the_model_gets(
    tmp_path: Path, access: Any, tools: list[str]
) -> None:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        seen.append(request)
        return "done"

    agent = agent_with(DangerousLocalSandbox(root=tmp_path, access=access), answer)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("go")
        names = sorted(schema.name for schema in seen[0].tools)
        assert names == [f"file_system.{name}" for name in tools]
        await session.cancel()


async def test_edit_file_replaces_a_passage_that_occurs_once(tmp_path: Path) -> None:
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path, access="files"),
        call("write_file", path="a/notes.txt", content="one two two"),
        call("edit_file", path="a/notes.txt", old_text="one", new_text="1"),
        call("edit_file", path="a/notes.txt", old_text="two", new_text="2"),
        call("read_file", path="a/notes.txt"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        _, edited, twice, read = await results_of(session, record)
        assert not edited.is_error
        assert twice.is_error
        assert "occurs 2 times" in twice.content[0].text  # type: ignore[union-attr]
        assert read.content[0].text == "1 two two"  # type: ignore[union-attr]
        await session.cancel()


@pytest.mark.parametrize(
    ("step", "setup"),
    [
        (call("write_file", path="../outside.txt", content="x"), None),
        (call("read_file", path="/etc/hostname"), None),
        (call("list_files", path="sub/../.."), None),
        (call("read_file", path="link/hostname"), "ln -s /etc link"),
        (call("write_file", path="out/x.txt", content="x"), "ln -s .. out"),
    ],
    ids=["dot-dot", "absolute", "nested-dot-dot", "symlink-read", "symlink-write"],
)
async def test_file_tools_refuse_paths_that_lead_outside_the_workspace(
    tmp_path: Path, step: ModelReply, setup: str | None
) -> None:
    steps = [call("bash", command=setup)] if setup else []
    agent = agent_with(DangerousLocalSandbox(root=tmp_path / "root"), *steps, step, "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        assert isinstance(record, Completed)
        refused = (await results_of(session, record))[-1]
        assert refused.is_error
        text = refused.content[0].text  # type: ignore[union-attr]
        assert text.startswith("SandboxError: ")
        assert "leads outside the workspace" in text
        assert not (tmp_path / "root" / "outside.txt").exists()
        assert not (tmp_path / "root" / session.id / "x.txt").exists()
        await session.cancel()


async def test_a_command_past_its_timeout_is_killed_and_says_so(tmp_path: Path) -> None:
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path, timeout=0.2, kill_grace=5),
        call("bash", command="sleep 30"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(10):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        assert result_json(ran)["timed_out"] is True
        assert result_json(ran)["exit_code"] == -signal.SIGTERM
        await session.cancel()


async def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    agent = agent_with(
        # The timeout leaves Python time to start and ignore SIGTERM on a busy machine.
        DangerousLocalSandbox(root=tmp_path, timeout=2, kill_grace=0.2),
        call("bash", command=f"exec {PYTHON} -c '{ignore}'"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(10):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        assert result_json(ran)["timed_out"] is True
        assert result_json(ran)["exit_code"] == -signal.SIGKILL
        await session.cancel()


async def test_a_flood_of_output_is_cut_to_the_cap_keeping_its_start_and_end(
    tmp_path: Path,
) -> None:
    flood = f"{PYTHON} -c \"print('start' + 'x' * 10_000_000 + 'end')\""
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path, max_output=1000),
        call("bash", command=flood),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(20):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        stdout = result_json(ran)["stdout"]
        assert stdout.startswith("start")
        assert stdout.endswith("end\n")
        assert "bytes cut: the output is capped at 1000 bytes" in stdout
        assert len(stdout) < 1200
        await session.cancel()


async def test_a_command_left_running_in_the_background_is_killed_with_its_command(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path / "root"),
        call("bash", command=f"sleep 60 & echo $! > {fifo}; echo started"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        async with trio.open_nursery() as nursery:
            pids: list[int] = []
            ended: list[int | None] = []

            async def read_pid() -> None:
                pids.append(await wait_for_pid(fifo))
                ended.append(exit_watch(pids[0]))

            nursery.start_soon(read_pid)
            with trio.fail_after(10):
                record = await session.run("go")
        assert isinstance(record, Completed)
        (ran,) = await results_of(session, record)
        assert result_json(ran)["stdout"] == "started\n"
        assert result_json(ran)["timed_out"] is False
        with trio.fail_after(30):  # only a hang reaches it: the kill is sent already
            await exited(ended[0])
        assert not alive(pids[0])
        await session.cancel()


@pytest.mark.parametrize(
    "kind",
    [
        functools.partial(DangerousLocalSandbox, max_processes=40),
        agentlib.IsolatedSandbox,  # capped at 512 by default
    ],
)
async def test_a_fork_bomb_stops_at_the_process_cap_and_leaves_nothing(
    tmp_path: Path, kind: Any
) -> None:
    marker = f"0.{os.getpid()}{id(tmp_path) % 997}"  # a `sleep` this test alone starts
    bomb = f"sleep 600 {marker} & bomb() {{ bomb | bomb & }}; bomb; wait"
    agent = agent_with(kind(root=tmp_path / "root", timeout=3), call("bash", command=bomb), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(60):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        outcome = result_json(ran)
        assert outcome["timed_out"] is True
        assert "Resource temporarily unavailable" in outcome["stderr"]  # fork refused
        assert not running_with(marker)  # all it started is gone
        await session.cancel()


def test_max_processes_takes_a_positive_integer_or_none(tmp_path: Path) -> None:
    for wrong in (0, -3, 2.5, True, "10"):
        with pytest.raises(ValueError, match="max_processes must be a positive integer or None"):
            DangerousLocalSandbox(root=tmp_path, max_processes=wrong)  # type: ignore[arg-type]
    assert DangerousLocalSandbox(root=tmp_path, max_processes=None).max_processes is None


async def test_a_background_process_is_started_read_and_stopped(tmp_path: Path) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    keeper = KeepsWorkspace()
    sandbox = DangerousLocalSandbox(root=tmp_path / "root", hooks=[keeper])
    worker = Agent(name="worker", model=ScriptedModel(["done"]), environment=sandbox)
    async with agentlib.open_runtime():
        session = await worker.start_session()
        await session.run("make the workspace")
        workspace = keeper.workspace
        process_id = await workspace.start_process(
            f"echo serving; echo oops >&2; echo $$ > {fifo}; exec sleep 600"
        )
        with trio.fail_after(10):
            pid = await wait_for_pid(fifo)  # written after its first lines
        ended = exit_watch(pid)
        first = await workspace.process_output(process_id)
        assert (first.stdout, first.stderr, first.running) == ("serving\n", "oops\n", True)
        again = await workspace.process_output(process_id)
        assert (again.stdout, again.stderr, again.running) == ("", "", True)  # nothing new
        stopped = await workspace.stop_process(process_id)
        assert stopped.running is False
        assert stopped.exit_code == -signal.SIGTERM
        with trio.fail_after(10):
            await exited(ended)
        with pytest.raises(agentlib.SandboxError, match="there is no background process 'p1'"):
            await workspace.process_output(process_id)
        await session.cancel()


async def test_the_model_runs_a_background_process_through_its_tools(tmp_path: Path) -> None:
    server = "import time\nprint('ready', flush=True)\nopen('up', 'w').close()\ntime.sleep(600)\n"
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path / "root"),
        call("write_file", path="server.py", content=server),
        call("start_process", command=f"{PYTHON} server.py"),
        call("bash", command="until [ -e up ]; do sleep 0.01; done"),  # the model waits
        call("process_output", process_id="p1"),
        call("stop_process", process_id="p1"),
        "stopped",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(30):
            record = await session.run("serve")
        _, started, _, read, stopped = await results_of(session, record)
        assert isinstance(record, Completed)
        assert started.content == (agentlib.TextContentBlock(text="p1"),)
        assert result_json(read) == {
            "stdout": "ready\n",
            "stderr": "",
            "running": True,
            "exit_code": None,
        }
        assert result_json(stopped)["running"] is False
        await session.cancel()


async def test_cancel_kills_the_background_processes(tmp_path: Path) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    keeper = KeepsWorkspace()
    sandbox = DangerousLocalSandbox(root=tmp_path / "root", hooks=[keeper])
    worker = Agent(name="worker", model=ScriptedModel(["done"]), environment=sandbox)
    async with agentlib.open_runtime():
        session = await worker.start_session()
        await session.run("make the workspace")
        workspace = keeper.workspace
        await workspace.start_process(f"trap '' TERM; echo $$ > {fifo}; exec sleep 600")
        with trio.fail_after(10):
            ended = exit_watch(await wait_for_pid(fifo))
        await session.cancel()
        with trio.fail_after(10):
            await exited(ended)
    assert not (tmp_path / "root" / session.id).exists()


async def test_cancel_during_a_command_kills_it_and_deletes_the_workspace(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path / "root", kill_grace=0.5),
        call("bash", command=f"echo $$ > {fifo}; exec sleep 60"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        workspace = tmp_path / "root" / session.id / "workspace"
        await session.start_turn("go")
        with trio.fail_after(10):
            pid = await wait_for_pid(fifo)
            assert workspace.is_dir()
            assert alive(pid)
            await session.cancel()
        assert not alive(pid)  # reaped before cancel returned
        assert not (tmp_path / "root" / session.id).exists()


async def test_interrupting_a_turn_kills_its_command(tmp_path: Path) -> None:
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path / "root"),
        call("bash", command=f"echo $$ > {fifo}; exec sleep 60"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        turn = await session.start_turn("go")
        assert isinstance(turn, agentlib.Turn)
        with trio.fail_after(10):
            pid = await wait_for_pid(fifo)
            await turn.interrupt()
            record = await turn.result()
        assert isinstance(record, agentlib.Interrupted)
        assert not alive(pid)
        assert (tmp_path / "root" / session.id / "workspace").is_dir()  # the session goes on
        await session.cancel()


async def test_each_of_fifty_sessions_in_parallel_has_its_own_workspace(tmp_path: Path) -> None:
    def steps(request: ModelRequest) -> ModelReply | str:
        done = [e for e in request.entries if isinstance(e, ToolResultEntry)]
        if not done:
            return call("write_file", path="me.txt", content=request.session_id)
        if len(done) == 1:
            return call("bash", command="cat me.txt; echo; ls | wc -l")
        return "done"

    agent = Agent(
        name="worker",
        model=agentlib.FunctionModel(steps),
        environment=DangerousLocalSandbox(root=tmp_path),
    )
    async with agentlib.open_runtime():
        sessions = [await agent.start_session() for _ in range(50)]
        records: dict[str, agentlib.TurnState[Any]] = {}

        async def run(session: agentlib.Session) -> None:
            records[session.id] = await session.run("go")

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(run, session)
        for session in sessions:
            ran = (await results_of(session, records[session.id]))[-1]
            assert result_json(ran)["stdout"] == f"{session.id}\n1\n"
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(session.cancel)
    assert list(tmp_path.iterdir()) == []


# -- the tool path: hooks, approvals -------------------------------------------------------


async def test_a_pre_tool_call_hook_asks_approval_for_commands_and_a_denial_runs_nothing(
    tmp_path: Path,
) -> None:
    seen: list[ToolCallEntry] = []

    @pre_tool_call
    def ask_for_commands(call: ToolCallEntry) -> RequestApproval | None:
        seen.append(call)
        return RequestApproval(reason="runs a command") if call.name == "file_system.bash" else None

    asked: list[OpenApproval] = []

    def on_approval(approval: OpenApproval) -> AllowApproval | DenyApproval:
        asked.append(approval)
        return DenyApproval(reason="not today")

    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path),
        call("bash", command="touch ran"),
        "done",
        hooks=[ask_for_commands],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session(on_approval=on_approval)
        record = await session.run("go")
        (refused,) = await results_of(session, record)
        assert [c.name for c in seen] == ["file_system.bash"]
        assert asked[0].tool_name == "file_system.bash"
        assert asked[0].arguments == {"command": "touch ran"}
        assert refused.is_error
        assert "not today" in refused.content[0].text  # type: ignore[union-attr]
        assert not (tmp_path / session.id / "workspace" / "ran").exists()
        await session.cancel()


async def test_an_approved_command_runs_once_approved(tmp_path: Path) -> None:
    @pre_tool_call
    def ask(call: ToolCallEntry) -> RequestApproval:
        return RequestApproval()

    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path),
        call("bash", command="echo ran >> runs; cat runs"),
        "done",
        hooks=[ask],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        blocked = await session.run("go")
        assert isinstance(blocked, agentlib.Blocked)
        assert not (tmp_path / session.id / "workspace" / "runs").exists()
        (approval,) = blocked.callbacks
        turn = session.turn(blocked.turn_id)
        await turn.answer(approval.id, AllowApproval())
        record = await turn.result()
        assert isinstance(record, Completed)
        (ran,) = await results_of(session, record)
        assert result_json(ran)["stdout"] == "ran\n"
        await session.cancel()


class WorksInFolders(SandboxHook):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def on_create(self, ctx: SandboxCallbackContext) -> None:
        await ctx.sandbox.write_file("sub/file.txt", b"x")
        here = await ctx.sandbox.execute("pwd; ls; echo $HOW", cwd="sub", env={"HOW": "hook"})
        self.seen.append(here.stdout.splitlines()[1:])
        try:
            await ctx.sandbox.execute("pwd", cwd="..")
        except agentlib.SandboxError as error:
            self.seen.append(str(error))


async def test_a_hook_runs_commands_in_a_folder_of_the_workspace_and_nowhere_else(
    tmp_path: Path,
) -> None:
    hook = WorksInFolders()
    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[hook]), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("go")
        await session.cancel()
    assert hook.seen == [
        ["file.txt", "hook"],
        "the path '..' leads outside the workspace; use paths inside it, relative to it "
        "(such as 'notes/todo.txt')",
    ]


async def test_a_subagent_shares_its_root_sessions_sandbox(tmp_path: Path) -> None:
    helper = Agent(
        name="helper",
        model=ScriptedModel([call("write_file", path="from_helper.txt", content="hi"), "ok"]),
    )
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path),
        ModelReply(tool_calls=[ToolCallRequest(name="helper", arguments={"message": "write"})]),
        call("read_file", path="from_helper.txt"),
        "done",
        subagents=[helper],
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        read = (await results_of(session, record))[-1]
        assert read.content[0].text == "hi"  # type: ignore[union-attr]
        assert [p.name for p in tmp_path.iterdir()] == [session.id]
        await session.cancel()


# -- lifecycle and sandbox hooks -----------------------------------------------------------


@attrs.frozen
class Repo(SessionInput):
    input_id = "repo"
    name: str


class CloneRepo(SandboxHook):
    def __init__(self) -> None:
        self.destroyed: list[bool] = []

    async def on_create(
        self, ctx: SandboxCallbackContext, repo: Annotated[Repo, Depends()]
    ) -> None:
        await ctx.sandbox.write_file("README", f"# {repo.name}\n")
        done = await ctx.sandbox.execute("cat README | wc -l", env={"X": "1"})
        assert done.exit_code == 0
        await ctx.sandbox.write_file("lines", done.stdout)

    async def on_destroy(
        self, ctx: SandboxCallbackContext, repo: Annotated[Repo, Depends()]
    ) -> None:
        self.destroyed.append(
            (await ctx.sandbox.read_file("README")) == f"# {repo.name}\n".encode()
        )


async def test_on_create_runs_before_the_first_model_call_and_on_destroy_at_cancel(
    tmp_path: Path,
) -> None:
    hook = CloneRepo()
    first: list[bool] = []

    def answer(request: ModelRequest) -> str:
        workspace = tmp_path / request.session_id / "workspace"
        first.append((workspace / "README").read_text() == "# agentlib\n")
        return "done"

    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[hook]), answer)
    async with agentlib.open_runtime():
        session = await agent.start_session(inputs=[Repo(name="agentlib")])
        await session.run("go")
        assert first == [True]
        assert (tmp_path / session.id / "workspace" / "lines").read_text().strip() == "1"
        assert hook.destroyed == []
        await session.cancel()
        assert hook.destroyed == [True]  # ran before cancel returned, the workspace there
        assert not (tmp_path / session.id).exists()


class Broken(SandboxHook):
    async def on_create(self, ctx: SandboxCallbackContext) -> None:
        await ctx.sandbox.write_file("half-made", "x")
        raise RuntimeError("the clone failed")


async def test_a_failing_on_create_fails_the_turn_and_leaves_nothing(tmp_path: Path) -> None:
    asked: list[ModelRequest] = []
    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[Broken()]), asked.append)
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        assert isinstance(record, Failed)
        assert record.error.type == "SandboxError"
        assert record.error.message == (
            "sandbox hook Broken.on_create failed: RuntimeError: the clone failed"
        )
        assert asked == []
        assert list(tmp_path.iterdir()) == []
        await session.cancel()


async def test_a_hook_without_its_session_input_fails_the_turn_naming_the_input(
    tmp_path: Path,
) -> None:
    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[CloneRepo()]), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        record = await session.run("go")
        assert isinstance(record, Failed)
        assert "the session has no session input 'repo'" in record.error.message
        await session.cancel()


class FailsToClean(SandboxHook):
    async def on_destroy(self, ctx: SandboxCallbackContext) -> None:
        raise OSError("the volume is gone")


@pytest.mark.usefixtures("transport")
async def test_a_failing_on_destroy_still_deletes_the_workspace_and_cancel_raises(
    tmp_path: Path,
) -> None:
    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[FailsToClean()]), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session()
        await session.run("go")
        with pytest.raises(agentlib.SandboxError) as raised:
            await session.cancel()
        assert str(raised.value) == (
            "sandbox hook FailsToClean.on_destroy failed: OSError: the volume is gone"
        )
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(agentlib.SessionTerminatedError):
            await session.run("again")


def test_a_hook_that_takes_something_other_than_session_inputs_is_refused() -> None:
    class Odd(SandboxHook):
        async def on_create(self, ctx: SandboxCallbackContext, name: str) -> None:
            pass

    with pytest.raises(TypeError, match="'name' is not one"):
        DangerousLocalSandbox(hooks=[Odd()])


def test_environment_takes_a_sandbox() -> None:
    with pytest.raises(TypeError, match="environment takes a sandbox"):
        Agent(name="a", model=ScriptedModel([]), environment="local")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="access must be"):
        DangerousLocalSandbox(access="some")  # type: ignore[arg-type]


async def test_a_durable_session_finds_its_workspace_again_after_a_restart(
    tmp_path: Path,
) -> None:
    hook = CloneRepo()
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path / "root", hooks=[hook]),
        call("write_file", path="kept.txt", content="still here"),
        "first",
        call("read_file", path="kept.txt"),
        "second",
    )
    async with agentlib.open_runtime(store=store):
        session = await agent.start_session(inputs=[Repo(name="r")])
        record = await session.run("go")
    assert hook.destroyed == []  # the runtime closed: the workspace stays for the next one
    async with agentlib.open_runtime(store=store):
        again = agent.session(session.id)
        record = await again.run("again")
        assert isinstance(record, Completed)
        read = (await results_of(again, record))[-1]
        assert read.content[0].text == "still here"  # type: ignore[union-attr]
        await again.cancel()
    assert hook.destroyed == [True]
    assert list((tmp_path / "root").iterdir()) == []


async def test_closing_an_in_memory_runtime_destroys_its_sandboxes(tmp_path: Path) -> None:
    hook = CloneRepo()
    agent = agent_with(DangerousLocalSandbox(root=tmp_path, hooks=[hook]), "done")
    async with agentlib.open_runtime():
        session = await agent.start_session(inputs=[Repo(name="r")])
        await session.run("go")
    assert hook.destroyed == [True]
    assert list(tmp_path.iterdir()) == []


def test_the_blocking_facade_runs_a_sandboxed_session(tmp_path: Path) -> None:
    import agentlib_sync

    agent = agentlib_sync.Agent(
        name="worker",
        model=ScriptedModel([call("bash", command="echo hi > hi.txt; cat hi.txt"), "done"]),
        environment=agentlib_sync.DangerousLocalSandbox(root=tmp_path),
    )
    session = agent.start_session()
    record = session.run("go")
    assert isinstance(record, Completed)
    (ran,) = [
        event.entry
        for event in session.turn(record.turn_id).iter_events()
        if isinstance(event, agentlib.EntryCompleted) and isinstance(event.entry, ToolResultEntry)
    ]
    assert json.loads(ran.content[0].text)["stdout"] == "hi\n"  # type: ignore[union-attr]
    session.cancel()
    assert list(tmp_path.iterdir()) == []


# -- the isolated kind ---------------------------------------------------------------------


async def test_an_isolated_command_cannot_reach_a_server_on_this_machines_loopback(
    tmp_path: Path,
) -> None:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    connect = (
        f"{PYTHON} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); "
        "print('connected')\""
    )
    isolated = agentlib.IsolatedSandbox(root=tmp_path / "isolated")
    local = DangerousLocalSandbox(root=tmp_path / "local")
    async with agentlib.open_runtime():
        for sandbox, reached in ((local, True), (isolated, False)):
            session = await agent_with(
                sandbox, call("bash", command=connect), "done"
            ).start_session()
            with trio.fail_after(10):
                record = await session.run("go")
            (ran,) = await results_of(session, record)
            assert (result_json(ran)["stdout"] == "connected\n") is reached
            if not reached:
                assert "Network is unreachable" in result_json(ran)["stderr"]
            await session.cancel()
    await listener.aclose()


async def test_an_isolated_command_sees_only_its_own_processes_and_writes_only_its_workspace(
    tmp_path: Path,
) -> None:
    command = f"echo $$; touch mine; touch {tmp_path}/outside"
    agent = agent_with(
        agentlib.IsolatedSandbox(root=tmp_path / "root"), call("bash", command=command), "done"
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(10):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        assert result_json(ran)["stdout"] == "1\n"  # the first process of its pid namespace
        assert "Read-only file system" in result_json(ran)["stderr"]
        assert (tmp_path / "root" / session.id / "workspace" / "mine").exists()
        assert not (tmp_path / "outside").exists()
        await session.cancel()


async def test_an_isolated_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    agent = agent_with(
        agentlib.IsolatedSandbox(root=tmp_path, timeout=0.2, kill_grace=0.2),
        call("bash", command="sleep 30 & sleep 30"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(10):
            record = await session.run("go")
        (ran,) = await results_of(session, record)
        assert result_json(ran)["timed_out"] is True
        assert result_json(ran)["exit_code"] != 0  # unshare says 128 + the signal
        await session.cancel()


def test_an_isolated_sandbox_is_refused_where_namespaces_cannot_be_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import agentlib._sandboxes._local as sandbox_module

    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    sandbox_module._namespaces_problem.cache_clear()
    try:
        with pytest.raises(agentlib.SandboxError, match="the unshare command is not installed"):
            agentlib.IsolatedSandbox()
    finally:
        monkeypatch.undo()
        sandbox_module._namespaces_problem.cache_clear()


# -- a runtime that dies while a command runs ----------------------------------------------


async def test_a_command_that_may_have_run_when_its_runtime_died_is_never_run_again(
    tmp_path: Path,
) -> None:
    from _sandbox_worker import agent

    store, root, fifo = tmp_path / "sessions.db", tmp_path / "root", tmp_path / "pid"
    os.mkfifo(fifo)
    worker = Path(__file__).with_name("_sandbox_worker.py")
    process = await trio.lowlevel.open_process(
        [PYTHON, str(worker), str(store), str(root), str(fifo)], stdout=subprocess.PIPE
    )
    try:
        with trio.fail_after(30):
            assert process.stdout is not None
            said = b""
            while not said.endswith(b"\n"):
                said += await process.stdout.receive_some()
            session_id, turn_id = said.decode().split()
            pid = await wait_for_pid(fifo)  # the command runs
            command_ended = exit_watch(pid)
            process.kill()
            await process.wait()
            await exited(command_ended)  # the command dies with the runtime that ran it
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        assert process.stdout is not None
        await process.stdout.aclose()
    async with agentlib.open_runtime(f"sqlite:///{store}"):
        session = agent(root, fifo).session(session_id)
        with trio.fail_after(30):
            crashed = await session.turn(turn_id).get()
            assert isinstance(crashed, agentlib.UnknownOutcome)
            record = await session.run("again")
        assert isinstance(record, Completed)
        assert record.text == "done"
        assert (root / "runs").read_text() == "ran\n"
        assert (root / session_id / "workspace").is_dir()  # found again
        await session.cancel()
    assert not (root / session_id).exists()


@pytest.mark.usefixtures("transport")
async def test_a_sandboxed_session_works_the_same_served_over_http(tmp_path: Path) -> None:
    agent = agent_with(
        DangerousLocalSandbox(root=tmp_path),
        call("write_file", path="a.txt", content="over http"),
        call("bash", command="cat a.txt"),
        "done",
    )
    async with agentlib.open_runtime():
        session = await agent.start_session()
        with trio.fail_after(30):
            record = await session.run("go")
        assert isinstance(record, Completed)
        assert [entry.tool_kind for entry in record.tool_calls] == ["builtin", "builtin"]
        ran = (await results_of(session, record))[-1]
        assert result_json(ran)["stdout"] == "over http"
        assert (tmp_path / session.id / "workspace").is_dir()
        await session.cancel()
        assert list(tmp_path.iterdir()) == []  # deleted before cancel returned
