"""A streamed chat completion, read line by line and put together, without I/O.

The endpoint streams Server-Sent Events (each line read by ``agentlib._data._sse_format.field``):
``data: {...}`` lines, each a chunk whose delta holds a piece of the reply's text or fragments
of its tool calls, then ``data: [DONE]``. A :class:`StreamReader` is fed the body's lines as
they arrive and returns the text each one brings, to be shown at once (each ``data`` line is
an event, blank line or not, as some servers leave them out); the calls' fragments are put
together by their index (or their id, for servers that give every call the same index); the
usage and the finish reason are kept. Once the body has ended, :meth:`StreamReader.reply` is
the whole reply, the one an answer that was not streamed gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._data._errors import ModelError
from .._data._json import read_whole_text
from .._data._sse_format import field
from .._data._usage import Usage
from ._base import ModelReply
from ._chat_codec import (
    CallParts,
    ChatCodec,
    ToolNames,
    error_details,
    excerpt,
    scrub,
    text_pieces,
    usage_of,
)

__all__ = ["StreamReader"]


@attrs.define
class StreamReader:
    """A reply streamed as Server-Sent Events, fed line by line.

    Attributes:
        failure: The first event that could not be read (not JSON, or an error the server
            reported in the stream), raised once the body has been read to its end.
        finish_reason: The reply's finish reason, once a chunk gave one.
        done: Whether ``data: [DONE]`` arrived.
    """

    codec: ChatCodec
    names: ToolNames
    failure: ModelError | None = None
    finish_reason: str | None = None
    done: bool = False
    _text: list[str] = attrs.field(factory=list)
    _calls: list[CallParts] = attrs.field(factory=list)
    _slots: dict[Any, CallParts] = attrs.field(factory=dict)
    _usage: Usage | None = None

    @property
    def complete(self) -> bool:
        """Whether the whole reply arrived: ``[DONE]``, or a finish reason."""
        return self.done or self.finish_reason is not None

    def feed(self, line: str) -> list[str]:
        """Take in one line of the body; returns the text it brings, in pieces.

        Lines after ``[DONE]`` or after an event that could not be read are skipped, as are
        comments, event names and the blank lines between events.
        """
        if self.done or self.failure is not None:
            return []
        read = field(line)
        if read is None or read[0] != "data":
            return []
        data = read[1].strip()
        if data == "[DONE]":
            self.done = True
            return []
        try:
            chunk = self._event(data)
        except ModelError as error:
            self.failure = error
            return []
        return self._add(chunk)

    def reply(self) -> ModelReply:
        """The reply the stream brought.

        Raises:
            ModelError: The reply was cut by the token limit or stopped with an error.
        """
        self.codec.check_finish(self.finish_reason, self._usage)
        return ModelReply(
            text="".join(self._text) if self._text else None,
            tool_calls=[call.request(self.names) for call in self._calls],
            usage=self._usage,
        )

    def _event(self, data: str) -> dict[str, Any]:
        provider, key = self.codec.dialect.provider, self.codec.key
        try:
            chunk = read_whole_text(data)
        except ValueError:
            chunk, problem = None, "that is not JSON"
        except RecursionError:  # the parser recurses once per level of the text
            chunk, problem = None, "nested too deeply to read"
        else:
            problem = "that is not a JSON object"
        if not isinstance(chunk, dict):
            raise ModelError(f"{provider} streamed an event {problem}", body=excerpt(data, key))
        if "error" in chunk:  # some servers report a failure inside the stream
            code, message = error_details(chunk)
            failed = f"{provider} failed mid-stream" + (f": {message}" if message else "")
            raise ModelError(scrub(failed, key), code=code, body=excerpt(data, key))
        return chunk

    def _add(self, chunk: Mapping[str, Any]) -> list[str]:
        usage = usage_of(chunk.get("usage"))
        if usage is not None:
            self._usage = usage
        pieces: list[str] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for piece in text_pieces(delta.get("content")):
                if piece:
                    pieces.append(piece)
                    self._text.append(piece)
            for raw in delta.get("tool_calls") or ():
                self._slot(raw).add(raw)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return pieces

    def _slot(self, raw: Mapping[str, Any]) -> CallParts:
        """The call a fragment belongs to: by its index (unless it brings a new id); else by
        its id; else the last one."""
        call_id = raw.get("id")
        key: Any = raw.get("index")
        if key is None:
            key = ("id", call_id) if call_id else None
        if key is None:
            if not self._calls:
                self._calls.append(CallParts())
            return self._calls[-1]
        slot = self._slots.get(key)
        # A fragment with another call's id starts a new call, though some servers give
        # every call the same index.
        if slot is None or (call_id and slot.id is not None and slot.id != call_id):
            slot = self._slots[key] = CallParts()
            self._calls.append(slot)
        return slot
