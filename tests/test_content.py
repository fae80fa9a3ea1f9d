"""Content blocks: the pieces a message or a tool result is made of (SPEC section 7)."""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

import attrs
import pytest

import agentlib
from agentlib import (
    AudioContentBlock,
    ContentAnnotations,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceLinkContentBlock,
    TextContentBlock,
    UnknownContentBlock,
)

# Each test runs on a local runtime and on agents served over HTTP (conftest's transport).
pytestmark = pytest.mark.usefixtures("transport")

# The smallest byte strings each image format is recognised by (its signature, then a little).
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01"
GIF87 = b"GIF87a\x01\x00\x01\x00\x00\x00\x00"
GIF89 = b"GIF89a\x01\x00\x01\x00\x00\x00\x00"
WEBP = b"RIFF" + (20).to_bytes(4, "little") + b"WEBPVP8 " + b"\x00" * 8
BMP = b"BM" + b"\x00" * 16

LIMIT = 10_000_000
#: The largest file whose base64 form fits in 10,000,000 characters.
LARGEST_BYTES = LIMIT // 4 * 3

BLOCK_CLASSES = [
    pytest.param(TextContentBlock, {"text": "hi"}, id="text"),
    pytest.param(ImageContentBlock, {"uri": "https://example.com/a.png"}, id="image"),
    pytest.param(AudioContentBlock, {"uri": "https://example.com/a.wav"}, id="audio"),
    pytest.param(ResourceLinkContentBlock, {"uri": "file:///a.txt"}, id="resource_link"),
    pytest.param(
        EmbeddedResourceContentBlock, {"uri": "file:///a.txt", "text": "a"}, id="embedded_resource"
    ),
]


def roundtrip(value: object, cls: object) -> object:
    return agentlib.structure(agentlib.unstructure(value), cls)


# --- TextContentBlock ---------------------------------------------------------------------


def test_text_block_has_type_text() -> None:
    assert TextContentBlock(text="hi").type == "text"


def test_text_block_text_defaults_to_empty() -> None:
    assert TextContentBlock().text == ""


def test_text_block_unstructures_to_a_dict_tagged_text() -> None:
    data = agentlib.unstructure(TextContentBlock(text="hi"))

    assert data == {"type": "text", "annotations": None, "meta": None, "text": "hi"}


def test_text_block_structures_from_a_minimal_dict() -> None:
    block = agentlib.structure({"type": "text", "text": "hi"}, agentlib.ContentBlock)

    assert block == TextContentBlock(text="hi")


# --- ImageContentBlock --------------------------------------------------------------------


def test_image_block_has_type_image() -> None:
    assert ImageContentBlock(uri="https://example.com/a.png").type == "image"


def test_image_block_requires_a_uri() -> None:
    with pytest.raises(TypeError, match="uri"):
        ImageContentBlock()  # type: ignore[call-arg]


def test_image_block_keeps_media_type_and_alt_text() -> None:
    block = ImageContentBlock(uri="u", media_type="image/png", alt_text="a cat")

    assert (block.uri, block.media_type, block.alt_text) == ("u", "image/png", "a cat")


@pytest.mark.parametrize(
    ("data", "media_type"),
    [
        pytest.param(PNG, "image/png", id="png"),
        pytest.param(JPEG, "image/jpeg", id="jpeg"),
        pytest.param(GIF87, "image/gif", id="gif87a"),
        pytest.param(GIF89, "image/gif", id="gif89a"),
        pytest.param(WEBP, "image/webp", id="webp"),
    ],
)
def test_image_from_bytes_sniffs_the_media_type(data: bytes, media_type: str) -> None:
    assert ImageContentBlock.from_bytes(data).media_type == media_type


def test_image_from_bytes_builds_a_base64_data_uri() -> None:
    block = ImageContentBlock.from_bytes(PNG)

    assert block.uri == "data:image/png;base64," + base64.b64encode(PNG).decode("ascii")


def test_image_from_bytes_accepts_bytearray_and_memoryview() -> None:
    expected = ImageContentBlock.from_bytes(PNG)

    assert ImageContentBlock.from_bytes(bytearray(PNG)) == expected
    assert ImageContentBlock.from_bytes(memoryview(PNG)) == expected


