"""Server-Sent Events, the text format: frames written, and lines read back as fields.

A frame is lines of ``field: value`` ended by a blank line: ``id`` names the event (a client
that reconnects sends the last one back as ``Last-Event-ID``), ``event`` is its type,
``data`` its text, one ``data`` line for each line of it. A line that starts with ``:`` is a
comment, which a reader skips (a ping that keeps an idle connection open). agentlib's server
writes its event streams with :func:`frame` and :func:`comment`; the models read their
providers' streams with :func:`field`, without I/O both.
"""

from __future__ import annotations

__all__ = ["comment", "field", "frame"]


def frame(data: str, *, event: str | None = None, id: str | None = None) -> str:
    """The frame of an event whose text is ``data``, of type ``event``, named ``id``.

    Raises:
        ValueError: ``event`` or ``id`` holds a line break, which would end its field.
    """
    head = ""
    if id is not None:
        head = f"id: {_one_line(id, 'id')}\n"
    if event is not None:
        head = f"{head}event: {_one_line(event, 'event')}\n"
    if "\n" in data or "\r" in data:
        lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return head + "".join(f"data: {line}\n" for line in lines) + "\n"
    return f"{head}data: {data}\n\n"


def comment(text: str) -> str:
    """A comment frame, which readers skip: ``text`` on one line."""
    return f": {_one_line(text, 'comment')}\n\n"


def field(line: str) -> tuple[str, str] | None:
    """The field and value of one line of a stream, or None for a blank line (the end of an
    event) or a comment. The value loses the one space that may follow the colon; a line
    without a colon is a field with an empty value."""
    if not line or line.startswith(":"):
        return None
    name, colon, value = line.partition(":")
    if colon and value.startswith(" "):
        value = value[1:]
    return name, value


def _one_line(text: str, what: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"an SSE {what} is one line, and this one holds a line break")
    return text
