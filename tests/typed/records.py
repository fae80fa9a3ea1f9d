"""What a type checker infers in a user's code, checked with the docs' examples
(tests/test_docs.py): a record is typed by the output_type given to run or result."""

from typing import Any

import attrs
from typing_extensions import assert_type

import agentlib
import agentlib_sync


@attrs.frozen
class Sum:
    total: int


def blocking(session: agentlib_sync.Session, turn: agentlib_sync.Turn) -> None:
    assert_type(session.run("1 + 2?", output_type=Sum).output_or_raise(), Sum)
    assert_type(turn.result(output_type=Sum).output_or_raise(), Sum)
    assert_type(session.run("1 + 2?").output_or_raise(), Any)
    record = session.run("1 + 2?", output_type=Sum)
    if isinstance(record, agentlib_sync.Completed):
        assert_type(record.output, Sum)


async def trio_native(session: agentlib.Session, turn: agentlib.Turn) -> None:
    assert_type((await session.run("1 + 2?", output_type=Sum)).output_or_raise(), Sum)
    assert_type((await turn.result(output_type=Sum)).output_or_raise(), Sum)
    match await turn.get():
        case agentlib.Completed(output=output):
            assert_type(output, Any)
        case agentlib.Failed(error):
            assert_type(error, agentlib.ErrorInfo)