def test_image_from_bytes_keeps_alt_text_and_annotations() -> None:
    annotations = ContentAnnotations(audience=["user"], priority=0.5)

    block = ImageContentBlock.from_bytes(PNG, alt_text="a dot", annotations=annotations)

    assert (block.alt_text, block.annotations) == ("a dot", annotations)


def test_image_from_bytes_refuses_unknown_bytes_without_media_type() -> None:
    with pytest.raises(ValueError, match=r"PNG, JPEG, GIF and WebP.*media_type="):
        ImageContentBlock.from_bytes(BMP)


def test_image_from_bytes_refuses_a_riff_file_that_is_not_webp() -> None:
    wave = b"RIFF" + (20).to_bytes(4, "little") + b"WAVEfmt " + b"\x00" * 8

    with pytest.raises(ValueError, match="media_type="):
        ImageContentBlock.from_bytes(wave)


def test_image_from_bytes_refuses_empty_bytes_without_media_type() -> None:
    with pytest.raises(ValueError, match="media_type="):
        ImageContentBlock.from_bytes(b"")


def test_image_from_bytes_takes_unknown_bytes_with_a_media_type() -> None:
    block = ImageContentBlock.from_bytes(BMP, media_type="image/bmp")

    assert block.media_type == "image/bmp"
    assert block.uri == "data:image/bmp;base64," + base64.b64encode(BMP).decode("ascii")


def test_image_from_bytes_given_media_type_wins_over_the_sniffed_one() -> None:
    assert ImageContentBlock.from_bytes(PNG, "image/x-custom").media_type == "image/x-custom"


def test_image_from_bytes_refuses_a_str() -> None:
    with pytest.raises(TypeError, match="bytes"):
        ImageContentBlock.from_bytes("not bytes")  # type: ignore[arg-type]


def test_image_from_bytes_refuses_more_than_10_000_000_base64_characters() -> None:
    data = PNG + bytes(LARGEST_BYTES + 1 - len(PNG))

    with pytest.raises(ValueError, match="10,000,000"):
        ImageContentBlock.from_bytes(data)


def test_image_from_path_reads_and_sniffs_the_file(tmp_path: Path) -> None:
    path = tmp_path / "dot.png"
    path.write_bytes(PNG)

    assert ImageContentBlock.from_path(path) == ImageContentBlock.from_bytes(PNG)


def test_image_from_path_accepts_a_str_path(tmp_path: Path) -> None:
    path = tmp_path / "dot.gif"
    path.write_bytes(GIF89)

    assert ImageContentBlock.from_path(str(path)).media_type == "image/gif"


def test_image_from_path_keeps_alt_text_and_annotations(tmp_path: Path) -> None:
    path = tmp_path / "dot.jpg"
    path.write_bytes(JPEG)
    annotations = ContentAnnotations(priority=1.0)

    block = ImageContentBlock.from_path(path, alt_text="dot", annotations=annotations)

    assert (block.alt_text, block.annotations) == ("dot", annotations)


def test_image_from_path_refuses_unknown_bytes_without_media_type(tmp_path: Path) -> None:
    path = tmp_path / "dot.bmp"
    path.write_bytes(BMP)

    with pytest.raises(ValueError, match="media_type="):
        ImageContentBlock.from_path(path)


def test_image_from_path_takes_unknown_bytes_with_a_media_type(tmp_path: Path) -> None:
    path = tmp_path / "dot.bmp"
    path.write_bytes(BMP)

    assert ImageContentBlock.from_path(path, "image/bmp").media_type == "image/bmp"


def test_image_from_path_raises_os_error_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ImageContentBlock.from_path(tmp_path / "missing.png")


