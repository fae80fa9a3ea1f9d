"""A session's events printed for a person, as they happen: ``python -m agentlib demo``'s output.

Each turn shows the user's message, the model's text once (streamed as it comes), one short
line per tool call with its result, the approvals asked and answered, and one line for how
the turn ended (``Completed in 2 steps, 1 tool call, 152 tokens``, or ``Failed: ...``).

Colour goes to a terminal only: none when the output is piped, when ``NO_COLOR`` is set to
anything but the empty string (https://no-color.org), or when ``TERM=dumb``.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO

from .._data._callbacks import AllowApproval, DenyApproval, OpenApproval
from .._data._entries import MessageEntry, ToolCallEntry, ToolResultEntry
from .._data._events import (
    CallbackClosed,
    CallbackOpened,
    EntryAdded,
    EntryCompleted,
    EntryDelta,
    Event,
    TurnEnded,
    TurnStarted,
)
from .._data._records import Completed, Failed, Interrupted, TurnState, UnknownOutcome

__all__ = ["Transcript", "wants_colour"]

#: The longest arguments a tool call's line shows (an approval's line shows them whole).
ARGUMENTS_WIDTH = 40
#: A tool call's line is cut to the terminal's width, or to this many columns off a terminal;
#: its result keeps at least RESULT_WIDTH of them.
LINE_WIDTH = 80
RESULT_WIDTH = 20

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def wants_colour(stream: TextIO) -> bool:
    """Whether ``stream`` should get colour: a terminal, without ``NO_COLOR`` or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    # The classic Windows console prints escape codes as they are; Windows Terminal does not.
    if sys.platform == "win32" and "WT_SESSION" not in os.environ:
        return False
    return _is_terminal(stream)


