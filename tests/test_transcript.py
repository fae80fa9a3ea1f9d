"""The transcript: a session's events as the lines a person reads (``python -m agentlib
demo``'s output), written to a stream as each event comes."""

from __future__ import annotations

import io
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from _support import in_thread

from agentlib import (
    AllowApproval,
    CallbackClosed,
    CallbackOpened,
    Completed,
    DenyApproval,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    ErrorInfo,
    Event,
    Failed,
    Interrupted,
    MessageEntry,
    OpenApproval,
    TextContentBlock,
    ToolCallEntry,
    ToolResultEntry,
    TurnEnded,
    TurnStarted,
    UnknownOutcome,
    Usage,
)
from agentlib._cli._transcript import Transcript

SESSION = "s1"

#: Longer than any test takes, even on a busy machine: it only catches a hang.
DEADLINE = 60.0


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


def test_a_turn_shows_the_users_message_the_reply_and_how_it_ended() -> None:
    turn = TurnEvents()
    assert shown(*turn.started("Hi?"), *turn.said("Hello."), *turn.completed("Hello.")) == (
        "\nuser: Hi?\nforecaster: Hello.\nCompleted in 1 step, no tool calls\n"
    )


def test_streamed_text_is_printed_as_it_comes_and_once() -> None:
    turn = TurnEvents()
    out = io.StringIO()
    transcript = Transcript(out, agent_name="forecaster")
    added, first, second, completed = turn.streamed("Paris is ", "sunny.")
    for event in [*turn.started("Paris?"), added, first]:
        transcript.show(event)
    assert out.getvalue().endswith("\nforecaster: Paris is ")
    transcript.show(second)
    transcript.show(completed)
    assert out.getvalue().endswith("\nforecaster: Paris is sunny.\n")
    assert out.getvalue().count("sunny") == 1


def test_each_tool_call_is_one_line_with_its_result() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Paris and Oslo?"),
        *turn.streamed("Let me check."),
        *turn.call("c1", "get_weather", city="Paris"),
        *turn.call("c2", "get_weather", city="Oslo"),
        *turn.result("c2", "get_weather", "snow"),
        *turn.result("c1", "get_weather", "sunny"),
        *turn.said("Sunny, and snow."),
        *turn.completed("Sunny, and snow."),
    )
    assert output.splitlines()[2:] == [
        "forecaster: Let me check.",
        "  get_weather(city='Oslo') → snow",
        "  get_weather(city='Paris') → sunny",
        "forecaster: Sunny, and snow.",
        "Completed in 2 steps, 2 tool calls",
    ]


def test_a_failed_tool_call_is_marked_with_a_cross() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Lyon?"),
        *turn.call("c1", "get_weather", city="Lyon"),
        *turn.result("c1", "get_weather", "KeyError: 'lyon'", is_error=True),
    )
    assert output.endswith("\n  get_weather(city='Lyon') ✗ KeyError: 'lyon'\n")


def test_a_long_call_and_result_are_cut_to_80_columns_off_a_terminal() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Where?"),
        *turn.call("c1", "look_up", place="x" * 60),
        *turn.result("c1", "look_up", "y" * 100),
    )
    line = output.splitlines()[-1]
    assert line == f"  look_up(place='{'x' * 32}…) → {'y' * 25}…"
    assert len(line) == 80


def test_an_approval_shows_the_whole_call_its_answer_then_a_short_result() -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="team@example.com", text="x" * 50)
    output = shown(
        *turn.started("Email it."),
        *turn.call("c1", "send_forecast", to="team@example.com", text="x" * 50),
        *turn.opened(approval),
        *turn.closed("a1", AllowApproval()),
        *turn.result("c1", "send_forecast", "sent"),
        approver="by the handler",
    )
    assert output.splitlines()[2:] == [
        f"  send_forecast(to='team@example.com', text='{'x' * 50}') needs approval",
        "  approved (by the handler)",
        "  send_forecast(…) → sent",
    ]


