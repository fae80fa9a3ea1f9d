"""The exceptions agentlib raises.

Every exception is an :class:`SdkError`; catch that to handle any of them::

    SdkError
    ├── ValidationError              (also a ValueError) bad input: history, blocks, answers
    ├── SessionBusyError             the session cannot take the message now; nothing changed
    │   └── LeaseRefused             another live runtime runs the session (its lease holds)
    ├── SessionIdempotencyConflictError
    │                                an idempotency key reused for another message
    ├── SessionTerminatedError       the session was cancelled; it takes no more commands
    ├── UnsupportedSessionProcedureError
    │                                the call is not allowed on this reference (a subagent's)
    ├── ObservationLost              the session's events can no longer be read from there
    ├── InvalidCursorError           a cursor of another session, or a malformed one
    ├── SessionNotFoundError         the runtime's store has no session with that id
    ├── TurnNotFoundError            the session has no turn with that id
    ├── TurnNotCompletedError        output_or_raise() on a turn that did not complete
    ├── ClientToolAnswerError        a client tool's answer could not be delivered
    ├── MaxStepsExceeded             a turn reached its max_steps (the error of its Failed)
    ├── ModelError                   a model failed: HTTP or protocol error, or no reply
    ├── ServerUnreachableError       no agentlib server answered a remote call in time
    ├── AuthenticationError          (also a PermissionError) a server refused the token
    ├── SandboxError                 a sandbox could not be made, or refused a path
    └── StoreError                   the store failed (a full disk), is damaged, or is closed
        ├── StoreSchemaError         the store's file is of a newer agentlib, or not a store
        └── LeaseLost                another runtime took over a session this one ran

Messages say what was wrong and what to do next. None of them contains a credential or the
value of a session input.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "AuthenticationError",
    "ClientToolAnswerError",
    "InvalidCursorError",
    "LeaseLost",
    "LeaseRefused",
    "MaxStepsExceeded",
    "ModelError",
    "ObservationLost",
    "SandboxError",
    "SdkError",
    "ServerUnreachableError",
    "SessionBusyError",
    "SessionIdempotencyConflictError",
    "SessionNotFoundError",
    "SessionTerminatedError",
    "StoreError",
    "StoreSchemaError",
    "TurnNotCompletedError",
    "TurnNotFoundError",
    "UnsupportedSessionProcedureError",
    "ValidationError",
]


class SdkError(Exception):
    """The base class of every exception agentlib raises on purpose."""


class ValidationError(SdkError, ValueError):
    """Input did not have the expected shape or broke a rule.

    Attributes:
        errors: One line per problem, each ending with the path of the offending value,
            e.g. ``"required field missing @ $[2].tool_call_id"``.
    """

    def __init__(self, message: str, errors: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.errors = errors


class SessionBusyError(SdkError):
    """The session could not take the command now; nothing was changed. Try again later."""


class SessionIdempotencyConflictError(SdkError):
    """An idempotency key was reused for a different message."""


class SessionTerminatedError(SdkError):
    """The session was cancelled and accepts no more commands; its history stays readable."""


class UnsupportedSessionProcedureError(SdkError):
    """The call is not allowed on this reference, e.g. ``send_message`` on a subagent."""


class ObservationLost(SdkError):
    """The session's events could not be replayed from the requested position.

    Attributes:
        cursor: Where to resume: read again with ``after=cursor`` (None if unknown).
    """

    def __init__(self, message: str, *, cursor: str | None = None) -> None:
        super().__init__(message)
        self.cursor = cursor


class InvalidCursorError(SdkError):
    """A cursor (or record) of another session, or a string that is not a cursor."""


class SessionNotFoundError(SdkError):
    """The runtime's store has no session with this id."""


class TurnNotFoundError(SdkError):
    """The session has no turn with this id."""


class TurnNotCompletedError(SdkError):
    """A turn's output was asked for with ``output_or_raise()``, but the turn did not
    complete: it is running or blocked, it ended otherwise, or no turn was started (``Busy``).
    The message names the record's kind and why: the error of a ``Failed`` turn, the cause
    of an ``Interrupted`` one, the open callbacks of a ``Blocked`` one.

    Attributes:
        record: The record that has no output (a ``TurnState`` other than ``Completed``,
            or the ``Busy`` answer); read it, or ``match`` it, to handle each case.
    """

    # The records' module raises it: typed loosely here, so that errors import no record.
    def __init__(self, message: str, *, record: Any) -> None:
        super().__init__(message)
        self.record = record


class ClientToolAnswerError(SdkError):
    """A client tool's result was produced but could not be delivered; the call stays open."""


