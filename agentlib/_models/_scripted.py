"""Offline models: a fixed script of replies, or a Python function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Union

import attrs

from .._data._entries import MessageEntry, ToolCallEntry
from .._data._errors import ModelError
from ._base import ModelReply, ModelRequest, TextSink

__all__ = ["FunctionModel", "ScriptedModel", "Step"]

#: What a step of a script, or a model function, may give: the answer's text or a reply.
Reply = Union[str, ModelReply]
#: A step of a :class:`ScriptedModel`.
Step = Union[str, ModelReply, Callable[[ModelRequest], Union[Reply, Awaitable[Reply]]]]


async def _reply_of(step: Step, request: ModelRequest) -> ModelReply:
    value: object = step
    if callable(step):
        value = step(request)
        if inspect.isawaitable(value):
            value = await value
    if isinstance(value, str):
        return ModelReply(text=value)
    if isinstance(value, ModelReply):
        return value
    raise ModelError(
        f"a model step gave {type(value).__name__}; give a str (the answer) or a ModelReply"
    )


async def _stream(reply: ModelReply, on_text: TextSink | None) -> None:
    if on_text is not None and reply.text:
        await on_text(reply.text)


class ScriptedModel:
    """A deterministic offline model that plays a script, the same in every session.

    Each session starts at the first step; each request of the session takes the next one.
    A session read back from a store goes on after the steps its turns already took.
    A step is a ``str`` (the final answer), a :class:`ModelReply`, or a function (sync or
    async) of the :class:`ModelRequest` that returns one of those.

    Args:
        steps: The script.

    A session that asks for more steps than the script has fails its turn with a
    :class:`agentlib.ModelError`.
    """

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps: tuple[Step, ...] = tuple(steps)
        self._positions: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.steps)} steps)"

    async def complete(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """Play the session's next step."""
        position = self._positions.get(request.session_id)
        if position is None:  # a session this object has not seen: maybe one from a store
            position = _steps_taken(request)
        if position >= len(self.steps):
            raise ModelError(
                f"the scripted model has no step left: its script has {len(self.steps)} "
                f"step(s) and this session asked for step {position + 1}; add steps to "
                "ScriptedModel([...])"
            )
        self._positions[request.session_id] = position + 1
        reply = await _reply_of(self.steps[position], request)
        await _stream(reply, on_text)
        return reply


def _steps_taken(request: ModelRequest) -> int:
    """How many model steps the session's turns took: a step's output is an assistant
    message and/or tool calls, which the step's tool results follow."""
    steps = 0
    in_step = False
    for entry in request.entries:
        if entry.turn_id is None:
            continue  # imported history: not this model's
        output = isinstance(entry, ToolCallEntry) or (
            isinstance(entry, MessageEntry) and entry.role == "assistant"
        )
        if output and not in_step:
            steps += 1
        in_step = output
    return steps


@attrs.define(eq=False)
class FunctionModel:
    """A model that is a Python function (sync or async) of the :class:`ModelRequest`.

    Attributes:
        fn: Returns the answer's text, or a :class:`ModelReply`.
    """

    fn: Callable[[ModelRequest], Reply | Awaitable[Reply]]

    async def complete(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """Call the function."""
        reply = await _reply_of(self.fn, request)
        await _stream(reply, on_text)
        return reply
