"""An MCP server for the tests, written with the SDK: ``python _mcp_server.py stdio`` serves
it over stdin and stdout; ``python _mcp_server.py http [PORT]`` over streamable HTTP on
127.0.0.1, printing the port it listens on first.

What the tests observe of it goes, one line each, to the file named by ``MCP_TEST_LOG``
(written before the server answers) and to the observer listening on 127.0.0.1 at port
``MCP_TEST_OBSERVER`` (tests/_mcp_support.py):
``started <pid>``, ``list`` for each ``tools/list``, ``call <tool>`` as a call starts,
``cancelled <tool>`` when a call is cancelled. Over HTTP, ``POST /drop`` makes the server
forget every session it has (the next request of one gets 404), as a restart would.
"""

from __future__ import annotations

import base64
import os
import socket
import sys
from typing import Any, TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    Annotations,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
WAV = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEfmt ").decode()


_observer: list[socket.socket] = []


def log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a") as file:
            file.write(line + "\n")
    port = os.environ.get("MCP_TEST_OBSERVER")
    if port:
        if not _observer:
            _observer.append(socket.create_connection(("127.0.0.1", int(port))))
        _observer[0].sendall(line.encode() + b"\n")


class CountingServer(MCPServer[Any]):
    async def list_tools(self) -> Any:
        log("list")
        return await super().list_tools()


server = CountingServer(
    "agentlib-test",
    instructions=os.environ.get("MCP_TEST_INSTRUCTIONS", "Use echo to repeat a text."),
)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Repeat a text."""
    log("call echo")
    return text


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_everything() -> str:
    """Delete everything (it does not)."""
    log("call delete_everything")
    return "deleted"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def add_note(text: str) -> str:
    """Add a note."""
    log("call add_note")
    return "added"


@server.tool()
def blocks() -> CallToolResult:
    """Return one block of every kind, with structured content."""
    log("call blocks")
    seen = Annotations(audience=["user", "assistant"], priority=0.5)
    return CallToolResult(
        content=[
            TextContent(text="some text", annotations=seen, _meta={"trace": "t1"}),
            ImageContent(data=PNG, mime_type="image/png"),
            AudioContent(data=WAV, mime_type="audio/wav", _meta={"seconds": 1}),
            ResourceLink(
                uri="file:///notes/a.txt",
                name="a.txt",
                title="Note A",
                description="The first note",
                mime_type="text/plain",
                size=12,
            ),
            EmbeddedResource(
                resource=TextResourceContents(
                    uri="file:///notes/b.txt", mime_type="text/plain", text="note b"
                ),
                annotations=Annotations(audience=["user"]),
            ),
            EmbeddedResource(
                resource=BlobResourceContents(
                    uri="file:///notes/c.bin", mime_type="application/octet-stream", blob=PNG
                )
            ),
        ],
        structured_content={"count": 6},
    )


class Weather(TypedDict):
    city: str
    celsius: int


@server.tool()
def weather(city: str) -> Weather:
    """The weather in a city, as structured content."""
    log("call weather")
    return {"city": city, "celsius": 21}


@server.tool()
def headers(ctx: Context) -> dict[str, str]:
    """The request's X-Team and Authorization headers (over HTTP)."""
    sent = ctx.headers or {}
    return {k.lower(): v for k, v in sent.items() if k.lower() in ("x-team", "authorization")}


@server.tool()
def fail() -> CallToolResult:
    """Fail, as a tool error."""
    log("call fail")
    return CallToolResult(content=[TextContent(text="the disk is full")], is_error=True)


@server.tool()
async def wait_forever() -> str:
    """Never answer."""
    log("call wait_forever")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        log("cancelled wait_forever")
        raise
    return "never"


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Add the tool "extra", and say the list changed."""
    log("call add_tool")

    def extra() -> str:
        """A tool added later."""
        return "extra"

    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "added extra"


def serve_http(port: int) -> None:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import Response

    app = server.streamable_http_app()
    dropped: set[str] = set()
    known: set[str] = set()

    async def with_drop(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if scope["path"] == "/drop":
                dropped.update(known)
                await Response("dropped")(scope, receive, send)
                return
            session_id = request.headers.get("mcp-session-id")
            if session_id in dropped:
                await Response("no such session", status_code=404)(scope, receive, send)
                return
            if session_id:
                known.add(session_id)
        await app(scope, receive, send)

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections wait from now on, before the server accepts them
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(with_drop, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    log(f"started {os.getpid()}")
    if sys.argv[1:2] == ["http"]:
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        server.run("stdio")