def test_image_from_path_accepts_exactly_10_000_000_base64_characters(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    with open(path, "wb") as file:
        file.write(PNG)
        file.truncate(LARGEST_BYTES)  # sparse: cheap to create

    block = ImageContentBlock.from_path(path)

    assert len(block.uri) == len("data:image/png;base64,") + LIMIT


def test_image_from_path_refuses_a_file_over_10_000_000_base64_characters(tmp_path: Path) -> None:
    path = tmp_path / "huge.png"
    with open(path, "wb") as file:
        file.write(PNG)
        file.truncate(LARGEST_BYTES + 1)

    with pytest.raises(ValueError, match=r"10,000,000 characters"):
        ImageContentBlock.from_path(path)


def test_image_from_path_refusal_names_the_file_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.png"
    with open(path, "wb") as file:
        file.write(PNG)
        file.truncate(7_600_000)

    with pytest.raises(ValueError, match="7,600,000 bytes"):
        ImageContentBlock.from_path(path)


# --- AudioContentBlock --------------------------------------------------------------------


def test_audio_block_has_type_audio() -> None:
    assert AudioContentBlock(uri="data:audio/wav;base64,AAAA").type == "audio"


def test_audio_block_keeps_uri_and_media_type() -> None:
    block = AudioContentBlock(uri="https://example.com/a.wav", media_type="audio/wav")

    assert (block.uri, block.media_type) == ("https://example.com/a.wav", "audio/wav")


def test_audio_block_requires_a_uri() -> None:
    with pytest.raises(TypeError, match="uri"):
        AudioContentBlock()  # type: ignore[call-arg]


# --- ResourceLinkContentBlock -------------------------------------------------------------


def test_resource_link_block_has_type_resource_link() -> None:
    assert ResourceLinkContentBlock(uri="file:///a").type == "resource_link"


def test_resource_link_block_keeps_every_field() -> None:
    block = ResourceLinkContentBlock(
        uri="file:///a.txt",
        name="a.txt",
        title="A",
        description="a file",
        media_type="text/plain",
        size=3,
    )

    assert (block.name, block.title, block.description, block.media_type, block.size) == (
        "a.txt",
        "A",
        "a file",
        "text/plain",
        3,
    )


def test_resource_link_block_accepts_size_zero() -> None:
    assert ResourceLinkContentBlock(uri="file:///empty", size=0).size == 0


def test_resource_link_block_refuses_a_negative_size() -> None:
    with pytest.raises(ValueError, match="size must be a number of bytes"):
        ResourceLinkContentBlock(uri="file:///a", size=-1)


# --- EmbeddedResourceContentBlock ---------------------------------------------------------


def test_embedded_resource_block_has_type_embedded_resource() -> None:
    assert EmbeddedResourceContentBlock(uri="u", text="t").type == "embedded_resource"


def test_embedded_resource_accepts_text_alone() -> None:
    block = EmbeddedResourceContentBlock(uri="file:///a.txt", text="hello")

    assert (block.text, block.blob) == ("hello", None)


def test_embedded_resource_accepts_base64_blob_alone() -> None:
    blob = base64.b64encode(b"\x00\x01\x02").decode("ascii")

    block = EmbeddedResourceContentBlock(uri="file:///a.bin", blob=blob)

    assert (block.text, block.blob) == (None, blob)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        pytest.param({}, "neither was given", id="neither"),
        pytest.param({"text": "t", "blob": "AAAA"}, "both were given", id="both"),
    ],
)
def test_embedded_resource_requires_exactly_one_of_text_and_blob(
    fields: dict[str, str], why: str
) -> None:
    with pytest.raises(ValueError, match=f"exactly one of text and blob \\({why}\\)"):
        EmbeddedResourceContentBlock(uri="file:///a", **fields)


def test_embedded_resource_empty_text_counts_as_given() -> None:
    assert EmbeddedResourceContentBlock(uri="file:///empty", text="").text == ""


def test_embedded_resource_blob_must_be_base64() -> None:
    with pytest.raises(ValueError, match="blob must be base64"):
        EmbeddedResourceContentBlock(uri="file:///a", blob="not base64!")


# --- ContentAnnotations -------------------------------------------------------------------


def test_content_annotations_default_to_none() -> None:
    annotations = ContentAnnotations()

    assert (annotations.audience, annotations.priority, annotations.last_modified) == (
        None,
        None,
        None,
    )


def test_content_annotations_audience_list_becomes_a_tuple() -> None:
    assert ContentAnnotations(audience=["user", "assistant"]).audience == ("user", "assistant")


@pytest.mark.parametrize("priority", [0, 0.0, 0.25, 1, 1.0])
def test_content_annotations_accept_a_priority_from_0_to_1(priority: float) -> None:
    assert ContentAnnotations(priority=priority).priority == priority


@pytest.mark.parametrize("priority", [-0.01, 1.01, 2, -1, math.inf, -math.inf, math.nan])
def test_content_annotations_refuse_a_priority_outside_0_to_1(priority: float) -> None:
    with pytest.raises(ValueError, match="priority must be between 0 and 1"):
        ContentAnnotations(priority=priority)


