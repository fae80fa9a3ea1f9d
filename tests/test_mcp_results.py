"""The MCP SDK's tools and results as agentlib's (agentlib/_mcp/_results.py), without a
server: the SDK's wire types in, tools and content blocks out."""

from __future__ import annotations

import pytest
from mcp.types import (
    Annotations,
    CallToolResult,
    TextContent,
    Tool,
    ToolAnnotations,
)

from agentlib import StdioMCP, TextContentBlock, UnknownContentBlock
from agentlib._mcp._results import content_block, destructive, tool_of, tool_output
from agentlib._toolkit._tools import ToolOutput


async def never_called(tool: str, arguments: dict[str, object]) -> ToolOutput:
    raise AssertionError("not called")


def mcp_tool(**hints: bool) -> Tool:
    annotations = ToolAnnotations(**hints) if hints else None
    return Tool(name="t", input_schema={"type": "object"}, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({}, True),  # MCP: destructiveHint defaults to true
        ({"destructive_hint": True}, True),
        ({"destructive_hint": False}, False),
        ({"read_only_hint": True}, False),
        ({"read_only_hint": True, "destructive_hint": True}, False),  # read-only wins
    ],
)
def test_a_tool_is_destructive_unless_its_hints_say_otherwise(
    hints: dict[str, bool], expected: bool
) -> None:
    assert destructive(mcp_tool(**hints)) is expected


def test_a_tool_is_named_after_its_server_and_keeps_its_input_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    made = tool_of(
        "docs",
        StdioMCP(command=["s"]),
        Tool(name="search", description="Search.", input_schema=schema),
        never_called,
    )
    assert (made.name, made.kind, made.source) == ("docs.search", "mcp", "docs")
    assert made.schema.parameters == schema
    assert made.schema.description == "Search."
    assert made.structure_arguments({"q": "x", "extra": 1}) == {"q": "x", "extra": 1}


def test_a_block_of_a_type_agentlib_does_not_know_is_kept_as_unknown() -> None:
    class Future:
        type = "hologram"

        def model_dump(self, **options: object) -> dict[str, object]:
            return {"type": "hologram", "depth": 3}

    block = content_block(Future())
    assert isinstance(block, UnknownContentBlock)
    assert (block.original_type, dict(block.raw)) == ("hologram", {"depth": 3})


def test_a_results_is_error_and_structured_content_are_kept() -> None:
    result = CallToolResult(
        content=[TextContent(text="no", annotations=Annotations(priority=1.0))],
        structured_content={"code": 7},
        is_error=True,
    )
    output = tool_output(result)
    assert output.is_error
    assert output.structured_content == {"code": 7}
    (block,) = output.content
    assert isinstance(block, TextContentBlock)
    assert block.annotations is not None
    assert block.annotations.priority == 1.0
