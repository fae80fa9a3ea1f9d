"""An MCP server's tools and results as agentlib sees them: tools named
``"<server>.<tool>"``, results as the history's content blocks.

Pure functions of the SDK's wire types (pydantic models with snake_case attributes), read
by attribute: this module imports nothing of ``mcp``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .._data._content import (
    AudioContentBlock,
    ContentAnnotations,
    ContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceLinkContentBlock,
    TextContentBlock,
    UnknownContentBlock,
)
from .._data._json import InvalidValue
from .._toolkit._tools import Tool, ToolOutput
from ._servers import MCPServer

__all__ = ["content_block", "destructive", "tool_of", "tool_output"]


def destructive(tool: Any) -> bool:
    """Whether the server's annotations leave ``tool`` possibly destructive: MCP's
    ``destructiveHint`` defaults to true, and means nothing for a read-only tool."""
    hints = getattr(tool, "annotations", None)
    if hints is None:
        return True
    if hints.read_only_hint:
        return False
    return hints.destructive_hint is not False


def tool_of(
    server_name: str,
    server: MCPServer,
    tool: Any,
    call: Callable[[str, dict[str, Any]], Awaitable[ToolOutput]],
) -> Tool:
    """The server's ``tool`` (an ``mcp.types.Tool``) as a tool of kind ``"mcp"`` whose
    calls go through ``call(tool_name, arguments)``."""
    name: str = tool.name

    async def call_tool(**arguments: Any) -> ToolOutput:
        return await call(name, arguments)

    schema = dict(tool.input_schema) if tool.input_schema else {}
    schema.setdefault("type", "object")
    description = tool.description or tool.title or ""
    if tool.output_schema:
        # The model reads the result's text; what its structure is helps it read it.
        schema_text = _compact(tool.output_schema)
        description = (
            f"{description}\n\nThe result's structured content follows this JSON schema: "
            f"{schema_text}"
        ).strip()
    return Tool(
        name=f"{server_name}.{name}",
        description=description,
        parameters=schema,
        function=call_tool,
        requires_approval=server.needs_approval(name, destructive=destructive(tool)),
        kind="mcp",
        source=server_name,
        signature=(),
        is_async=True,
    )


def _compact(schema: Mapping[str, Any]) -> str:
    import json

    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def tool_output(result: Any) -> ToolOutput:
    """A ``CallToolResult``'s content as blocks, its ``structuredContent`` and ``isError``."""
    content = tuple(content_block(block) for block in result.content)
    return ToolOutput(
        content=content,
        structured_content=result.structured_content,
        is_error=bool(result.is_error),
    )


def _annotations(block: Any) -> ContentAnnotations | None:
    found = getattr(block, "annotations", None)
    if found is None:
        return None
    try:
        return ContentAnnotations(
            audience=None if found.audience is None else tuple(found.audience),
            priority=found.priority,
            last_modified=found.last_modified,
        )
    except InvalidValue:
        return None  # annotations the server got wrong say nothing: the block stays


def _meta(block: Any) -> dict[str, Any] | None:
    meta = getattr(block, "meta", None)
    return dict(meta) if meta else None


def content_block(block: Any) -> ContentBlock:
    """An MCP content block (text, image, audio, resource link, embedded resource) as the
    history's block, its ``annotations`` and ``_meta`` kept; another type as an
    :class:`UnknownContentBlock` holding its fields."""
    common: dict[str, Any] = {"annotations": _annotations(block), "meta": _meta(block)}
    kind = getattr(block, "type", None)
    try:
        if kind == "text":
            return TextContentBlock(text=block.text, **common)
        if kind == "image":
            uri = f"data:{block.mime_type};base64,{block.data}"
            return ImageContentBlock(uri=uri, media_type=block.mime_type, **common)
        if kind == "audio":
            uri = f"data:{block.mime_type};base64,{block.data}"
            return AudioContentBlock(uri=uri, media_type=block.mime_type, **common)
        if kind == "resource_link":
            return ResourceLinkContentBlock(
                uri=str(block.uri),
                name=block.name,
                title=block.title,
                description=block.description,
                media_type=block.mime_type,
                size=block.size,
                **common,
            )
        if kind == "resource":
            resource = block.resource
            return EmbeddedResourceContentBlock(
                uri=str(resource.uri),
                media_type=resource.mime_type,
                text=getattr(resource, "text", None),
                blob=getattr(resource, "blob", None),
                **common,
            )
    except InvalidValue:
        pass  # kept below as it came, rather than lost
    raw = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    original = str(raw.pop("type", "unknown"))
    if original in ("text", "image", "audio", "resource_link", "resource"):
        original = f"mcp_{original}"
    return UnknownContentBlock(original_type=original, raw=raw)
