"""BashkitSandbox: a session's computer inside this process, bashkit's bash interpreter over
a virtual file system of its own (the ``bashkit`` extra).

Nothing of this machine is reachable from it: no process is started, its files are in
memory, and it has no network unless it is given one. bashkit is imported only when a
:class:`BashkitSandbox` is made.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._data._errors import SandboxError
from .._trio._threads import run_in_thread
from ._local import (
    Access,
    CommandResult,
    SandboxHook,
    Workspace,
    _Capped,
    _check_access,
    _check_env,
    _check_positive,
    _hooks,
)

if TYPE_CHECKING:
    import bashkit

__all__ = ["WORKSPACE", "BashkitSandbox"]

#: The workspace folder in the virtual file system: commands start there, it is their
#: ``HOME``, and the model's file tools take paths relative to it.
WORKSPACE = "/workspace"

T = TypeVar("T")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: How bashkit's error says a command ran past the interpreter's own timeout.
_TIMED_OUT = "resource limit exceeded: execution timeout"


def _import_bashkit() -> Any:
    try:
        import bashkit
    except ImportError as error:
        raise SandboxError(
            "a BashkitSandbox needs the bashkit package: pip install 'agentlib[bashkit]'"
        ) from error
    return bashkit


def _network(value: bool | Sequence[str]) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError("network takes True, False or a list of URL patterns")
    patterns = tuple(value)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.startswith(("http://", "https://")):
            # Its only network is the HTTP client of curl and wget: nothing else to filter.
            raise ValueError(
                "a BashkitSandbox filters HTTP and HTTPS requests by URL only: network takes "
                f"patterns such as 'https://api.example.com', not {pattern!r}"
            )
    return patterns


def _check_limit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive whole number or None, not {value!r}")


@attrs.frozen(kw_only=True)
class BashkitSandbox:
    """A bash interpreter inside this process (bashkit's, written in Rust) over a virtual
    file system of its own, per root session: it needs no OS support and starts no process.

    Commands see only the virtual file system, whose workspace folder is ``/workspace``;
    the file tools take paths relative to it, and refuse one that leads outside it. bash's
    builtins and the usual tools (``grep``, ``sed``, ``awk``, ``jq``, ``curl``...) are
    bashkit's own implementations; there is no Python, no package manager and no program of
    this machine. The workspace lives in this process's memory: it is lost when its session
    leaves the runtime that made it (see "A session's computer"). Needs the ``bashkit``
    extra: ``pip install 'agentlib[bashkit]'``.

    Attributes:
        access: What the model gets: ``"none"`` (no tools: the sandbox is for hooks),
            ``"files"`` (``file_system.read_file``, ``write_file``, ``list_files``,
            ``edit_file``), ``"full"`` (those and ``file_system.bash``).
        timeout: Seconds a command may run before it is stopped.
        max_output: The most bytes of a command's stdout (and of its stderr) the model
            gets: past it, the first and last halves are kept, and a line in between says
            how many bytes were cut. A file read is cut to it too.
        env: Variables added to every command's environment (``HOME`` is the workspace).
        hooks: :class:`SandboxHook` instances, run in order.
        network: ``False`` (the default): no network at all; ``True``: HTTP and HTTPS
            requests to any public address; a list of URL patterns
            (``["https://api.example.com"]``): only requests to those. Private addresses
            stay unreachable either way.
        max_commands: The most commands one call may run (bashkit's default, 10,000, when
            None).
        max_loop_iterations: The most iterations of one loop (bashkit's default when None).
        max_memory: The most bytes the virtual file system may hold (bashkit's default
            when None).

    Raises:
        SandboxError: The bashkit package is not installed.
        ValueError: ``access`` is not one of the three, a time, size or limit is not
            positive, or a network pattern is not an HTTP or HTTPS URL.
        TypeError: A hook is not a :class:`SandboxHook`, or takes a parameter that is not a
            session input.
    """

    access: Access = attrs.field(default="full", validator=_check_access)
    timeout: float = attrs.field(default=30.0, validator=_check_positive)
    max_output: int = attrs.field(default=100_000, validator=_check_positive)
    env: Mapping[str, str] = attrs.field(factory=dict, validator=_check_env)
    hooks: tuple[SandboxHook, ...] = attrs.field(default=(), converter=_hooks)
    network: bool | tuple[str, ...] = attrs.field(default=False, converter=_network)
    max_commands: int | None = attrs.field(default=None, validator=_check_limit)
    max_loop_iterations: int | None = attrs.field(default=None, validator=_check_limit)
    max_memory: int | None = attrs.field(default=None, validator=_check_limit)

    def __attrs_post_init__(self) -> None:
        _import_bashkit()

    def _workspace(self, session_id: str) -> Workspace:
        return _BashkitWorkspace(self, session_id)

    def _new_interpreter(self) -> bashkit.Bash:
        """A new interpreter with this sandbox's settings, its file system empty."""
        network: dict[str, Any] | None = None
        if self.network is True:
            network = {"allow_all": True}
        elif self.network:
            network = {"allow": list(self.network)}
        bash: bashkit.Bash = _import_bashkit().Bash(
            cwd=WORKSPACE,
            env={"HOME": WORKSPACE, **self.env},
            timeout_seconds=self.timeout,
            max_commands=self.max_commands,
            max_loop_iterations=self.max_loop_iterations,
            max_memory=self.max_memory,
            network=network,
        )
        bash.mkdir(WORKSPACE, recursive=True)
        return bash


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class _BashkitWorkspace(Workspace):
    """A root session's interpreter and its virtual file system, made at its first use and
    dropped when it is deleted or its session leaves this runtime.

    Its calls run in worker threads (the interpreter blocks), one command at a time.
    """

    config: BashkitSandbox

    def __init__(self, config: BashkitSandbox, session_id: str) -> None:
        super().__init__(config, session_id)
        self._bash: bashkit.Bash | None = None
        self._running = trio.Lock()  # one command at a time: cancel() stops the running one

    def __repr__(self) -> str:
        return f"Workspace(session_id={self.session_id!r}, kind='BashkitSandbox')"

    async def _make(self) -> None:
        self._bash = await run_in_thread(self.config._new_interpreter)

    async def _remove(self) -> None:
        self._bash = None

    async def _kill_commands(self) -> None:
        if self._bash is not None and self._running.locked():
            self._bash.cancel()  # the running command stops at its next command
        await trio.lowlevel.checkpoint()

    def _interpreter(self) -> bashkit.Bash:
        if self._bash is None:
            raise SandboxError("the sandbox's workspace is deleted")
        return self._bash

    def resolve(self, path: str) -> str:
        """``path`` (relative to the workspace, or absolute inside it) as an absolute path
        of the virtual file system.

        Raises:
            SandboxError: It leads outside the workspace.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise SandboxError("a path is a non-empty string, relative to the workspace")
        real = posixpath.normpath(posixpath.join(WORKSPACE, path))
        if real != WORKSPACE and not real.startswith(WORKSPACE + "/"):
            raise SandboxError(
                f"the path {path!r} leads outside the workspace; use paths inside it, "
                "relative to it (such as 'notes/todo.txt')"
            )
        return real

    async def execute(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run ``command`` with the interpreter, in a subshell of the workspace, and return
        what it did.

        Commands run one at a time. Each starts in ``cwd`` with the sandbox's ``env`` and
        this ``env``; what it changes of the shell (its folder, variables, functions) ends
        with it, what it writes to files stays. When it times out, or the call is cancelled,
        it stops before its next command (a ``sleep`` runs to its end, or to the sandbox's
        ``timeout``), and the call returns then.

        Args:
            command: A bash command line.
            cwd: Where it runs, inside the workspace; by default the workspace.
            timeout: Seconds before it is stopped; by default the sandbox's.
            env: More environment variables.

        Raises:
            SandboxError: ``cwd`` leads outside the workspace, or a name of ``env`` is not
                a variable's.
        """
        config = self.config
        workdir = self.resolve(cwd) if cwd is not None else WORKSPACE
        for name in env or {}:
            if not _NAME.fullmatch(name):
                raise SandboxError(f"{name!r} is not an environment variable's name")
        limit = config.timeout if timeout is None else timeout
        exports = "".join(f"export {name}={_quote(value)}\n" for name, value in (env or {}).items())
        script = f"(\ncd -- {_quote(workdir)} || exit 1\n{exports}{command}\n)"
        out, err = _Capped(config.max_output), _Capped(config.max_output)

        def output(stdout: str, stderr: str) -> None:  # in the worker thread, as it runs
            out.add(stdout.encode())
            err.add(stderr.encode())

        async with self._running:
            done, timed_out = await _run_stoppably(self._interpreter(), script, limit, output)
        if done is not None and done.error:  # bashkit's own message: a limit, a syntax error
            err.add(f"{done.error}\n".encode())
        return CommandResult(
            exit_code=1 if done is None else done.exit_code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
        )

    async def read_file(self, path: str) -> bytes:
        real = self.resolve(path)
        return await self._file_call(path, lambda fs: fs.read_file(real))

    async def write_file(self, path: str, data: bytes | str) -> None:
        real = self.resolve(path)
        content = data.encode() if isinstance(data, str) else bytes(data)

        def write(fs: bashkit.FileSystem) -> None:
            fs.mkdir(posixpath.dirname(real), recursive=True)
            fs.write_file(real, content)

        await self._file_call(path, write)

    async def list_files(self, path: str = ".") -> list[str]:
        real = self.resolve(path)

        def names(fs: bashkit.FileSystem) -> list[str]:
            entries = fs.read_dir(real)
            return sorted(
                entry["name"] + ("/" if entry["metadata"]["file_type"] == "directory" else "")
                for entry in entries
            )

        return await self._file_call(path, names)

    async def _file_call(self, shown: str, call: Callable[[bashkit.FileSystem], T]) -> T:
        # In a thread: the file system waits for the command that runs, if one does.
        fs = self._interpreter().fs()
        try:
            return await run_in_thread(functools.partial(call, fs))
        except RuntimeError as error:  # bashkit's I/O errors: "io error: file not found"
            raise SandboxError(_problem(shown, str(error))) from None


async def _run_stoppably(
    bash: bashkit.Bash, script: str, limit: float, output: Callable[[str, str], None]
) -> tuple[bashkit.ExecResult | None, bool]:
    """``bash.execute_sync(script)`` in a worker thread, its output given to ``output`` as it
    comes, and whether it ran past ``limit`` seconds. Past them, or cancelled, it asks the
    interpreter to stop, which it does before its next command, and returns then; None when
    it never started."""
    running = True
    done: bashkit.ExecResult | None = None

    async def stop_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if running:
                bash.cancel()

    try:
        with trio.move_on_after(limit) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_cancelled)
                try:
                    done = await run_in_thread(bash.execute_sync, script, output)
                finally:
                    running = False
                    nursery.cancel_scope.cancel()
    finally:
        bash.clear_cancel()  # it has stopped: the next command must not find it cancelled
    timed_out = deadline.cancelled_caught or (
        done is not None and (done.error or "").startswith(_TIMED_OUT)
    )
    return done, timed_out


def _problem(shown: str, said: str) -> str:
    said = said.removeprefix("io error: ")
    if said in ("file not found", "not found", "parent directory not found"):
        return f"there is no file {shown!r} in the workspace"
    if said == "is a directory":
        return f"{shown!r} is a folder, not a file"
    if said == "not a directory":
        return f"{shown!r} is not a folder"
    return f"{shown!r}: {said}"