def _read_line(stdin: TextIO | None, terminal: bool) -> str:
    """A line from ``stdin``, with its line break if it has one; "" at the end of input, and
    when there is no stdin to read (the program started without one, as with ``<&-``).

    Read from the file descriptor, never through ``stdin`` itself (``input()`` reads a pipe
    through it): its buffer holds a lock while it waits, and a thread left waiting there
    after a Ctrl-C makes the interpreter abort on its way out. A pipe is read a byte at a
    time, so that what follows the line stays for the next prompt; a terminal gives a line
    per read, or what was typed before a Ctrl-D.
    """
    if stdin is None:
        return ""
    line = bytearray()
    try:
        descriptor = stdin.fileno()
        if terminal:
            line += os.read(descriptor, 4096)
        else:
            while not line.endswith(b"\n"):
                byte = os.read(descriptor, 1)
                if not byte:
                    break
                line += byte
    except (OSError, ValueError):  # no descriptor, or one closed since: nothing more comes
        pass
    return line.decode(stdin.encoding or "utf-8", "replace")


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class Transcript:
    """Prints a session's events to a stream as they happen, one turn after another.

    ``show`` takes each event (it is an ``on_event`` handler); ``ask`` is an ``on_approval``
    handler that asks at the terminal. They may be called from several threads at once:
    ``agentlib_sync`` calls ``show`` in the engine's thread, and ``ask`` in a worker thread
    for each approval, while the events of the calls made in parallel still come. Each
    line is written whole; approvals are asked one at a time; a prompt or an answer names
    its call unless its approval's line is just above; a line shown while a prompt waits
    goes above it, and the prompt is asked again below.

    Args:
        out: Where to print, the prompts included (their answers are read from stdin).
        agent_name: How the model's messages are labelled.
        colour: Colour the output; by default, as :func:`wants_colour` says.
        approver: Who answers approvals when ``ask`` does not, e.g. "the demo's handler";
            shown with each answer.
    """

    def __init__(
        self,
        out: TextIO,
        *,
        agent_name: str = "assistant",
        colour: bool | None = None,
        approver: str = "",
    ) -> None:
        self._out = out
        self._agent_name = agent_name
        self._colour = wants_colour(out) if colour is None else colour
        columns = shutil.get_terminal_size((LINE_WIDTH, 24)).columns if out.isatty() else 0
        # Python 3.10 gives 0 columns for a terminal of no size, not the fallback.
        self._width = columns if columns > 0 else LINE_WIDTH
        self._approver = approver
        try:
            # A stream without an encoding (a StringIO) holds any character.
            if out.encoding:
                "→✗…".encode(out.encoding)
        except (UnicodeEncodeError, LookupError):
            self._arrow, self._cross, self._ellipsis = "->", "x", "..."
        else:
            self._arrow, self._cross, self._ellipsis = "→", "✗", "…"
        # Held to write and to change what follows (several threads show and ask).
        self._lock = threading.Lock()
        # Held by the prompt that waits for its line: each prompt reads a line of its own.
        self._asking = threading.Lock()
        self._waiting: OpenApproval | None = None  # the approval whose prompt waits
        self._above: str | None = None  # the approval whose line is the last one
        self._line_open = False
        self._messages: set[str] = set()  # the model's messages of this turn, by entry id
        self._streaming: str | None = None  # the message whose text is being printed
        self._calls: dict[str, ToolCallEntry] = {}  # this turn's calls, by tool_call_id
        self._shown: set[str] = set()  # calls already shown whole (with their approval)
        self._approvals: dict[str, str] = {}  # each open approval's call text, by id
        self._steps = 0
        self._tool_calls = 0
        self._in_reply = False

    # -- what a caller uses ------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Print a line of commentary, dimmed."""
        with self._lock:
            self._line(self._style(text, "dim"))

    def show(self, event: Event) -> None:
        """Print what ``event`` adds to the transcript, if anything."""
        with self._lock:
            self._show(event)
            if self._waiting is not None and not self._line_open:
                self._write(self._prompt(self._waiting))  # it was pushed up: ask again

    def ask(self, approval: OpenApproval) -> AllowApproval | DenyApproval:
        """Ask at the terminal whether to allow ``approval``'s call; anything but y or yes
        denies it, and so does the end of input (Ctrl-D).

        It may run in a worker thread (``agentlib_sync`` runs a plain handler in one); a
        Ctrl-C then reaches the main thread while this one waits for the line.
        """
        with self._asking:
            with self._lock:
                self._end_line()
                self._waiting = approval
                self._write(self._prompt(approval))
            stdin = sys.stdin
            terminal = _is_terminal(stdin)
            line = _read_line(stdin, terminal)
            with self._lock:
                # Unless it was closed as it waited (its turn ended), and a line said so.
                if self._waiting is approval:
                    self._waiting = None
                    self._end_prompt(line, terminal)
                    self._above = approval.id
        if line.strip().lower() in ("y", "yes"):
            return AllowApproval()
        return DenyApproval(reason="the user said no")

    def interrupted(self) -> None:
        """Print that the user stopped the program (Ctrl-C), on a line of its own."""
        with self._lock:
            self._line("Interrupted.")

    # -- lines -------------------------------------------------------------------------------

    def _show(self, event: Event) -> None:
        match event:
            case TurnStarted():
                self._line("")
                self._messages.clear()
                self._streaming = None
                self._calls.clear()
                self._shown.clear()
                self._steps = self._tool_calls = 0
                self._in_reply = False
            case EntryAdded(MessageEntry(role="assistant") as message):
                self._messages.add(message.id)
            case EntryDelta(entry_id, delta) if entry_id in self._messages and delta:
                if self._streaming != entry_id:
                    self._end_line()
                    self._write(self._label())
                    self._streaming = entry_id
                self._write(delta)
            case EntryCompleted(MessageEntry(role="assistant") as message):
                self._model_step()
                if self._streaming == message.id:
                    self._streaming = None
                    self._write("\n")
                elif message.text:
                    self._line(self._label() + message.text)
            case EntryCompleted(MessageEntry(role="user") as message):
                self._in_reply = False
                self._line(self._style(f"user: {message.text}", "bold"))
            case EntryCompleted(ToolCallEntry() as entry):
                self._model_step()
                self._tool_calls += 1
                self._calls[entry.tool_call_id] = entry
            case EntryCompleted(ToolResultEntry() as result):
                self._in_reply = False
                self._show_result(result)
            case CallbackOpened(OpenApproval() as approval):
                # Whole: what is approved must be seen.
                call = self._call_text(approval.tool_name, approval.arguments, whole=True)
                self._approvals[approval.id] = call
                shown = self._call_of(approval)
                if shown is not None:
                    self._shown.add(shown)
                why = f": {approval.reason}" if approval.reason else ""
                self._line(self._style(f"  {call} needs approval{why}", "yellow"))
                self._above = approval.id
            case CallbackClosed(callback_id, answer=answer, answered=answered) if (
                callback_id in self._approvals
            ):
                if self._waiting is not None and self._waiting.id == callback_id:
                    self._waiting = None  # no longer asked
                call = self._approvals.pop(callback_id)
                # Below its approval's line or prompt, "approved" is clear; else it says which.
                named = "" if self._above == callback_id else f"{call}: "
                self._show_answer(named, call, answer, answered)
            case TurnEnded(record):
                self._line(self._outcome(record))

    def _end_prompt(self, line: str, terminal: bool) -> None:
        """End the prompt's line once ``line``, its answer, was read."""
        if not terminal:
            self._write(line.rstrip("\r\n") + "\n")  # a pipe echoes nothing: show what was read
        elif line.endswith("\n"):
            self._line_open = False  # the terminal echoed the reply and its line break
        else:
            self._write("\n")  # Ctrl-D ended the reply; a terminal echoes no line break

    def _prompt(self, approval: OpenApproval) -> str:
        if self._above == approval.id:
            call = "it"
        else:  # another line came between: say which call
            call = self._call_text(approval.tool_name, approval.arguments, whole=True)
        return "  " + self._style(f"allow {call}? [y/N] ", "yellow")

    def _model_step(self) -> None:
        # A reply's text and tool calls come one after another: the first of them starts a
        # step; a tool result or a user's message ends it.
        if not self._in_reply:
            self._steps += 1
            self._in_reply = True

    def _call_of(self, approval: OpenApproval) -> str | None:
        """The tool_call_id of the call ``approval`` is for, if it is known."""
        for call_id, call in self._calls.items():
            same = (call.name, call.arguments) == (approval.tool_name, approval.arguments)
            if same and call_id not in self._shown:
                return call_id
        return None

    def _show_result(self, result: ToolResultEntry) -> None:
        call_entry = self._calls.get(result.tool_call_id)
        if call_entry is None:
            call = f"{result.name or 'tool'}()"
        elif result.tool_call_id in self._shown:  # its arguments are on the approval's line
            call = f"{call_entry.name}({self._ellipsis})"
        else:
            call = self._call_text(call_entry.name, call_entry.arguments)
        mark, style = (self._cross, "red") if result.is_error else (self._arrow, "dim")
        start = f"  {call} {mark} "
        text = self._shorten(result.text, max(RESULT_WIDTH, self._width - len(start)))
        self._line(self._style(start + text, style))

    def _show_answer(
        self, named: str, call: str, answer: AllowApproval | DenyApproval | None, answered: bool
    ) -> None:
        by = f" ({self._approver})" if self._approver else ""
        if isinstance(answer, AllowApproval):
            scope = " for the session" if answer.scope == "session" else ""
            self._line(self._style(f"  {named}approved{scope}{by}", "green"))
        elif isinstance(answer, DenyApproval):
            reason = f": {answer.reason}" if answer.reason else ""
            self._line(self._style(f"  {named}denied{reason}{by}", "red"))
        elif not answered:
            self._line(self._style(f"  {call}: no answer, the turn ended", "yellow"))

    def _outcome(self, record: TurnState[Any]) -> str:
        match record:
            case Completed(usage=usage):
                parts = [
                    _plural(self._steps, "step"),
                    _plural(self._tool_calls, "tool call") if self._tool_calls else "no tool calls",
                ]
                if usage is not None:
                    parts.append(_plural(usage.total_tokens, "token"))
                return self._style(f"Completed in {', '.join(parts)}", "green")
            case Failed(error):
                return self._style("Failed: ", "red", "bold") + self._style(error.message, "red")
            case Interrupted(cause):
                return self._style(f"Interrupted ({cause})", "yellow")
            case UnknownOutcome(reason):
                return self._style(f"Unknown outcome: {reason}", "yellow")
        return type(record).__name__

    def _call_text(self, name: str, arguments: Any, *, whole: bool = False) -> str:
        if isinstance(arguments, Mapping) and all(
            isinstance(key, str) and key.isidentifier() for key in arguments
        ):
            shown = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
        else:
            shown = repr(arguments)
        return f"{name}({shown if whole else self._shorten(shown, ARGUMENTS_WIDTH)})"

    def _shorten(self, text: str, width: int) -> str:
        text = " ".join(text.split())
        if len(text) <= width:
            return text
        return text[: width - len(self._ellipsis)] + self._ellipsis

    def _label(self) -> str:
        return self._style(f"{self._agent_name}:", "bold", "cyan") + " "

    def _style(self, text: str, *styles: str) -> str:
        if not self._colour or not text:
            return text
        codes = ";".join(_CODES[style] for style in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def _end_line(self) -> None:
        if self._line_open:
            self._write("\n")

    def _line(self, text: str) -> None:
        self._end_line()
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        if text:
            # Noted before the text shows: a Ctrl-C that comes in between still finds the
            # line it must end.
            self._line_open = not text.endswith("\n")
            self._above = None
        # Flushed at once: a pipe would otherwise hold the lines until the program ends.
        self._out.write(text)
        self._out.flush()