def test_an_answer_not_just_below_its_approval_names_its_call() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Email both."),
        *turn.opened(turn.approval("a1", "send_forecast", to="a@b.c")),
        *turn.opened(turn.approval("a2", "send_forecast", to="d@e.f")),
        *turn.closed("a2", DenyApproval(reason="not now")),
        *turn.closed("a1", AllowApproval()),
    )
    assert output.splitlines()[-4:] == [
        "  send_forecast(to='a@b.c') needs approval",
        "  send_forecast(to='d@e.f') needs approval",
        "  denied: not now",  # just below its approval's line
        "  send_forecast(to='a@b.c'): approved",
    ]


@pytest.mark.parametrize(
    ("answer", "answered", "line"),
    [
        (AllowApproval(scope="session"), True, "  approved for the session"),
        (DenyApproval(reason="not now"), True, "  denied: not now"),
        (DenyApproval(), True, "  denied"),
        (None, False, "  send_forecast(to='a@b.c'): no answer, the turn ended"),
    ],
    ids=["allowed-for-the-session", "denied", "denied-without-reason", "unanswered"],
)
def test_an_approvals_answer_is_one_line(
    answer: AllowApproval | DenyApproval | None, answered: bool, line: str
) -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    output = shown(
        *turn.started("Email it."),
        *turn.opened(approval),
        *turn.closed("a1", answer, answered),
    )
    assert output.splitlines()[-2:] == ["  send_forecast(to='a@b.c') needs approval", line]


def test_the_outcome_line_counts_the_steps_tool_calls_and_tokens() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Paris?"),
        *turn.call("c1", "get_weather", city="Paris"),
        *turn.result("c1", "get_weather", "sunny"),
        *turn.call("c2", "convert_temperature", celsius=21),
        *turn.result("c2", "convert_temperature", "69.8"),
        *turn.said("Sunny, 69.8 °F."),
        *turn.completed(
            "Sunny, 69.8 °F.", Usage(input_tokens=150, output_tokens=2, total_tokens=152)
        ),
    )
    assert output.splitlines()[-1] == "Completed in 3 steps, 2 tool calls, 152 tokens"


def test_each_turn_counts_its_own_steps_after_a_blank_line() -> None:
    first, second = TurnEvents("t1"), TurnEvents("t2")
    output = shown(
        *first.started("Paris?"),
        *first.call("c1", "get_weather", city="Paris"),
        *first.result("c1", "get_weather", "sunny"),
        *first.said("Sunny."),
        *first.completed("Sunny.", Usage(total_tokens=1)),
        *second.started("Thanks."),
        *second.said("You are welcome."),
        *second.completed("You are welcome."),
    )
    assert output.split("\n\n")[-1] == (
        "user: Thanks.\nforecaster: You are welcome.\nCompleted in 1 step, no tool calls\n"
    )
    assert "Completed in 2 steps, 1 tool call, 1 token\n" in output


@pytest.mark.parametrize(
    ("record", "line"),
    [
        (
            Failed(
                turn_id="t1",
                session_id=SESSION,
                error=ErrorInfo(type="ModelError", message="Mistral answered HTTP 401"),
            ),
            "Failed: Mistral answered HTTP 401",
        ),
        (Interrupted(turn_id="t1", session_id=SESSION), "Interrupted (interrupted)"),
        (
            Interrupted(turn_id="t1", session_id=SESSION, cause="cancelled"),
            "Interrupted (cancelled)",
        ),
        (
            UnknownOutcome(turn_id="t1", session_id=SESSION, reason="the process died"),
            "Unknown outcome: the process died",
        ),
    ],
    ids=["failed", "interrupted", "cancelled", "unknown-outcome"],
)
def test_a_turn_that_did_not_complete_says_how_it_ended(record: Any, line: str) -> None:
    turn = TurnEvents()
    assert shown(*turn.started("Hi?"), *turn.ended(record)).splitlines()[-1] == line


def test_a_reply_cut_mid_text_ends_its_line_before_the_outcome() -> None:
    turn = TurnEvents()
    added, delta, _ = turn.streamed("It is sunny in")
    failed = Failed(
        turn_id="t1", session_id=SESSION, error=ErrorInfo(type="ModelError", message="cut")
    )
    output = shown(*turn.started("Paris?"), added, delta, *turn.ended(failed))
    assert output.endswith("\nforecaster: It is sunny in\nFailed: cut\n")


