"""MCP servers no one here wrote: ``mcp-server-time`` from PyPI (a test dependency) and,
where Node.js is present, the reference ``@modelcontextprotocol/server-everything`` from
npm, which ``.ci/run`` installs into .ci/node/ (or name its ``dist/index.js`` in
``AGENTLIB_TEST_SERVER_EVERYTHING``)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from _support import Recorder, call_tool

import agentlib
from agentlib import (
    Agent,
    Completed,
    ContextMessage,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ModelRequest,
    ResourceLinkContentBlock,
    ScriptedModel,
    StdioMCP,
    ToolResultEntry,
)

pytestmark = pytest.mark.slow  # real servers, started for each test

DEADLINE = 60
EVERYTHING = Path(
    os.environ.get(
        "AGENTLIB_TEST_SERVER_EVERYTHING",
        Path(__file__).resolve().parent.parent
        / ".ci/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    )
)


async def last_result(
    server: StdioMCP, tool: str, **arguments: Any
) -> tuple[ToolResultEntry, ModelRequest]:
    """Call ``tool`` of ``server`` (named "s") once: its result, and what the model saw."""
    recorder = Recorder()
    steps = [call_tool(f"s.{tool}", **arguments), recorder]
    agent = Agent("a", model=ScriptedModel(steps), mcps={"s": server})
    with trio.fail_after(DEADLINE):
        async with agentlib.open_runtime():
            session = await agent.start_session()
            record = await session.run("go")
    assert isinstance(record, Completed), record
    request = recorder.requests[0]
    result = request.entries[-1]
    assert isinstance(result, ToolResultEntry)
    return result, request


# --- mcp-server-time ----------------------------------------------------------------------


def time_server() -> StdioMCP:
    return StdioMCP(command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"])


async def test_mcp_server_time_tells_the_time_in_a_timezone() -> None:
    result, request = await last_result(time_server(), "get_current_time", timezone="Europe/Paris")
    assert not result.is_error
    assert "Europe/Paris" in result.text
    assert {"s.get_current_time", "s.convert_time"} <= {t.name for t in request.tools}


async def test_mcp_server_time_reports_an_unknown_timezone_as_a_tool_error() -> None:
    result, _ = await last_result(time_server(), "get_current_time", timezone="Nowhere/Atlantis")
    assert result.is_error


# --- @modelcontextprotocol/server-everything ----------------------------------------------


@pytest.fixture
def everything() -> StdioMCP:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: server-everything cannot run")
    if not EVERYTHING.exists():
        pytest.skip(
            f"server-everything is not installed at {EVERYTHING}: .ci/run installs it "
            "(npm install --prefix .ci/node @modelcontextprotocol/server-everything)"
        )
    return StdioMCP(command=[node, str(EVERYTHING)])


async def test_everything_echoes_and_gives_its_instructions(everything: StdioMCP) -> None:
    result, request = await last_result(everything, "echo", message="hi")
    assert "hi" in result.text
    (message,) = [e for e in request.entries if isinstance(e, ContextMessage)]
    assert message.source == "mcp:s"
    assert "Everything" in message.text


async def test_everything_returns_an_image(everything: StdioMCP) -> None:
    result, _ = await last_result(everything, "get-tiny-image")
    (image,) = [b for b in result.content if isinstance(b, ImageContentBlock)]
    assert image.media_type == "image/png"
    assert image.uri.startswith("data:image/png;base64,")


async def test_everything_returns_resource_links(everything: StdioMCP) -> None:
    result, _ = await last_result(everything, "get-resource-links", count=2)
    links = [b for b in result.content if isinstance(b, ResourceLinkContentBlock)]
    assert len(links) == 2


async def test_everything_returns_an_embedded_resource(everything: StdioMCP) -> None:
    result, _ = await last_result(
        everything, "get-resource-reference", resourceType="Text", resourceId=1
    )
    (resource,) = [b for b in result.content if isinstance(b, EmbeddedResourceContentBlock)]
    assert resource.text is not None


async def test_everything_returns_structured_content(everything: StdioMCP) -> None:
    result, _ = await last_result(everything, "get-structured-content", location="New York")
    assert set(result.structured_content) >= {"temperature", "conditions", "humidity"}


async def test_everything_keeps_a_blocks_annotations(everything: StdioMCP) -> None:
    result, _ = await last_result(everything, "get-annotated-message", messageType="error")
    assert any(block.annotations is not None for block in result.content)


async def test_everything_finishes_a_call_that_reports_progress(everything: StdioMCP) -> None:
    result, _ = await last_result(everything, "trigger-long-running-operation", duration=1, steps=2)
    assert not result.is_error
