"""What the server and its clients share: each error's HTTP status and JSON body."""

from __future__ import annotations

from typing import Any

from .._data._errors import (
    ClientToolAnswerError,
    InvalidCursorError,
    LeaseLost,
    LeaseRefused,
    MaxStepsExceeded,
    ModelError,
    ObservationLost,
    SandboxError,
    SdkError,
    SessionBusyError,
    SessionIdempotencyConflictError,
    SessionNotFoundError,
    SessionTerminatedError,
    StoreError,
    TurnNotCompletedError,
    TurnNotFoundError,
    UnsupportedSessionProcedureError,
    ValidationError,
)

__all__ = ["STATUSES", "error_body", "status_of"]

#: Each error's status, the most specific class first: the first that matches wins.
STATUSES: tuple[tuple[type[SdkError], int], ...] = (
    (ValidationError, 400),
    (InvalidCursorError, 400),
    (SessionNotFoundError, 404),
    (TurnNotFoundError, 404),
    (UnsupportedSessionProcedureError, 405),
    (LeaseRefused, 409),
    (SessionBusyError, 409),
    (SessionTerminatedError, 409),
    (TurnNotCompletedError, 409),
    (ObservationLost, 410),
    (SessionIdempotencyConflictError, 422),
    (ClientToolAnswerError, 422),
    (MaxStepsExceeded, 500),
    (SandboxError, 500),
    (ModelError, 502),
    (LeaseLost, 503),
    (StoreError, 503),
    (SdkError, 500),
)


def status_of(error: SdkError) -> int:
    """The HTTP status that carries ``error``."""
    for cls, status in STATUSES:
        if isinstance(error, cls):
            return status
    return 500  # pragma: no cover  (SdkError matches every error)


def error_body(error: SdkError) -> dict[str, Any]:
    """``error`` as the JSON body of its response: its class, its message and the
    attributes a caller acts on (never a model's response body, which may echo input)."""
    fields: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, ValidationError):
        fields["errors"] = list(error.errors)
    elif isinstance(error, ObservationLost):
        fields["cursor"] = error.cursor
    elif isinstance(error, ModelError):
        fields["status"] = error.status
        fields["code"] = error.code
    return {"error": fields}