def test_colour_marks_the_labels_the_calls_and_the_outcome() -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Paris?"),
        *turn.call("c1", "get_weather", city="Paris"),
        *turn.result("c1", "get_weather", "sunny"),
        *turn.said("Sunny."),
        *turn.completed("Sunny."),
        colour=True,
    )
    assert output == (
        "\n"
        "\x1b[1muser: Paris?\x1b[0m\n"
        "\x1b[2m  get_weather(city='Paris') → sunny\x1b[0m\n"
        "\x1b[1;36mforecaster:\x1b[0m Sunny.\n"
        "\x1b[32mCompleted in 2 steps, 1 tool call\x1b[0m\n"
    )


@pytest.mark.parametrize("colour", [False, None], ids=["off", "default-off-a-terminal"])
def test_without_colour_there_is_no_escape_code(colour: bool | None) -> None:
    turn = TurnEvents()
    output = shown(
        *turn.started("Paris?"),
        *turn.call("c1", "get_weather", city="Paris"),
        *turn.result("c1", "get_weather", "sunny", is_error=True),
        *turn.said("Sunny."),
        *turn.completed("Sunny."),
        colour=colour,
    )
    assert "\x1b" not in output
    assert "Completed in 2 steps, 1 tool call" in output


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


def test_a_note_is_a_line_of_its_own() -> None:
    out = io.StringIO()
    transcript = Transcript(out, colour=True)
    transcript.note("model: scripted")
    transcript.note("")
    assert out.getvalue() == "\x1b[2mmodel: scripted\x1b[0m\n\n"


def test_interrupted_ends_the_line_the_reply_left_open() -> None:
    turn = TurnEvents()
    out = io.StringIO()
    transcript = Transcript(out, agent_name="forecaster")
    added, delta, _ = turn.streamed("It is")
    for event in [*turn.started("Paris?"), added, delta]:
        transcript.show(event)
    transcript.interrupted()
    assert out.getvalue().endswith("\nforecaster: It is\nInterrupted.\n")


# -- the prompt ------------------------------------------------------------------------------


class Screen(io.StringIO):
    """A StringIO that a test can wait on until some text shows."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            written = super().write(text)
            self._changed.notify_all()
        return written

    def wait_for(self, text: str, count: int = 1) -> None:
        """Return once ``text`` was written ``count`` times in all."""
        with self._changed:
            shown = self._changed.wait_for(lambda: self.getvalue().count(text) >= count, DEADLINE)
        assert shown, f"no {text!r} after {self.getvalue()!r}"


@pytest.fixture
def type_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bytes], None]]:
    """Make stdin a pipe; returns a function that writes to it (b"" closes it)."""
    reader, writer = os.pipe()
    stdin = open(reader, encoding="utf-8")  # noqa: SIM115 - closed on the way out
    monkeypatch.setattr(sys, "stdin", stdin)
    open_writer = [writer]

    def type_in(data: bytes) -> None:
        if data:
            os.write(writer, data)
        elif open_writer:
            os.close(open_writer.pop())

    yield type_in
    type_in(b"")
    stdin.close()


def asked(turn: TurnEvents, *approvals: OpenApproval) -> tuple[Screen, Transcript]:
    """A transcript that has shown a turn's start and its ``approvals`` opening."""
    screen = Screen()
    transcript = Transcript(screen, agent_name="forecaster")
    for event in turn.started("Email it."):
        transcript.show(event)
    for approval in approvals:
        for event in turn.opened(approval):
            transcript.show(event)
    return screen, transcript