class MaxStepsExceeded(SdkError):
    """A turn reached its step limit (``max_steps``) without an answer: the model called
    tools at every step. The turn ends ``Failed`` with this error's type and message."""


class ModelError(SdkError):
    """A model failed to produce a reply.

    Attributes:
        status: The HTTP status code, when the failure came from an HTTP response.
        code: The provider's error code (e.g. Mistral's ``"3280"``), when it gave one.
        body: The start of the response body (at most 500 characters), when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body


class ServerUnreachableError(SdkError):
    """A remote call (from :meth:`agentlib.Agent.load_from`'s reference) reached no server
    in time: every try failed to connect, was cut off, or got no answer within the
    connect-and-first-byte deadline, for as long as the reference retries (``retry_for``).
    What the server acknowledged before is kept: a call with the same idempotency key,
    once a server answers, gets the same answer.

    Attributes:
        urls: The servers' addresses that were tried.
        seconds: How long the call was retried, in seconds.
    """

    def __init__(self, message: str, *, urls: tuple[str, ...], seconds: float) -> None:
        super().__init__(message)
        self.urls = urls
        self.seconds = seconds


class AuthenticationError(SdkError, PermissionError):
    """A server refused the request's token: none was sent to a server that wants one, the
    token is not one of the server's (or has expired), or it does not give the right the
    request needs (a session-scoped token). Pass ``token=`` to
    :meth:`agentlib.Agent.load_from`. The message never holds the token.

    Attributes:
        status: The HTTP status: 401 (no token taken), or 403 (a token without that right).
    """

    def __init__(self, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


class SandboxError(SdkError):
    """A session's sandbox could not be made (a failing ``on_create`` hook), a hook failed,
    or a path leads outside its workspace."""


class StoreError(SdkError):
    """The store failed (a full disk, a file locked for too long), cannot read what it holds
    (a damaged file), or is closed. What was not acknowledged is lost; the message says
    which file, session and table, and what to do."""


class StoreSchemaError(StoreError):
    """The store's file was written by a newer agentlib, or is not an agentlib store."""


class LeaseRefused(SessionBusyError):
    """Another runtime holds the session's lease, and is alive as far as the store can tell:
    its lease has not expired, and its process is not known to have ended. Nothing was
    changed; retry once the lease has expired, or use that runtime.

    Attributes:
        session_id: The session.
        owner: The runtime holding it (its name in the store's leases).
        until: When its lease expires unless renewed (seconds since the epoch).
        host: The host of the runtime holding it, as its name tells (None for a name that
            does not, as older runtimes named themselves).
        pid: Its process id on that host (None likewise).
    """

    def __init__(self, session_id: str, owner: str, until: float) -> None:
        self.session_id = session_id
        self.owner = owner
        self.until = until
        self.host, self.pid = self._holder_of(owner)
        held_by = f"runtime {owner}" if self.pid is None else f"host {self.host}, pid {self.pid}"
        try:
            expires = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until))
        except (OverflowError, OSError, ValueError):
            expires = f"{until!r} (seconds since the epoch)"
        super().__init__(
            f"session {session_id} is held by another runtime ({held_by}) until {expires}, "
            "unless it renews its lease, and its process is not known to have ended; retry "
            "once the lease has expired, or use that runtime"
        )

    @staticmethod
    def _holder_of(owner: str) -> tuple[str | None, int | None]:
        """The host and pid a runtime's name (``"host:pid:id"``) tells; (None, None) for a
        name that tells neither."""
        host, _, rest = owner.partition(":")
        pid, _, unique = rest.partition(":")
        if not host or not pid.isdigit() or not unique:
            return None, None
        return host, int(pid)


class LeaseLost(StoreError):
    """Another runtime took over a session this one leased: this one stalled past its
    lease. The store refused the writes to that session (and its subagents' sessions), and
    this runtime let it go: read again, it is read from the store, as the other runtime has
    it. Every other session goes on.

    Attributes:
        session_id: The session taken over.
        owner: The runtime that runs it now (None: it has let the session go since).
        store: The store that refused the write (its file), when known.
    """

    def __init__(self, session_id: str, owner: str | None, *, store: str | None = None) -> None:
        now = f"is now run by another runtime ({owner})"
        if owner is None:
            now = "was taken over by another runtime, which has let it go since"
        where = "the store" if store is None else f"the store {store}"
        super().__init__(
            f"{where} refused a write: session {session_id} {now}: this runtime stalled past "
            "its lease, and let the session go; read it again to see it as the other has it"
        )
        self.session_id = session_id
        self.owner = owner
        self.store = store


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, on Python 3.10 too (where tracebacks show ``__notes__``
    through the exceptiongroup backport)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]
    notes.append(note)
