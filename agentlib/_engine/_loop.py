"""The turn loop: model, then tools, then model, until the model answers."""

from __future__ import annotations

import json
import random
import string
import typing
from collections.abc import Iterator, Sequence
from typing import Any, overload

import attrs
import trio

from .._content import ContentBlock, TextContentBlock, UnknownContentBlock
from .._convert import unstructure
from .._entries import Entry, MessageEntry, ToolCallEntry, ToolResultEntry
from .._errors import ValidationError
from .._events import EntryAdded, EntryCompleted, EntryDelta
from .._history import new_id
from .._models._base import ModelRequest, ToolCallRequest
from .._output import output_schema, parse_output
from .._records import Completed, ErrorInfo, Failed, TurnState
from ._core import TurnCore, interrupted

__all__ = ["run_turn"]

_CALL_ID_ALPHABET = string.ascii_letters + string.digits
_CONTENT_CLASSES = typing.get_args(ContentBlock)


def new_call_id() -> str:
    """A tool call id of 9 letters and digits: the shape every provider accepts."""
    return "".join(random.choices(_CALL_ID_ALPHABET, k=9))


class HistoryView(Sequence[Entry]):
    """The first ``length`` entries of a list that only grows: a snapshot without a copy."""

    __slots__ = ("_entries", "_length")

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = entries
        self._length = len(entries)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | Sequence[Entry]:
        if isinstance(index, slice):
            return self._entries[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("history index out of range")
        return self._entries[index]

    def __iter__(self) -> Iterator[Entry]:
        entries = self._entries
        for index in range(self._length):
            yield entries[index]


class _RaiseFromTool(Exception):
    """A tool failed and the agent's tool_errors is "raise": the turn fails with it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def run_turn(turn: TurnCore) -> None:
    """Run ``turn`` to its end and record how it ended; never raises but trio.Cancelled."""
    session = turn.session
    record: TurnState[Any] | None = None
    try:
        with turn.scope:
            record = await _loop(turn)
        if record is None or turn.scope.cancelled_caught:
            record = interrupted(turn)
    except trio.Cancelled:
        # The runtime itself is closing: the turn ends as cancelled, then the task unwinds.
        turn.stop_cause = turn.stop_cause or "cancelled"
        session.end_turn(turn, interrupted(turn))
        raise
    except _RaiseFromTool as failure:
        record = _failed(turn, failure.error)
    except Exception as error:
        record = _failed(turn, error)
    session.end_turn(turn, record)


def _failed(turn: TurnCore, error: BaseException) -> Failed:
    return Failed(
        turn_id=turn.id,
        session_id=turn.session.id,
        error=ErrorInfo(type=type(error).__name__, message=str(error)),
    )


async def _loop(turn: TurnCore) -> TurnState[Any]:
    session = turn.session
    agent = session.agent
    schema = output_schema(turn.output_type)
    while True:
        # A stop may come before a step that never checkpoints (an offline model, say).
        await trio.lowlevel.checkpoint_if_cancelled()
        for message in turn.steered:
            session.add_entry(message)
        turn.steered.clear()
        streamed: list[str] = []
        entry_id = new_id()

        async def on_text(
            delta: str, entry_id: str = entry_id, streamed: list[str] = streamed
        ) -> None:
            if not streamed:
                opening = MessageEntry(id=entry_id, turn_id=turn.id, role="assistant")
                session.emit(EntryAdded, turn.id, entry=opening)
            streamed.append(delta)
            session.emit(EntryDelta, turn.id, entry_id=entry_id, delta=delta)

        request = ModelRequest(
            instructions=agent.instructions,
            entries=HistoryView(session.entries),
            tools=agent.tool_schemas,
            output_schema=schema,
            session_id=session.id,
            turn_id=turn.id,
        )
        reply = await agent.model.complete(request, on_text=on_text)
        text = reply.text
        if text is None and streamed:
            text = "".join(streamed)
        if text or streamed:
            message = MessageEntry(
                id=entry_id,
                turn_id=turn.id,
                role="assistant",
                content=(TextContentBlock(text=text or ""),),
            )
            if streamed:
                session.entries.append(message)
                session.emit(EntryCompleted, turn.id, entry=message)
            else:
                session.add_entry(message)
        if not reply.tool_calls:
            if turn.steered:
                continue  # a message arrived while the model answered: it gets a step
            return _completed(turn, text or "")
        await _run_tools(turn, reply.tool_calls)


def _completed(turn: TurnCore, text: str) -> TurnState[Any]:
    try:
        output = parse_output(text, turn.output_type)
    except ValidationError as error:
        return _failed(turn, error)
    return Completed(
        turn_id=turn.id,
        session_id=turn.session.id,
        output=output,
        text=text,
        tool_calls=tuple(turn.tool_calls),
    )


async def _run_tools(turn: TurnCore, requests: Sequence[ToolCallRequest]) -> None:
    session = turn.session
    calls = [
        ToolCallEntry(
            id=new_id(),
            turn_id=turn.id,
            name=request.name,
            arguments=request.arguments,
            tool_call_id=request.id or new_call_id(),
        )
        for request in requests
    ]
    for call in calls:
        session.add_entry(call)
        turn.tool_calls.append(call)
    results: list[ToolResultEntry | None] = [None] * len(calls)
    failures: list[BaseException | None] = [None] * len(calls)

    async def run_one(index: int, call: ToolCallEntry) -> None:
        try:
            results[index] = await _call_tool(turn, call)
        except _RaiseFromTool as failure:
            failures[index] = failure.error

    try:
        if len(calls) == 1:
            await run_one(0, calls[0])
        else:
            async with trio.open_nursery() as nursery:
                for index, call in enumerate(calls):
                    nursery.start_soon(run_one, index, call)
    except trio.Cancelled:
        # Every call in the history keeps a result, so the next model request stays valid.
        for call, result in zip(calls, results, strict=True):
            session.add_entry(
                result or _error_result(call, "the turn was stopped before this call finished")
            )
        raise
    for failure in failures:
        if failure is not None:
            raise _RaiseFromTool(failure)
    for result in results:
        assert result is not None
        session.add_entry(result)


def _error_result(call: ToolCallEntry, message: str) -> ToolResultEntry:
    return ToolResultEntry(
        id=new_id(),
        turn_id=call.turn_id,
        name=call.name,
        content=(TextContentBlock(text=message),),
        is_error=True,
        tool_call_id=call.tool_call_id,
    )


async def _call_tool(turn: TurnCore, call: ToolCallEntry) -> ToolResultEntry:
    agent = turn.session.agent
    tool = agent.tools_by_name.get(call.name)
    if tool is None:
        known = ", ".join(sorted(agent.tools_by_name)) or "none"
        return _error_result(call, f"unknown tool {call.name!r}; the tools are: {known}")
    try:
        arguments = tool.structure_arguments(call.arguments)
    except ValidationError as error:
        return _error_result(call, str(error))
    try:
        value = await tool.call(arguments)
    except Exception as error:
        if agent.tool_errors == "raise":
            raise _RaiseFromTool(error) from error
        return _error_result(call, f"{type(error).__name__}: {error}")
    return _result_entry(call, value)


def _result_entry(call: ToolCallEntry, value: Any) -> ToolResultEntry:
    structured: Any = None
    if isinstance(value, str):
        content: tuple[Any, ...] = (TextContentBlock(text=value),)
    elif isinstance(value, _CONTENT_CLASSES) and not isinstance(value, UnknownContentBlock):
        content = (value,)
    elif (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(item, _CONTENT_CLASSES) for item in value)
    ):
        content = tuple(value)
    else:
        try:
            structured = unstructure(value)
            text = json.dumps(structured)
        except (TypeError, ValueError):
            return _error_result(
                call,
                f"the tool returned a {type(value).__name__}, which has no JSON form; "
                "return JSON values, attrs classes, dataclasses or content blocks",
            )
        content = (TextContentBlock(text=text),)
    return attrs.evolve(
        _error_result(call, ""), content=content, structured_content=structured, is_error=False
    )