def test_an_answer_read_from_a_pipe_is_shown_after_the_prompt(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    screen, transcript = asked(turn, approval)
    type_in(b"yes\n")
    assert transcript.ask(approval) == AllowApproval()
    assert screen.getvalue().endswith(
        "  send_forecast(to='a@b.c') needs approval\n  allow it? [y/N] yes\n"
    )


@pytest.mark.parametrize("typed", [b"n\n", b"whatever\n", b""], ids=["no", "other", "end"])
def test_anything_but_yes_denies_the_approval(
    type_in: Callable[[bytes], None], typed: bytes
) -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    screen, transcript = asked(turn, approval)
    type_in(typed)
    type_in(b"")
    assert transcript.ask(approval) == DenyApproval(reason="the user said no")
    assert screen.getvalue().endswith(f"  allow it? [y/N] {typed.decode().strip()}\n")


def test_without_a_stdin_the_approval_is_denied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    screen, transcript = asked(turn, approval)
    assert transcript.ask(approval) == DenyApproval(reason="the user said no")
    assert screen.getvalue().endswith("  allow it? [y/N] \n")


def test_the_answer_is_read_up_to_its_line_break_and_the_next_prompt_reads_the_next_line(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    first = turn.approval("a1", "send_forecast", to="a@b.c")
    _, transcript = asked(turn, first)
    type_in(b"y\nn\n")
    assert transcript.ask(first) == AllowApproval()
    second = turn.approval("a2", "send_forecast", to="d@e.f")
    for event in [*turn.closed("a1", AllowApproval()), *turn.opened(second)]:
        transcript.show(event)
    assert transcript.ask(second) == DenyApproval(reason="the user said no")


def test_a_line_shown_while_the_prompt_waits_goes_above_it_and_the_prompt_is_asked_again(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    screen, transcript = asked(turn, approval)
    for event in turn.call("c2", "get_weather", city="Oslo"):
        transcript.show(event)
    answer = in_thread(transcript.ask, approval)
    screen.wait_for("[y/N] ")
    # A call made in parallel ends while the user thinks.
    for event in turn.result("c2", "get_weather", "snow"):
        transcript.show(event)
    type_in(b"y\n")
    assert answer.result(DEADLINE) == AllowApproval()
    assert screen.getvalue().endswith(
        "  send_forecast(to='a@b.c') needs approval\n"
        "  allow it? [y/N] \n"
        "  get_weather(city='Oslo') → snow\n"
        "  allow send_forecast(to='a@b.c')? [y/N] y\n"
    )


def test_approvals_asked_at_once_are_asked_one_after_the_other_each_naming_its_call(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    first = turn.approval("a1", "send_forecast", to="a@b.c")
    second = turn.approval("a2", "send_forecast", to="d@e.f")
    screen, transcript = asked(turn, first, second)
    first_answer = in_thread(transcript.ask, first)
    screen.wait_for("[y/N] ")
    second_answer = in_thread(transcript.ask, second)  # it waits for the first
    type_in(b"y\n")
    assert first_answer.result(DEADLINE) == AllowApproval()
    screen.wait_for("[y/N] ", count=2)
    type_in(b"n\n")
    assert second_answer.result(DEADLINE) == DenyApproval(reason="the user said no")
    assert screen.getvalue().endswith(
        "  send_forecast(to='a@b.c') needs approval\n"
        "  send_forecast(to='d@e.f') needs approval\n"
        "  allow send_forecast(to='a@b.c')? [y/N] y\n"
        "  allow send_forecast(to='d@e.f')? [y/N] n\n"
    )


def test_an_approval_closed_while_its_prompt_waits_is_not_asked_again(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    approval = turn.approval("a1", "send_forecast", to="a@b.c")
    screen, transcript = asked(turn, approval)
    answer = in_thread(transcript.ask, approval)
    screen.wait_for("[y/N] ")
    for event in turn.closed("a1", None, answered=False):
        transcript.show(event)
    type_in(b"y\n")  # read by the prompt left waiting
    answer.result(DEADLINE)
    assert screen.getvalue().endswith(
        "  allow it? [y/N] \n  send_forecast(to='a@b.c'): no answer, the turn ended\n"
    )


def test_an_answer_just_below_its_prompt_does_not_name_its_call(
    type_in: Callable[[bytes], None],
) -> None:
    turn = TurnEvents()
    first = turn.approval("a1", "send_forecast", to="a@b.c")
    second = turn.approval("a2", "send_forecast", to="d@e.f")
    screen, transcript = asked(turn, first, second)
    type_in(b"y\n")
    transcript.ask(first)
    for event in turn.closed("a1", AllowApproval()):
        transcript.show(event)
    assert screen.getvalue().endswith("  allow send_forecast(to='a@b.c')? [y/N] y\n  approved\n")
