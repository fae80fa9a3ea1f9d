"""Sandboxes: a session's computer, a workspace folder with commands and file tools in it.

An agent's ``environment`` is a declaration (:class:`NoSandbox`, :class:`DangerousLocalSandbox`);
a root session's :class:`Workspace` is what the engine makes of it, once, at the first turn
that needs it, and shares with the session's subagents.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import inspect
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import trio

from .._data._errors import SandboxError
from .._toolkit._inputs import Dependency, dependencies_of, read_input
from .._toolkit._tools import Tool, tool
from .._trio._threads import run_in_thread

__all__ = [
    "CommandResult",
    "DangerousLocalSandbox",
    "IsolatedSandbox",
    "LocalSandbox",
    "NoSandbox",
    "ProcessOutput",
    "SandboxCallbackContext",
    "SandboxHook",
    "SandboxSettings",
    "Workspace",
]

Access = Literal["none", "files", "full"]

#: The namespace of the tools a sandbox gives the model.
NAMESPACE = "file_system"

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@attrs.frozen(kw_only=True)
class CommandResult:
    """What a command run in a sandbox did.

    Attributes:
        exit_code: The command's exit status; negative when a signal ended it (``-9`` for
            SIGKILL), as :mod:`subprocess` says.
        stdout: What it wrote to its standard output, decoded as UTF-8 (bytes that are not
            UTF-8 become U+FFFD), cut to the sandbox's ``max_output``.
        stderr: The same for its standard error.
        timed_out: The command ran past its timeout, and its process group was killed.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


class SandboxHook:
    """Code that prepares a session's sandbox and cleans it up: subclass it and pass
    instances in a sandbox's ``hooks=``.

    Override :meth:`on_create` (run once the workspace exists, before the session's first
    model call) and :meth:`on_destroy` (run before the workspace is deleted). Both are
    ``async``; after ``ctx``, each may take session inputs through parameters annotated
    ``Annotated[YourInput, Depends()]``, as tools do.
    """

    # `*inputs: Any, **named: Any`: an override may add parameters (its session inputs).
    async def on_create(self, ctx: SandboxCallbackContext, *inputs: Any, **named: Any) -> None:
        """Prepare the new workspace, e.g. clone a repository into it. An exception fails
        the turn, and the workspace is deleted."""

    async def on_destroy(self, ctx: SandboxCallbackContext, *inputs: Any, **named: Any) -> None:
        """Clean up before the workspace is deleted. An exception does not keep it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@attrs.frozen(kw_only=True)
class ProcessOutput:
    """What a background process wrote since its output was last read.

    Attributes:
        stdout: Its new standard output, decoded as UTF-8, cut to the sandbox's
            ``max_output`` (the first and last halves kept).
        stderr: The same for its standard error.
        running: It has not exited yet.
        exit_code: Its exit status once it has exited (negative for a signal); None while
            it runs.
    """

    stdout: str
    stderr: str
    running: bool
    exit_code: int | None = None


@attrs.frozen(kw_only=True)
class NoSandbox:
    """No computer: the session gets no file or shell tools (the default)."""


def _check_access(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("none", "files", "full"):
        raise ValueError(f"access must be 'none', 'files' or 'full', not {value!r}")


def _check_positive(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number, not {value!r}")


def _check_env(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("env must map variable names to strings")


def _check_cap(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"max_processes must be a positive integer or None, not {value!r}")


def _hooks(value: Sequence[SandboxHook]) -> tuple[SandboxHook, ...]:
    hooks = tuple(value)
    for hook in hooks:
        if not isinstance(hook, SandboxHook):
            raise TypeError(
                f"a sandbox's hooks are SandboxHook instances, not {type(hook).__name__}"
            )
        for method in ("on_create", "on_destroy"):
            _hook_dependencies(hook, method)  # raises now, not at the first session
    return hooks


def _root(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


@attrs.frozen(kw_only=True)
class _LocalSandbox:
    """What the sandboxes with a workspace folder on this machine share."""

    root: Path | None = attrs.field(default=None, converter=_root)
    access: Access = attrs.field(default="full", validator=_check_access)
    timeout: float = attrs.field(default=30.0, validator=_check_positive)
    max_output: int = attrs.field(default=100_000, validator=_check_positive)
    env: Mapping[str, str] = attrs.field(factory=dict, validator=_check_env)
    hooks: tuple[SandboxHook, ...] = attrs.field(default=(), converter=_hooks)
    kill_grace: float = attrs.field(default=2.0, validator=_check_positive)
    max_processes: int | None = attrs.field(default=None, validator=_check_cap)

    def __attrs_post_init__(self) -> None:
        if self.max_processes is not None and _process_cap() is None:
            raise SandboxError(
                f"this machine cannot cap a command's processes (max_processes="
                f"{self.max_processes}): this user can make no pids cgroup, and root ignores "
                "RLIMIT_NPROC; give the user a delegated cgroup, or max_processes=None"
            )

    def workspace_path(self, session_id: str) -> Path:
        """The folder of the root session ``session_id``'s workspace."""
        return _session_folder(self.root, session_id) / "workspace"

    def command_line(self, command: str, workdir: Path, workspace: Path) -> list[str]:
        """How ``command`` is started, in ``workdir`` of ``workspace``."""
        return ["bash", "-c", command]

    def _workspace(self, session_id: str) -> Workspace:
        return _FolderWorkspace(typing.cast("LocalSandbox", self), session_id)


