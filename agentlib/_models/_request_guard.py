"""Blocking the requests of HTTP models, for tests: a process-wide switch and an
environment variable, checked before a request is sent."""

from __future__ import annotations

import os
import threading
import types
from contextlib import AbstractContextManager

from .._data._errors import ModelError

__all__ = ["ENVIRONMENT_VARIABLE", "block_model_requests", "check_requests_allowed"]

#: Set to ``1`` to block every HTTP model's requests in the process.
ENVIRONMENT_VARIABLE = "AGENTLIB_BLOCK_MODEL_REQUESTS"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})
_ALTERNATIVES = (
    "an offline model (agentlib.testing.TestModel, ScriptedModel or FunctionModel, given "
    "to the agent with agent.override(model=...))"
)

# A process-wide count, not a context variable: the blocking facade runs the engine on a
# thread of its own, which a context variable set in the test's thread would not reach.
_lock = threading.Lock()
_blocks = 0


class _Block(AbstractContextManager[None]):
    def __enter__(self) -> None:
        global _blocks
        with _lock:
            _blocks += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        global _blocks
        with _lock:
            _blocks -= 1


def block_model_requests() -> AbstractContextManager[None]:
    """Block the requests of every HTTP model while the ``with`` block runs.

    Inside it, :class:`MistralModel` and :class:`OpenAICompatibleModel` (and the models of
    strings such as ``"mistral:..."``) raise :class:`agentlib.ModelError` instead of sending
    a request: nothing is sent and no connection is opened, and the turn fails with that
    error. Offline models (``TestModel``, ``ScriptedModel``, ``FunctionModel``) answer as
    usual. The block holds for the whole process, every thread and trio run included (the
    blocking facade's engine thread too), until the last ``with`` open ends: blocks may
    nest and overlap. Setting the environment variable ``AGENTLIB_BLOCK_MODEL_REQUESTS=1``
    blocks them the same way for as long as it is set.

    Returns:
        A context manager; each ``with`` of it blocks requests once more.
    """
    return _Block()


def check_requests_allowed(model: object) -> None:
    """Raise if HTTP model requests are blocked; ``model`` is named in the message.

    Raises:
        ModelError: Requests are blocked by :func:`block_model_requests` or by the
            environment variable (or it holds a value that is neither on nor off).
    """
    setting = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if setting.lower() not in _OFF:
        if setting.lower() in _ON:
            raise ModelError(
                f"model requests are blocked: {model!r} sent nothing, because "
                f"{ENVIRONMENT_VARIABLE}={setting} is set. Use {_ALTERNATIVES}, or unset "
                f"{ENVIRONMENT_VARIABLE} to let requests through"
            )
        raise ModelError(
            f"model requests are blocked: {model!r} sent nothing, because "
            f"{ENVIRONMENT_VARIABLE} holds a value that is neither on nor off; set it to 1 "
            "to block model requests, or to 0 to let them through"
        )
    with _lock:
        blocked = _blocks > 0
    if blocked:
        raise ModelError(
            f"model requests are blocked: {model!r} sent nothing, because it was called "
            f"inside agentlib.testing.block_model_requests(). Use {_ALTERNATIVES}, or make "
            "the request outside the block to let it through"
        )
