"""Content blocks: the pieces a message or a tool result is made of (MCP's content model)."""

from __future__ import annotations

import base64
import binascii
import datetime
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Union

import attrs

from ._json import (
    InvalidValue,
    as_json,
    check_json_object,
    check_text_fields,
    known_tag_refused,
    raw_field,
)

__all__ = [
    "AudioContentBlock",
    "ContentAnnotations",
    "ContentBlock",
    "EmbeddedResourceContentBlock",
    "ImageContentBlock",
    "ResourceLinkContentBlock",
    "TextContentBlock",
    "UnknownContentBlock",
]

#: The longest base64 text an embedded image may have (a file of about 7.5 MB).
MAX_IMAGE_BASE64_CHARS = 10_000_000


def _check_priority(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not 0.0 <= float(value) <= 1.0:  # type: ignore[arg-type]
        raise InvalidValue("priority must be between 0 and 1")


def _check_timestamp(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is None:
        return
    # Python 3.10's fromisoformat does not take the "Z" suffix.
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidValue(
            "last_modified must be an ISO 8601 timestamp, e.g. '2026-01-31T12:00:00Z'"
        ) from None


def _check_audience(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not all(isinstance(role, str) for role in value):
        raise InvalidValue('audience must be a list of roles, such as ["user", "assistant"]')


def _to_tuple(value: object) -> object:
    if isinstance(value, list):
        return tuple(value)
    return value


@attrs.frozen(kw_only=True)
class ContentAnnotations:
    """MCP annotations of a block: who it is for and how much it matters.

    A tool result block whose audience leaves out ``"assistant"`` is never sent to the model;
    a client may hide a block whose audience leaves out ``"user"``.

    Attributes:
        audience: ``"user"``, ``"assistant"`` or both; None means both.
        priority: How important the block is, between 0 and 1.
        last_modified: When the block's content last changed, as an ISO 8601 timestamp.
    """

    audience: tuple[str, ...] | None = attrs.field(
        default=None, converter=_to_tuple, validator=_check_audience
    )
    priority: float | None = attrs.field(default=None, validator=_check_priority)
    last_modified: str | None = attrs.field(default=None, validator=_check_timestamp)

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)


@attrs.frozen(kw_only=True)
class _Block:
    annotations: ContentAnnotations | None = None
    meta: dict[str, Any] | None = attrs.field(
        default=None, converter=as_json, validator=check_json_object
    )

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)  # what a store cannot keep is refused as the block is built


@attrs.frozen(kw_only=True)
class TextContentBlock(_Block):
    """A block of text.

    Attributes:
        text: The text.
        annotations: Who the block is for and how much it matters.
        meta: Metadata for your client (MCP's ``_meta``); the model never sees it.
    """

    type: ClassVar[Literal["text"]] = "text"
    text: str = ""


_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image_type(data: bytes) -> str | None:
    """The media type of PNG, JPEG, GIF or WebP bytes, or None for anything else."""
    for signature, media_type in _SIGNATURES:
        if data.startswith(signature):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@attrs.frozen(kw_only=True)
class ImageContentBlock(_Block):
    """An image, named by its URI (often a ``data:`` URI holding the image in base64).

    Attributes:
        uri: The image's URI.
        media_type: The image's media type, e.g. ``"image/png"``.
        alt_text: A text description of the image.
    """

    type: ClassVar[Literal["image"]] = "image"
    uri: str
    media_type: str | None = None
    alt_text: str | None = None

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        media_type: str | None = None,
        *,
        alt_text: str | None = None,
        annotations: ContentAnnotations | None = None,
    ) -> ImageContentBlock:
        """An embedded image; the media type is sniffed from PNG, JPEG, GIF or WebP bytes.

        Args:
            data: The image's bytes.
            media_type: The media type; by default the one sniffed from ``data``.
            alt_text: A text description of the image.
            annotations: Who the block is for and how much it matters.

        Raises:
            ValueError: ``data`` is not PNG, JPEG, GIF or WebP and no ``media_type`` was
                given, or its base64 form is longer than 10,000,000 characters.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        if media_type is None:
            media_type = sniff_image_type(data)
            if media_type is None:
                raise ValueError(
                    "could not tell the image type from its bytes (PNG, JPEG, GIF and WebP are "
                    "recognised); pass media_type=, e.g. media_type='image/bmp'"
                )
        encoded_length = 4 * ((len(data) + 2) // 3)
        if encoded_length > MAX_IMAGE_BASE64_CHARS:
            raise ValueError(
                f"the image is {len(data):,} bytes, {encoded_length:,} characters in base64; "
                f"the limit is {MAX_IMAGE_BASE64_CHARS:,} characters (about 7.5 MB): "
                "resize it or pass a link with ImageContentBlock(uri=...)"
            )
        encoded = base64.b64encode(data).decode("ascii")
        return cls(
            uri=f"data:{media_type};base64,{encoded}",
            media_type=media_type,
            alt_text=alt_text,
            annotations=annotations,
        )

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        media_type: str | None = None,
        *,
        alt_text: str | None = None,
        annotations: ContentAnnotations | None = None,
    ) -> ImageContentBlock:
        """An embedded image read from a local file.

        Args:
            path: The image file.
            media_type: The media type; by default the one sniffed from the file's bytes.
            alt_text: A text description of the image.
            annotations: Who the block is for and how much it matters.

        Raises:
            ValueError: The file's base64 form is longer than 10,000,000 characters (a file of
                about 7.5 MB), or its type cannot be sniffed and no ``media_type`` was given.
            OSError: The file cannot be read.
        """
        size = os.stat(path).st_size
        if 4 * ((size + 2) // 3) > MAX_IMAGE_BASE64_CHARS:
            raise ValueError(
                f"the image file is {size:,} bytes, over {MAX_IMAGE_BASE64_CHARS:,} characters "
                "in base64 (about 7.5 MB): resize it or pass a link with ImageContentBlock(uri=...)"
            )
        with open(path, "rb") as file:
            data = file.read()
        return cls.from_bytes(data, media_type, alt_text=alt_text, annotations=annotations)


@attrs.frozen(kw_only=True)
class AudioContentBlock(_Block):
    """An audio clip, named by its URI.

    Attributes:
        uri: The clip's URI, e.g. a ``data:`` URI holding it in base64.
        media_type: The clip's media type, e.g. ``"audio/wav"``.
    """

    type: ClassVar[Literal["audio"]] = "audio"
    uri: str
    media_type: str | None = None


@attrs.frozen(kw_only=True)
class ResourceLinkContentBlock(_Block):
    """A link to a resource, such as a file, that the block does not contain.

    Attributes:
        uri: The resource's URI.
        name: The resource's name.
        title: A name for display.
        description: What the resource is.
        media_type: The resource's media type.
        size: The resource's size in bytes.
    """

    type: ClassVar[Literal["resource_link"]] = "resource_link"
    uri: str
    name: str | None = None
    title: str | None = None
    description: str | None = None
    media_type: str | None = None
    size: int | None = attrs.field(default=None)

    @size.validator
    def _check_size(self, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is not None and value < 0:
            raise InvalidValue("size must be a number of bytes, 0 or more")


@attrs.frozen(kw_only=True)
class EmbeddedResourceContentBlock(_Block):
    """A resource, such as a file, held in the block as text or as base64 data.

    Exactly one of ``text`` and ``blob`` is set.

    Attributes:
        uri: The resource's URI.
        media_type: The resource's media type.
        text: The resource's text.
        blob: The resource's bytes, in base64.
    """

    type: ClassVar[Literal["embedded_resource"]] = "embedded_resource"
    uri: str
    media_type: str | None = None
    text: str | None = None
    blob: str | None = None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if (self.text is None) == (self.blob is None):
            raise InvalidValue(
                "an embedded resource holds exactly one of text and blob"
                + (" (both were given)" if self.text is not None else " (neither was given)")
            )
        if self.blob is not None:
            try:
                base64.b64decode(self.blob, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidValue("blob must be base64 text") from None


@attrs.frozen(kw_only=True)
class UnknownContentBlock:
    """A content block of a type added after this version of agentlib.

    Its ``type`` is ``"unknown"`` so a ``match`` on known types keeps working;
    ``original_type`` is the type it arrived with and ``raw`` every other field it had,
    re-emitted unchanged. A turn's input may not contain one.

    Attributes:
        original_type: The block's type as received.
        raw: The block's other fields, as received.
    """

    type: ClassVar[Literal["unknown"]] = "unknown"
    original_type: str = attrs.field(
        validator=known_tag_refused(lambda: ContentBlock, "content block")
    )
    raw: Mapping[str, Any] = raw_field()

    def __attrs_post_init__(self) -> None:
        check_text_fields(self)


ContentBlock = Union[
    TextContentBlock,
    ImageContentBlock,
    AudioContentBlock,
    ResourceLinkContentBlock,
    EmbeddedResourceContentBlock,
    UnknownContentBlock,
]
"""A block of a message's or a tool result's content: match it by class."""


def text_of(blocks: tuple[ContentBlock, ...]) -> str:
    """The text blocks of ``blocks``, joined."""
    return "".join(block.text for block in blocks if isinstance(block, TextContentBlock))