@attrs.frozen(kw_only=True)
class DangerousLocalSandbox(_LocalSandbox):
    """A workspace folder on this machine, per root session; commands run as this process's
    user, on its file system and network, unisolated.

    The model's file tools are confined to the workspace: a path with ``..``, an absolute
    path or a symlink that leads outside it is refused. Commands (``file_system.bash``) are
    not: they run in the workspace, with a scrubbed environment, a timeout and an output cap,
    but can read and write whatever this user can, and reach the network. Use it for code
    you would run yourself; :class:`IsolatedSandbox` for code you would not.

    Attributes:
        root: The folder that holds the workspaces, each in ``<root>/<session id>``; by
            default ``agentlib-sandboxes-<uid>`` in the system's temporary folder, which
            only this user may enter.
        access: What the model gets: ``"none"`` (no tools: the sandbox is for hooks),
            ``"files"`` (``file_system.read_file``, ``write_file``, ``list_files``,
            ``edit_file``), ``"full"`` (those and ``file_system.bash``).
        timeout: Seconds a command may run before its process group is killed.
        max_output: The most bytes of a command's stdout (and of its stderr) the model
            gets: past it, the first and last halves are kept, and a line in between says
            how many bytes were cut. A file read is cut to it too.
        env: Variables added to every command's environment, which holds only ``PATH``,
            ``HOME`` (the workspace) and ``LANG`` otherwise.
        hooks: :class:`SandboxHook` instances, run in order.
        kill_grace: Seconds a command has to exit after SIGTERM before SIGKILL.
        max_processes: The most processes a command (or a background process) may have at
            once, itself and all it starts, so that a fork bomb stops there; None (the
            default here) for no cap. Held by a pids cgroup of the command's own where this
            user may make one, else by ``RLIMIT_NPROC`` (which root ignores).

    Raises:
        SandboxError: ``max_processes`` is set and this machine cannot hold it.
        ValueError: ``access`` is not one of the three, or a time or size is not positive.
        TypeError: A hook is not a :class:`SandboxHook`, or takes a parameter that is not a
            session input.
    """


#: Inside the namespaces: the workspace stays writable, every other mount but /proc, /dev
#: and /sys is made read-only, then the command runs where it was asked to.
_ISOLATE = r"""
set -e
workspace=$1 workdir=$2 command=$3
mount --bind "$workspace" "$workspace"
while read -r target; do
  case "$target" in /proc|/proc/*|/dev|/dev/*|/sys|/sys/*|"$workspace") continue;; esac
  mount -o remount,bind,ro "$target" 2>/dev/null || true
done < <(awk '{print $5}' /proc/self/mountinfo | sed 's/\040/ /g')
cd "$workdir"
set +e
exec bash -c "$command"
"""


