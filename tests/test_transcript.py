"""The transcript: a session's events as the lines a person reads (``python -m agentlib
demo``'s output), written to a stream as each event comes."""

from __future__ import annotations

import io
import itertools
from typing import Any

import attrs

from agentlib import (
    AllowApproval,
    CallbackClosed,
    CallbackOpened,
    Completed,
    DenyApproval,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    MessageEntry,
    OpenApproval,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    TurnEnded,
    TurnStarted,
    Usage,
)
from agentlib._transcript import Transcript

SESSION = "s1"


class TurnEvents:
    """A turn's events, made as the engine makes them: each method returns the events of
    one step of the turn."""

    def __init__(self, turn_id: str = "t1") -> None:
        self.turn_id = turn_id
        self._ids = itertools.count(1)

    def _event(self, kind: type[Any], **fields: Any) -> Any:
        return kind(
            id=f"{SESSION}:{next(self._ids)}", session_id=SESSION, turn_id=self.turn_id, **fields
        )

    def _id(self) -> str:
        return f"{self.turn_id}-{next(self._ids)}"

    def started(self, text: str) -> list[Event]:
        message = MessageEntry(
            id=self._id(), turn_id=self.turn_id, role="user", content=(TextContentBlock(text=text),)
        )
        return [
            self._event(TurnStarted, message=message),
            self._event(EntryAdded, entry=message),
            self._event(EntryCompleted, entry=message),
        ]

    def streamed(self, *pieces: str) -> list[Event]:
        """A reply of the model whose text comes in ``pieces``, then whole as it completes."""
        started = MessageEntry(id=self._id(), turn_id=self.turn_id, role="assistant")
        whole = attrs.evolve(started, content=(TextContentBlock(text="".join(pieces)),))
        return [
            self._event(EntryAdded, entry=started),
            *(self._event(EntryDelta, entry_id=started.id, delta=piece) for piece in pieces),
            self._event(EntryCompleted, entry=whole),
        ]

    def said(self, text: str) -> list[Event]:
        """A reply of the model that did not stream: its text comes whole as it completes."""
        added, _, completed = self.streamed(text)
        return [added, completed]

    def call(self, call_id: str, name: str, **arguments: Any) -> list[Event]:
        entry = ToolCallEntry(
            id=self._id(),
            turn_id=self.turn_id,
            name=name,
            arguments=arguments,
            tool_call_id=call_id,
        )
        return [self._event(EntryAdded, entry=entry), self._event(EntryCompleted, entry=entry)]

    def result(self, call_id: str, name: str, text: str, *, is_error: bool = False) -> list[Event]:
        entry = ToolResultEntry(
            id=self._id(),
            turn_id=self.turn_id,
            name=name,
            content=(TextContentBlock(text=text),),
            is_error=is_error,
            tool_call_id=call_id,
        )
        return [self._event(EntryAdded, entry=entry), self._event(EntryCompleted, entry=entry)]

    def approval(self, callback_id: str, name: str, **arguments: Any) -> OpenApproval:
        return OpenApproval(
            id=callback_id,
            session_id=SESSION,
            turn_id=self.turn_id,
            tool_name=name,
            arguments=arguments,
        )

    def opened(self, approval: OpenApproval) -> list[Event]:
        return [self._event(CallbackOpened, callback=approval)]

    def closed(
        self, callback_id: str, answer: AllowApproval | DenyApproval | None, answered: bool = True
    ) -> list[Event]:
        return [
            self._event(CallbackClosed, callback_id=callback_id, answer=answer, answered=answered)
        ]

    def completed(self, output: str, usage: Usage | None = None) -> list[Event]:
        record = Completed(turn_id=self.turn_id, session_id=SESSION, output=output, usage=usage)
        return [self._event(TurnEnded, record=record)]

    def ended(self, record: Any) -> list[Event]:
        return [self._event(TurnEnded, record=record)]


def shown(*events: Event, **options: Any) -> str:
    """What a transcript on a StringIO prints for ``events``."""
    out = io.StringIO()
    transcript = Transcript(out, agent_name="forecaster", **options)
    for event in events:
        transcript.show(event)
    return out.getvalue()


def test_a_stream_without_an_encoding_takes_the_arrows() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Paris?"),
        *turn.call("c1", "get_weather", city="Paris" * 10),
        *turn.result("c1", "get_weather", "sunny"),
    )
    assert output.endswith(f"\n  get_weather(city='{'Paris' * 6}Par…) → sunny\n")


def test_a_stream_that_cannot_encode_arrows_gets_ascii() -> None:
    turn = TurnEvents()
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")
    transcript = Transcript(out)
    for event in [
        *turn.started("Paris?"),
        *turn.call("c1", "get_weather", city="Paris" * 10),
        *turn.result("c1", "get_weather", "sunny"),
        *turn.call("c2", "get_weather", city="Lyon"),
        *turn.result("c2", "get_weather", "KeyError", is_error=True),
    ]:
        transcript.show(event)
    assert raw.getvalue().decode().splitlines()[-2:] == [
        f"  get_weather(city='{'Paris' * 6}P...) -> sunny",
        "  get_weather(city='Lyon') x KeyError",
    ]