@pytest.mark.parametrize(
    "timestamp",
    [
        "2026-01-31T12:00:00Z",
        "2026-01-31T12:00:00z",
        "2026-01-31T12:00:00.123Z",
        "2026-01-31T12:00:00+02:00",
        "2026-01-31T12:00:00",
    ],
)
def test_content_annotations_accept_an_iso_8601_last_modified(timestamp: str) -> None:
    assert ContentAnnotations(last_modified=timestamp).last_modified == timestamp


@pytest.mark.parametrize("timestamp", ["yesterday", "", "31/01/2026", "2026-13-01T00:00:00Z", "Z"])
def test_content_annotations_refuse_a_last_modified_that_is_not_iso_8601(timestamp: str) -> None:
    with pytest.raises(ValueError, match="last_modified must be an ISO 8601 timestamp"):
        ContentAnnotations(last_modified=timestamp)


def test_content_annotations_structure_from_camel_case() -> None:
    annotations = agentlib.structure(
        {"audience": ["user"], "priority": 0.5, "lastModified": "2026-01-31T12:00:00Z"},
        ContentAnnotations,
    )

    assert annotations == ContentAnnotations(
        audience=("user",), priority=0.5, last_modified="2026-01-31T12:00:00Z"
    )


def test_content_annotations_are_frozen() -> None:
    annotations = ContentAnnotations(priority=0.5)

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        annotations.priority = 1.0  # type: ignore[misc]


# --- meta and annotations on every block ---------------------------------------------------


@pytest.mark.parametrize(("cls", "fields"), BLOCK_CLASSES)
def test_block_meta_accepts_a_json_object(cls: type, fields: dict[str, str]) -> None:
    meta = {"source": "crm", "ids": [1, 2.5, None, True], "nested": {"a": {}}}

    assert cls(**fields, meta=meta).meta == meta


@pytest.mark.parametrize(("cls", "fields"), BLOCK_CLASSES)
@pytest.mark.parametrize("meta", [["a"], "a", 3, True], ids=["list", "str", "int", "bool"])
def test_block_meta_must_be_a_json_object(cls: type, fields: dict[str, str], meta: object) -> None:
    with pytest.raises(ValueError, match="meta must be a JSON object"):
        cls(**fields, meta=meta)


@pytest.mark.parametrize(
    "meta",
    [{"a": {1, 2}}, {"a": math.nan}, {"a": {1: "x"}}, {"a": object()}],
    ids=["set", "nan", "int-key", "object"],
)
def test_block_meta_values_must_be_json(meta: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="meta must be JSON"):
        TextContentBlock(text="t", meta=meta)


@pytest.mark.parametrize(("cls", "fields"), BLOCK_CLASSES)
def test_block_keeps_its_annotations(cls: type, fields: dict[str, str]) -> None:
    annotations = ContentAnnotations(audience=["assistant"], priority=0.1)

    assert cls(**fields, annotations=annotations).annotations == annotations


@pytest.mark.parametrize(("cls", "fields"), BLOCK_CLASSES)
def test_blocks_are_frozen(cls: type, fields: dict[str, str]) -> None:
    block = cls(**fields)

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        block.meta = {"changed": True}  # type: ignore[misc]


@pytest.mark.parametrize(("cls", "fields"), BLOCK_CLASSES)
def test_block_structures_from_its_tagged_dict(cls: type, fields: dict[str, str]) -> None:
    block = agentlib.structure({"type": cls.type, **fields}, agentlib.ContentBlock)

    assert block == cls(**fields)


def test_block_structures_from_camel_case_keys() -> None:
    data = {"type": "image", "uri": "u", "mediaType": "image/png", "altText": "a cat"}

    block = agentlib.structure(data, agentlib.ContentBlock)

    assert block == ImageContentBlock(uri="u", media_type="image/png", alt_text="a cat")


def test_block_meta_unstructures_under_meta() -> None:
    data = agentlib.unstructure(TextContentBlock(text="t", meta={"k": 1}))

    assert data["meta"] == {"k": 1}