@functools.cache
def _namespaces_problem(network: bool) -> str | None:
    """Why this machine cannot give a command its own namespaces; None when it can."""
    if sys.platform != "linux":
        return "Linux namespaces exist on Linux only"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "the unshare command is not installed (Debian: util-linux)"
    try:
        done = subprocess.run(
            [*_unshare(network), "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unshare could not be run: {error}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return f"unshare refused ({said}); user namespaces may be disabled here"
    return None


def _unshare(network: bool) -> list[str]:
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        *([] if network else ["--net"]),
    ]


@attrs.frozen(kw_only=True)
class IsolatedSandbox(_LocalSandbox):
    """A workspace folder on this machine whose commands run in Linux namespaces of their
    own (``unshare``, no root needed).

    Each command gets: a network namespace with only a loopback that is down (no network at
    all, unless ``network=True``); a pid namespace (it sees only its own processes, and
    they all die with it); a mount namespace where the workspace is writable and every other
    mount but ``/proc``, ``/dev`` and ``/sys`` is read-only; a user namespace where it is
    "root" mapped to this process's user. It still reads what this user can read (secrets in
    the home folder included), writes ``/dev/shm``, and shares the CPU, memory and disk
    with no quota. File tools are confined to the workspace as with
    :class:`DangerousLocalSandbox`.

    Attributes:
        root: The folder that holds the workspaces, each in ``<root>/<session id>``; by
            default ``agentlib-sandboxes-<uid>`` in the system's temporary folder, which
            only this user may enter.
        access: What the model gets: ``"none"`` (no tools: the sandbox is for hooks),
            ``"files"`` (``file_system.read_file``, ``write_file``, ``list_files``,
            ``edit_file``), ``"full"`` (those and ``file_system.bash``).
        timeout: Seconds a command may run before its process group is killed.
        max_output: The most bytes of a command's stdout (and of its stderr) the model
            gets: past it, the first and last halves are kept, and a line in between says
            how many bytes were cut. A file read is cut to it too.
        env: Variables added to every command's environment, which holds only ``PATH``,
            ``HOME`` (the workspace) and ``LANG`` otherwise.
        hooks: :class:`SandboxHook` instances, run in order.
        kill_grace: Seconds a command has to exit after SIGTERM before SIGKILL.
        max_processes: The most processes a command (or a background process) may have at
            once, itself and all it starts, so that a fork bomb stops there (512 by default);
            None for no cap. Held by a pids cgroup of the command's own where this user may
            make one, else by ``RLIMIT_NPROC`` (which root ignores).
        network: Share this machine's network with commands; by default they have none.

    Raises:
        SandboxError: This machine cannot make the namespaces (not Linux, no ``unshare``,
            user namespaces disabled), or cannot hold ``max_processes``: the message says
            which.
        ValueError: ``access`` is not one of the three, or a time or size is not positive.
        TypeError: A hook is not a :class:`SandboxHook`, or takes a parameter that is not a
            session input.
    """

    network: bool = False
    max_processes: int | None = attrs.field(default=512, validator=_check_cap)

    def __attrs_post_init__(self) -> None:
        problem = _namespaces_problem(self.network)
        if problem is not None:
            raise SandboxError(f"an IsolatedSandbox cannot be made on this machine: {problem}")
        super().__attrs_post_init__()

    def command_line(self, command: str, workdir: Path, workspace: Path) -> list[str]:
        """``command`` in namespaces of its own."""
        return [
            *_unshare(self.network),
            "bash",
            "-c",
            _ISOLATE,
            "isolate",
            str(workspace),
            str(workdir),
            command,
        ]


#: The sandboxes with a workspace folder on this machine (``_environment.py`` has them all).
LocalSandbox = DangerousLocalSandbox | IsolatedSandbox


class SandboxSettings(Protocol):
    """What a :class:`Workspace` reads of the sandbox it was made from, whatever its kind."""

    @property
    def access(self) -> Access: ...
    @property
    def timeout(self) -> float: ...
    @property
    def max_output(self) -> int: ...
    @property
    def hooks(self) -> tuple[SandboxHook, ...]: ...


def _default_root() -> Path:
    """The folder of the workspaces when a sandbox names none: this user's own, in the
    system's temporary folder (which other users may write)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"agentlib-sandboxes-{uid}"


def _check_default_root(base: Path) -> None:
    """Make ``base`` (the default root) only this user may enter, and check nobody else made
    it first.

    Raises:
        SandboxError: It is a symlink, or another user's folder.
    """
    base.mkdir(mode=0o700, exist_ok=True)
    found = os.lstat(base)
    if not os.path.isdir(base) or os.path.islink(base) or found.st_uid != os.getuid():
        raise SandboxError(
            f"{base} is not a folder of this user's: give the sandbox a root=... of its own"
        )


def _session_folder(root: Path | None, session_id: str) -> Path:
    base = root if root is not None else _default_root()
    name = session_id
    if not _SAFE_ID.fullmatch(name):  # an id from elsewhere: a name it cannot escape with
        name = hashlib.sha256(session_id.encode()).hexdigest()[:32]
    return base / name


@attrs.frozen(kw_only=True)
class SandboxCallbackContext:
    """What a :class:`SandboxHook` gets.

    Attributes:
        sandbox: The session's workspace: run commands, read and write files in it.
        session_id: The root session whose sandbox it is.
    """

    sandbox: Workspace
    session_id: str


def _hook_dependencies(hook: SandboxHook, method: str) -> tuple[Dependency, ...]:
    function = getattr(hook, method)
    name = f"{type(hook).__name__}.{method}"
    hints = typing.get_type_hints(function, include_extras=True)
    parameters = [
        p
        for p in list(inspect.signature(function).parameters.values())[1:]  # after ctx
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    try:
        arguments, dependencies = dependencies_of(
            [
                (p.name, hints.get(p.name, Any), p.default is not p.empty, p.default)
                for p in parameters
            ]
        )
    except TypeError as exc:
        raise TypeError(f"sandbox hook {name}: {exc}") from None
    if arguments:
        raise TypeError(
            f"sandbox hook {name} takes ctx, then only session inputs, annotated "
            f"Annotated[YourInput, Depends()]; {arguments[0][0]!r} is not one"
        )
    return dependencies


class _Capped:
    """A stream's bytes, the first and last halves of ``limit`` kept past it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        half = self.limit // 2
        room = half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        extra = len(self.tail) - (self.limit - half)
        if extra > 0:
            del self.tail[:extra]

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.add(chunk)

    def text(self) -> str:
        if self.total <= self.limit:
            return bytes(self.head + self.tail).decode("utf-8", "replace")
        cut = self.total - len(self.head) - len(self.tail)
        note = f"\n[... {cut} bytes cut: the output is capped at {self.limit} bytes ...]\n"
        return self.head.decode("utf-8", "replace") + note + self.tail.decode("utf-8", "replace")


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # every process of the group has exited
    except PermissionError:
        pass  # the id names another user's group now: ours is gone


#: What every command runs in (``sh -c _GUARD guard <cgroup.procs or ""> <argv...>``): it
#: joins its cgroup (when it has one), then leaves a watcher in its process group that reads
#: the lifeline (its stdin, a pipe the runtime holds open and never writes) and kills the
#: whole group once the pipe closes, that is when the runtime dies, even by SIGKILL; then it
#: becomes the command. The command itself gets /dev/null as its stdin.
_GUARD = r"""
if [ -n "$1" ]; then echo $$ > "$1" || exit 125; fi
shift
exec 3<&0 </dev/null
{ read -r _ <&3; kill -KILL 0; } >/dev/null 2>&1 &
exec 3<&- "$@"
"""


@attrs.define(eq=False)
class _Launch:
    """A command started (or about to be) in a folder workspace, until it is ended."""

    argv: list[str]
    workdir: Path
    env: dict[str, str]
    cgroup: Path | None
    lifeline: int  # the read end of the pipe: the command's stdin
    held: int  # the write end, held by this process while the command may run
    groups: set[int]
    pgid: int | None = None

    def started(self, pid: int) -> None:
        self.pgid = pid
        self.groups.add(pid)
        os.close(self.lifeline)
        self.lifeline = -1

    def close(self) -> None:
        if self.pgid is not None:
            _kill_group(self.pgid, signal.SIGKILL)
            self.groups.discard(self.pgid)
        for fd in (self.lifeline, self.held):
            if fd >= 0:
                os.close(fd)
        self.lifeline = self.held = -1


@functools.cache
def _process_cap() -> Path | Literal["rlimit"] | None:
    """How this machine caps a command's processes: the pids cgroup to make each command's
    cgroup in, ``"rlimit"`` (``RLIMIT_NPROC`` through ``prlimit``), or None (it cannot)."""
    if sys.platform != "linux":
        return None
    for base in _cgroup_candidates():
        if _cgroup_works(base):
            _remove_orphans(base)
            return base
    if os.geteuid() != 0 and shutil.which("prlimit") is not None:
        return "rlimit"
    return None


def _cgroup_candidates() -> list[Path]:
    """The cgroups this process could make its commands' pids cgroups in: its own in a
    cgroup-v1 pids hierarchy; its own and its parent in the cgroup-v2 one."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    ours: dict[str, str] = {}  # controllers ("" for v2) -> this process's cgroup path
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            ours[controller] = path
    found: list[Path] = []
    for line in mounts:
        fields, _, rest = line.partition(" - ")
        parts, kinds = fields.split(), rest.split()
        if len(parts) < 5 or len(kinds) < 3:
            continue
        root, mount_point, kind, options = parts[3], parts[4], kinds[0], kinds[2].split(",")
        if kind == "cgroup" and "pids" in options:
            member = ours.get("pids")
        elif kind == "cgroup2":
            member = ours.get("")
        else:
            continue
        if member is None or not (member + "/").startswith(root.rstrip("/") + "/"):
            continue
        own = Path(mount_point) / member[len(root.rstrip("/")) :].lstrip("/")
        found.append(own)
        if kind == "cgroup2" and own != Path(mount_point):
            found.append(own.parent)
    return found


def _cgroup_works(base: Path) -> bool:
    """Whether a pids cgroup made in ``base`` caps the processes of a command that joins it."""
    try:
        probe = _make_cgroup(base, 8)
    except OSError:
        return False
    try:
        joined = subprocess.run(
            ["sh", "-c", 'echo $$ > "$1"', "sh", str(probe / "cgroup.procs")],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return joined.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        _remove_cgroup(probe)


def _remove_orphans(base: Path) -> None:
    """Remove the cgroups that runtimes which died left in ``base`` (``agentlib-<pid>-...``
    of a pid that no longer runs): their processes died with them, the folders stayed."""
    for found in base.glob("agentlib-*-*"):
        pid = found.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_cgroup(found, wait=False)


def _make_cgroup(base: Path, limit: int) -> Path:
    """A new pids cgroup in ``base`` that lets ``limit`` processes in at once."""
    cgroup = base / f"agentlib-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    cgroup.mkdir()
    try:
        (cgroup / "pids.max").write_text(str(limit))
    except OSError:
        cgroup.rmdir()
        raise
    return cgroup


def _remove_cgroup(cgroup: Path, *, wait: bool = True) -> bool:
    """Kill every process in ``cgroup``, then remove it; whether it is gone. Without
    ``wait``, a cgroup whose killed processes have not all left it yet (a pid namespace
    takes milliseconds to end) stays, to be removed later."""
    kill_all = cgroup / "cgroup.kill"  # cgroup v2, Linux 5.14 and later
    for _ in range(1000 if wait else 3):
        try:
            if kill_all.exists():
                kill_all.write_text("1")
            pids = [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return True  # gone already
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if wait:
                time.sleep(0.001)  # a process killed has not left it yet
    return False


def _nproc_limit(cap: int) -> int:
    """The ``RLIMIT_NPROC`` that lets a command have ``cap`` processes: the limit counts
    every process of this user, so those running now are added."""
    uid = os.getuid()
    running = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                running += entry.stat().st_uid == uid
    import resource  # Unix only

    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    wanted = running + cap
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


@attrs.define(eq=False)
class _Background:
    """A background process of a folder workspace."""

    process: trio.Process
    launch: _Launch
    stdout: Path
    stderr: Path
    read: list[int] = attrs.Factory(lambda: [0, 0])  # bytes of each already given


class Workspace:
    """A root session's sandbox as it runs: where its commands run and its files are.

    Hooks get it as ``ctx.sandbox``; the model's ``file_system.*`` tools call it. Its
    making and deletion are the engine's: see "A session's computer". Each kind of sandbox
    has its own; they all take the calls below.

    Attributes:
        session_id: The root session whose sandbox it is.
        config: The sandbox it was made from.
    """

    #: Whether :meth:`start_process` works here (the model then gets the tools for it).
    runs_background_processes: bool = False

    def __init__(self, config: SandboxSettings, session_id: str) -> None:
        self.config = config
        self.session_id = session_id
        self._opening = trio.Lock()
        self._ready = False
        self._tool_cache: dict[str, Tool] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(session_id={self.session_id!r})"

    # -- what hooks and tools do ------------------------------------------------------------

    async def execute(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run ``command`` with bash in the workspace and return what it did.

        Args:
            command: A bash command line.
            cwd: Where it runs, inside the workspace; by default the workspace.
            timeout: Seconds before it is killed; by default the sandbox's.
            env: More environment variables.

        Raises:
            SandboxError: ``cwd`` leads outside the workspace, or bash cannot be started.
        """
        raise NotImplementedError

    async def read_file(self, path: str) -> bytes:
        """The bytes of the file at ``path`` in the workspace.

        Raises:
            SandboxError: The path leads outside the workspace, or names no file.
        """
        raise NotImplementedError

    async def write_file(self, path: str, data: bytes | str) -> None:
        """Write ``data`` (text as UTF-8) to the file at ``path`` in the workspace, making
        its folders.

        Raises:
            SandboxError: The path leads outside the workspace, or cannot be written.
        """
        raise NotImplementedError

    async def list_files(self, path: str = ".") -> list[str]:
        """The names in the folder at ``path`` of the workspace, sorted, folders ending
        with ``/``.

        Raises:
            SandboxError: The path leads outside the workspace, or names no folder.
        """
        raise NotImplementedError

    async def start_process(
        self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """Start ``command`` in the background and return its id, at once; it runs until
        it exits, :meth:`stop_process` stops it or the sandbox is destroyed, with no timeout.

        Raises:
            SandboxError: This sandbox runs no background processes, or as for
                :meth:`execute`.
        """
        raise SandboxError(f"a {type(self.config).__name__} runs no background processes")

    async def process_output(self, process_id: str) -> ProcessOutput:
        """What the background process ``process_id`` wrote since the last call, and
        whether it still runs.

        Raises:
            SandboxError: No background process has this id.
        """
        raise SandboxError(f"there is no background process {process_id!r}")

    async def stop_process(self, process_id: str) -> ProcessOutput:
        """Stop the background process ``process_id`` (SIGTERM, then SIGKILL after the
        sandbox's ``kill_grace``) and return what it wrote since the last read.

        Raises:
            SandboxError: No background process has this id.
        """
        raise SandboxError(f"there is no background process {process_id!r}")

    # -- its making and deletion (each kind's) -----------------------------------------------

    async def _found(self) -> bool:
        """Whether a workspace made and prepared before (by a runtime before this one) is
        there to take again."""
        return False

    async def _make(self) -> None:
        """Make the workspace, empty. Raises OSError or SandboxError."""

    async def _made(self) -> None:
        """Note that the workspace is made and its ``on_create`` hooks have run."""

    async def _remove(self) -> None:
        """Delete the workspace and all in it."""

    async def _kill_commands(self) -> None:
        """Kill every command still running in the workspace (a SIGKILL)."""

    # -- lifecycle (the engine's) -----------------------------------------------------------

    async def _open(self, inputs: Mapping[str, Any]) -> None:
        """Make the workspace and run the ``on_create`` hooks, unless it was made already
        (by this runtime, or one before it: the workspace is found again).

        Raises:
            SandboxError: The workspace cannot be made, or a hook failed; nothing is left.
        """
        async with self._opening:
            if self._ready:
                return
            if await self._found():
                self._ready = True
                return
            try:
                await self._make()
            except OSError as error:
                raise SandboxError(
                    f"the sandbox's workspace cannot be made: {error.strerror or error}"
                ) from error
            try:
                for hook in self.config.hooks:
                    await self._run_hook(hook, "on_create", inputs)
                await self._made()
            except BaseException as error:
                with trio.CancelScope(shield=True):
                    await self._kill_commands()
                    await self._remove()
                if isinstance(error, SandboxError) or not isinstance(error, Exception):
                    raise
                raise SandboxError(f"the sandbox could not be made: {error}") from error
            self._ready = True

    async def _destroy(self, inputs: Mapping[str, Any]) -> None:
        """Kill what still runs, run the ``on_destroy`` hooks (if the workspace was made) and
        delete the workspace; returns once all is done. A hook's failure does not keep it.

        Raises:
            SandboxError: A hook failed (raised once the workspace is deleted).
        """
        await self._kill_commands()
        failure: BaseException | None = None
        if self._ready or await self._found():
            for hook in self.config.hooks:
                try:
                    await self._run_hook(hook, "on_destroy", inputs)
                except SandboxError as error:
                    failure = failure or error
            await self._kill_commands()
        await self._remove()
        self._ready = False
        if failure is not None:
            raise failure

    async def _run_hook(self, hook: SandboxHook, method: str, inputs: Mapping[str, Any]) -> None:
        name = f"{type(hook).__name__}.{method}"
        try:
            values = {d.name: read_input(inputs, d) for d in _hook_dependencies(hook, method)}
            result = getattr(hook, method)(
                SandboxCallbackContext(sandbox=self, session_id=self.session_id), **values
            )
            if inspect.isawaitable(result):
                await result
        except Exception as error:
            raise SandboxError(
                f"sandbox hook {name} failed: {type(error).__name__}: {error}"
            ) from error

    # -- the model's tools ------------------------------------------------------------------

    def _model_tools(self) -> dict[str, Tool]:
        """The tools the model gets, by id, as the sandbox's ``access`` says."""
        if self._tool_cache is None:
            self._tool_cache = _workspace_tools(self)
        return self._tool_cache


class _FolderWorkspace(Workspace):
    """A workspace that is a folder on this machine, its commands processes in it.

    Attributes:
        path: The workspace folder: commands run there, and it is their ``HOME``.
    """

    runs_background_processes = True
    config: LocalSandbox

    def __init__(self, config: LocalSandbox, session_id: str) -> None:
        super().__init__(config, session_id)
        folder = _session_folder(config.root, session_id)
        self._folder = folder
        self._ready_marker = folder / "ready"
        self.path: Path = folder / "workspace"
        self._groups: set[int] = set()  # process groups of the commands running
        self._launches: set[_Launch] = set()  # the commands started and not yet ended
        self._leftover_cgroups: list[Path] = []  # of commands ended, still to remove
        self._processes: dict[str, _Background] = {}  # background processes, by id
        self._process_ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"Workspace(path={str(self.path)!r})"

    async def _found(self) -> bool:
        return await run_in_thread(self._ready_marker.exists)

    async def _make(self) -> None:
        await run_in_thread(self._make_folder)

    async def _made(self) -> None:
        await run_in_thread(self._ready_marker.touch)

    async def _remove(self) -> None:
        await run_in_thread(self._delete_folder)

    async def _kill_commands(self) -> None:
        for pgid in list(self._groups):
            _kill_group(pgid, signal.SIGKILL)
        for launch in list(self._launches):
            await self._end(launch)
        processes, self._processes = self._processes, {}
        with trio.CancelScope(shield=True):
            for background in processes.values():
                await background.process.wait()  # killed: it is reaped at once
            await self._remove_cgroups(wait=True)
        await trio.lowlevel.checkpoint()

    def _make_folder(self) -> None:
        if self.config.root is None:
            _check_default_root(self._folder.parent)
        if self._folder.exists():  # left by a creation that did not finish
            shutil.rmtree(self._folder)
        self.path.mkdir(parents=True)

    def _delete_folder(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def resolve(self, path: str) -> Path:
        """``path`` (relative to the workspace, or absolute inside it) as a real path in the
        workspace, its symlinks followed.

        Raises:
            SandboxError: It leads outside the workspace.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise SandboxError("a path is a non-empty string, relative to the workspace")
        root = Path(os.path.realpath(self.path))
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = root / candidate
        real = Path(os.path.realpath(candidate))
        if real != root and root not in real.parents:
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
        """Run ``command`` with bash in the workspace and return what it did.

        It runs in a process group of its own, with ``PATH``, ``HOME`` (the workspace),
        ``LANG``, the sandbox's ``env`` and this ``env``. When it times out, or the call is
        cancelled (the turn interrupted, the session cancelled), the group gets SIGTERM,
        then SIGKILL after the sandbox's ``kill_grace``; what is left of the group once the
        command exits is killed too.

        Args:
            command: A bash command line.
            cwd: Where it runs, inside the workspace; by default the workspace.
            timeout: Seconds before it is killed; by default the sandbox's.
            env: More environment variables.

        Raises:
            SandboxError: ``cwd`` leads outside the workspace, or bash cannot be started.
        """
        config = self.config
        limit = config.timeout if timeout is None else timeout
        launch = await self._launch(command, cwd, env)
        out, err = _Capped(config.max_output), _Capped(config.max_output)

        async def deliver_cancel(process: trio.Process) -> None:
            _kill_group(process.pid, signal.SIGTERM)
            await trio.sleep(config.kill_grace)
            _kill_group(process.pid, signal.SIGKILL)

        async def reap(process: trio.Process) -> None:
            await process.wait()
            # Children left in its group (`sleep 99 &`) would hold its pipes open.
            _kill_group(process.pid, signal.SIGKILL)

        exited = False  # by itself: not killed at its timeout or by a cancellation
        try:
            with trio.move_on_after(limit) as deadline:
                async with trio.open_nursery() as nursery:
                    try:
                        process: trio.Process = await nursery.start(
                            functools.partial(
                                trio.run_process,
                                launch.argv,
                                stdin=launch.lifeline,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                cwd=launch.workdir,
                                env=launch.env,
                                check=False,
                                start_new_session=True,
                                deliver_cancel=deliver_cancel,
                            )
                        )
                    except OSError as error:
                        raise SandboxError(
                            f"the command could not be started: {error.strerror or error}"
                        ) from error
                    launch.started(process.pid)
                    assert process.stdout is not None
                    assert process.stderr is not None
                    nursery.start_soon(out.drain, process.stdout)
                    nursery.start_soon(err.drain, process.stderr)
                    nursery.start_soon(reap, process)
            exited = not deadline.cancelled_caught
        finally:
            with trio.CancelScope(shield=True):
                await self._end(launch, killed=not exited)
        code = process.returncode
        assert code is not None
        return CommandResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=deadline.cancelled_caught,
        )

    async def _launch(
        self, command: str, cwd: str | None, env: Mapping[str, str] | None
    ) -> _Launch:
        """What starts ``command``: its command line, folder, environment, and the cgroup
        that caps its processes, made now."""
        config = self.config
        workdir = self.resolve(cwd) if cwd is not None else self.path
        environment = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(self.path),
            "LANG": "C.UTF-8",
            **config.env,
            **(env or {}),
        }
        argv = config.command_line(command, workdir, self.path)
        cap = _process_cap() if config.max_processes is not None else None
        cgroup: Path | None = None
        if isinstance(cap, Path):
            cgroup = await run_in_thread(
                functools.partial(_make_cgroup, cap, config.max_processes or 0)
            )
        elif cap == "rlimit":
            allowed = await run_in_thread(
                functools.partial(_nproc_limit, config.max_processes or 0)
            )
            argv = ["prlimit", f"--nproc={allowed}", "--", *argv]
        joins = str(cgroup / "cgroup.procs") if cgroup is not None else ""
        lifeline, self_end = os.pipe()
        launch = _Launch(
            argv=["sh", "-c", _GUARD, "guard", joins, *argv],
            workdir=workdir,
            env=environment,
            cgroup=cgroup,
            lifeline=lifeline,
            held=self_end,
            groups=self._groups,
        )
        self._launches.add(launch)
        return launch

    async def start_process(
        self, command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> str:
        """Start ``command`` in the background and return its id, at once.

        It runs as :meth:`execute`'s commands do (its own process group, the same
        environment and cap), with no timeout, its output kept in files beside the
        workspace. It is stopped by :meth:`stop_process`, by the sandbox's destruction, and
        when this runtime ends, however it ends.

        Raises:
            SandboxError: ``cwd`` leads outside the workspace, or bash cannot be started.
        """
        launch = await self._launch(command, cwd, env)
        process_id = f"p{next(self._process_ids)}"
        logs = self._folder / "processes"
        stdout, stderr = logs / f"{process_id}.out", logs / f"{process_id}.err"
        try:

            def open_logs() -> tuple[int, int]:
                logs.mkdir(exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                return os.open(stdout, flags, 0o600), os.open(stderr, flags, 0o600)

            out, err = await run_in_thread(open_logs)
            try:
                process = await trio.lowlevel.open_process(
                    launch.argv,
                    stdin=launch.lifeline,
                    stdout=out,
                    stderr=err,
                    cwd=launch.workdir,
                    env=launch.env,
                    start_new_session=True,
                )
            finally:
                os.close(out)
                os.close(err)
        except OSError as error:
            await self._end(launch)
            raise SandboxError(
                f"the command could not be started: {error.strerror or error}"
            ) from error
        launch.started(process.pid)
        self._processes[process_id] = _Background(process, launch, stdout, stderr)
        return process_id

    async def process_output(self, process_id: str) -> ProcessOutput:
        """What the background process ``process_id`` wrote since the last call, and
        whether it still runs.

        Raises:
            SandboxError: No background process has this id.
        """
        background = self._background(process_id)
        code = background.process.poll()
        if code is not None and background.launch.pgid is not None:
            await self._end(background.launch)  # what it left running dies with it
        return await self._new_output(background, code)

    async def stop_process(self, process_id: str) -> ProcessOutput:
        """Stop the background process ``process_id`` (SIGTERM to its group, then SIGKILL
        after the sandbox's ``kill_grace``) and return what it wrote since the last read.

        Raises:
            SandboxError: No background process has this id.
        """
        background = self._background(process_id)
        process = background.process
        if process.poll() is None:
            _kill_group(process.pid, signal.SIGTERM)
            with trio.move_on_after(self.config.kill_grace):
                await process.wait()
        with trio.CancelScope(shield=True):
            await self._end(background.launch, killed=True)
            code = await process.wait()
        del self._processes[process_id]
        return await self._new_output(background, code)

    def _background(self, process_id: str) -> _Background:
        background = self._processes.get(process_id)
        if background is None:
            known = ", ".join(sorted(self._processes)) or "none runs now"
            raise SandboxError(
                f"there is no background process {process_id!r} ({known}); background "
                "processes end with the sandbox, and with the runtime that started them"
            )
        return background

    async def _new_output(self, background: _Background, code: int | None) -> ProcessOutput:
        limit = self.config.max_output

        def read(index: int, path: Path) -> str:
            capped = _Capped(limit)
            try:
                with path.open("rb") as file:
                    file.seek(background.read[index])
                    while chunk := file.read(65536):
                        capped.add(chunk)
            except OSError:
                pass  # the workspace is gone: nothing more to give
            background.read[index] += capped.total
            return capped.text()

        stdout = await run_in_thread(functools.partial(read, 0, background.stdout))
        stderr = await run_in_thread(functools.partial(read, 1, background.stderr))
        return ProcessOutput(stdout=stdout, stderr=stderr, running=code is None, exit_code=code)

    async def _end(self, launch: _Launch, *, killed: bool = False) -> None:
        """Kill what is left of a command once it has exited (or to stop it): its group,
        its cgroup's processes; and let go of its cgroup and lifeline. A command ``killed``
        (at its timeout, cancelled, stopped) returns once every process of its cgroup has
        left: its caller was told it was killed."""
        launch.close()
        if launch.cgroup is not None:
            # Its processes are killed now; the empty cgroup of a command that exited may
            # take the next command's end (or the sandbox's destruction) to go, so that no
            # command waits for it.
            self._leftover_cgroups.append(launch.cgroup)
        await self._remove_cgroups(wait=killed)
        self._launches.discard(launch)

    async def _remove_cgroups(self, *, wait: bool) -> None:
        if not self._leftover_cgroups:
            return
        leftover, self._leftover_cgroups = self._leftover_cgroups, []
        for cgroup in leftover:
            if not await run_in_thread(functools.partial(_remove_cgroup, cgroup, wait=wait)):
                self._leftover_cgroups.append(cgroup)

    async def read_file(self, path: str) -> bytes:
        real = self.resolve(path)
        return await run_in_thread(functools.partial(_read, real, path, None))

    async def write_file(self, path: str, data: bytes | str) -> None:
        real = self.resolve(path)
        content = data.encode() if isinstance(data, str) else bytes(data)
        await run_in_thread(functools.partial(_write, real, path, content))

    async def list_files(self, path: str = ".") -> list[str]:
        real = self.resolve(path)

        def names() -> list[str]:
            try:
                return sorted(
                    entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(real)
                )
            except OSError as error:
                raise SandboxError(_os_problem(path, error)) from None

        return await run_in_thread(names)


def _read(real: Path, shown: str, limit: int | None) -> bytes:
    try:
        with real.open("rb") as file:
            return file.read() if limit is None else file.read(limit + 1)
    except OSError as error:
        raise SandboxError(_os_problem(shown, error)) from None


def _write(real: Path, shown: str, content: bytes) -> None:
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        real.write_bytes(content)
    except OSError as error:
        raise SandboxError(_os_problem(shown, error)) from None


def _os_problem(shown: str, error: OSError) -> str:
    if error.errno == errno.ENOENT:
        return f"there is no file {shown!r} in the workspace"
    if error.errno == errno.EISDIR:
        return f"{shown!r} is a folder, not a file"
    return f"{shown!r}: {error.strerror or error}"


def _workspace_tools(workspace: Workspace) -> dict[str, Tool]:
    access = workspace.config.access
    if access == "none":
        return {}
    limit = workspace.config.max_output

    async def read_file(path: str) -> str:
        """Read a text file of the workspace.

        Args:
            path: The file's path, relative to the workspace.
        """
        data = await workspace.read_file(path)
        text = data[:limit].decode("utf-8", "replace")
        if len(data) > limit:
            text += f"\n[... the file is longer: only its first {limit} bytes are shown ...]"
        return text

    async def write_file(path: str, content: str) -> str:
        """Write a text file in the workspace (replacing it if it exists), making its folders.

        Args:
            path: The file's path, relative to the workspace.
            content: The file's whole text.
        """
        await workspace.write_file(path, content)
        return f"wrote {len(content.encode())} bytes to {path}"

    async def list_files(path: str = ".") -> list[str]:
        """List a folder of the workspace: its files, and its folders ending with '/'.

        Args:
            path: The folder's path, relative to the workspace.
        """
        return await workspace.list_files(path)

    async def edit_file(path: str, old_text: str, new_text: str) -> str:
        """Replace one passage of a text file of the workspace by another.

        Args:
            path: The file's path, relative to the workspace.
            old_text: The passage to replace: it must occur exactly once in the file.
            new_text: What replaces it.
        """
        text = (await workspace.read_file(path)).decode("utf-8", "replace")
        count = text.count(old_text) if old_text else 0
        if count != 1:
            found = "does not occur" if count == 0 else f"occurs {count} times"
            raise SandboxError(
                f"old_text {found} in {path}; give a passage that occurs exactly once"
            )
        await workspace.write_file(path, text.replace(old_text, new_text, 1))
        return f"edited {path}"

    async def bash(command: str, timeout: float | None = None) -> CommandResult:
        """Run a bash command in the workspace, and get its exit code, stdout and stderr.

        Args:
            command: The command line, run with `bash -c` in the workspace folder.
            timeout: Seconds it may run before it is killed; by default the sandbox's.
        """
        if timeout is not None and not timeout > 0:
            raise SandboxError("timeout must be a positive number of seconds")
        if timeout is not None:
            timeout = min(timeout, workspace.config.timeout)
        return await workspace.execute(command, timeout=timeout)

    async def start_process(command: str) -> str:
        """Start a bash command in the background (a server, a watcher) and get its id at
        once; read what it writes with process_output, end it with stop_process.

        Args:
            command: The command line, run with `bash -c` in the workspace folder.
        """
        return await workspace.start_process(command)

    async def process_output(process_id: str) -> ProcessOutput:
        """What a background process wrote since the last read, and whether it still runs.

        Args:
            process_id: The id start_process gave.
        """
        return await workspace.process_output(process_id)

    async def stop_process(process_id: str) -> ProcessOutput:
        """Stop a background process, and get what it wrote since the last read.

        Args:
            process_id: The id start_process gave.
        """
        return await workspace.stop_process(process_id)

    functions: list[Any] = [read_file, write_file, list_files, edit_file]
    if access == "full":
        functions.insert(0, bash)
        if workspace.runs_background_processes:
            functions += [start_process, process_output, stop_process]
    made = [
        attrs.evolve(tool(name=f"{NAMESPACE}.{function.__name__}")(function), kind="builtin")
        for function in functions
    ]
    return {item.name: item for item in made}
