"""Server-Sent Events, the text format: the frames the server writes, read back field by
field as a model's stream is read."""

from __future__ import annotations

import pytest

from agentlib._data._sse_format import comment, field, frame


def fields(text: str) -> list[tuple[str, str] | None]:
    return [field(line) for line in text.split("\n")]


def test_a_frame_is_its_id_type_and_data_then_a_blank_line() -> None:
    text = frame('{"a":1}', event="turn_started", id="0001")
    assert text == 'id: 0001\nevent: turn_started\ndata: {"a":1}\n\n'
    assert fields(text) == [
        ("id", "0001"),
        ("event", "turn_started"),
        ("data", '{"a":1}'),
        None,
        None,
    ]


def test_data_of_several_lines_takes_a_data_field_each() -> None:
    assert frame("one\ntwo\r\nthree") == "data: one\ndata: two\ndata: three\n\n"


@pytest.mark.parametrize("where", ["id", "event"])
def test_an_id_or_type_with_a_line_break_is_refused(where: str) -> None:
    with pytest.raises(ValueError, match=f"an SSE {where} is one line"):
        frame("{}", **{where: "a\nb"})


def test_a_comment_is_skipped_by_a_reader() -> None:
    assert comment("ping") == ": ping\n\n"
    assert field(": ping") is None


@pytest.mark.parametrize(
    ("line", "read"),
    [
        ("data: x", ("data", "x")),
        ("data:x", ("data", "x")),
        ("data:  x", ("data", " x")),  # one space goes, the next stays
        ("data", ("data", "")),
        ("retry: 10", ("retry", "10")),
        ("", None),
    ],
)
def test_a_line_is_read_as_its_field_and_value(line: str, read: tuple[str, str] | None) -> None:
    assert field(line) == read