def test_block_types_can_be_matched() -> None:
    def kind(block: agentlib.ContentBlock) -> str:
        match block:
            case TextContentBlock(text=text):
                return f"text {text}"
            case ImageContentBlock(uri=uri):
                return f"image {uri}"
            case UnknownContentBlock(original_type=original):
                return f"unknown {original}"
            case _:
                return "other"

    assert [
        kind(TextContentBlock(text="a")),
        kind(ImageContentBlock(uri="u")),
        kind(UnknownContentBlock(original_type="video")),
        kind(AudioContentBlock(uri="u")),
    ] == ["text a", "image u", "unknown video", "other"]


def test_block_constructor_rule_violation_raises_agentlib_validation_error() -> None:
    # Every error agentlib raises on purpose is an SdkError; bad blocks are ValidationErrors.
    with pytest.raises(agentlib.ValidationError, match="exactly one of text and blob"):
        EmbeddedResourceContentBlock(uri="file:///a")


# --- UnknownContentBlock ------------------------------------------------------------------


def test_unknown_content_block_has_type_unknown() -> None:
    assert UnknownContentBlock(original_type="video").type == "unknown"


def test_unknown_content_block_keeps_its_original_type() -> None:
    assert UnknownContentBlock(original_type="video").original_type == "video"


def test_unknown_content_block_raw_defaults_to_empty() -> None:
    assert UnknownContentBlock(original_type="video").raw == {}


@pytest.mark.parametrize("known", ["text", "image", "audio", "resource_link", "embedded_resource"])
def test_unknown_content_block_refuses_a_known_original_type(known: str) -> None:
    with pytest.raises(ValueError, match="is a known content block type"):
        UnknownContentBlock(original_type=known)


def test_unknown_content_block_raw_must_be_json() -> None:
    with pytest.raises(ValueError, match="raw must be JSON"):
        UnknownContentBlock(original_type="video", raw={"when": object()})


def test_unknown_block_tag_structures_into_unknown_content_block() -> None:
    data = {"type": "video", "uri": "https://example.com/v.mp4", "durationSeconds": 12}

    block = agentlib.structure(data, agentlib.ContentBlock)

    assert block == UnknownContentBlock(
        original_type="video", raw={"uri": "https://example.com/v.mp4", "durationSeconds": 12}
    )


def test_unknown_content_block_keeps_fields_a_known_block_would_refuse() -> None:
    data = {"type": "video", "annotations": {"priority": 7}, "meta": ["not", "an", "object"]}

    block = agentlib.structure(data, agentlib.ContentBlock)

    assert block.raw == {"annotations": {"priority": 7}, "meta": ["not", "an", "object"]}


def test_unknown_content_block_unstructures_to_the_data_it_came_from() -> None:
    data = {"type": "video", "uri": "u", "durationSeconds": 12, "tracks": [{"lang": "fr"}]}

    assert agentlib.unstructure(agentlib.structure(data, agentlib.ContentBlock)) == data


def test_unknown_content_block_unstructures_with_its_original_type() -> None:
    block = UnknownContentBlock(original_type="video", raw={"uri": "u"})

    assert agentlib.unstructure(block) == {"type": "video", "uri": "u"}


def test_unknown_content_block_round_trips_inside_a_message() -> None:
    entry = agentlib.MessageEntry(
        id="e1",
        role="assistant",
        content=[TextContentBlock(text="see"), UnknownContentBlock(original_type="map")],
    )

    assert roundtrip(entry, agentlib.Entry) == entry


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda text: agentlib.TextContentBlock(text=text), "text"),
        (lambda text: agentlib.ImageContentBlock(uri="u", alt_text=text), "alt_text"),
        (lambda text: agentlib.AudioContentBlock(uri=text), "uri"),
        (lambda text: agentlib.ResourceLinkContentBlock(uri="u", title=text), "title"),
        (lambda text: agentlib.EmbeddedResourceContentBlock(uri="u", text=text), "text"),
        (lambda text: agentlib.UnknownContentBlock(original_type=text), "original_type"),
        (lambda text: agentlib.ContentAnnotations(audience=["user", text]), "audience[1]"),
    ],
)
def test_a_block_with_a_lone_surrogate_in_a_text_field_is_refused_naming_it(
    build: Any, field: str
) -> None:
    with pytest.raises(agentlib.ValidationError, match="lone surrogate") as info:
        build("left \udc00 right")
    assert f"@ $.{field}" in str(info.value)
    assert "left" not in str(info.value)
    kept = build("whole characters: é \U0001f600")  # a pair, written as one character
    assert agentlib.structure(agentlib.unstructure(kept), type(kept)) == kept
