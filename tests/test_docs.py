"""The README's and the guides' examples: each runs on its own and prints what the page says
it prints; and the API reference has an entry for every public name.

Each ```python block is a whole script (its imports and definitions included): it runs in a
namespace of its own, and a ```text block right after it is the output it must print.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import attrs
import pytest

import agentlib
import agentlib_sync

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


@attrs.frozen
class Example:
    page: pathlib.Path
    number: int
    code: str
    expected: str | None

    @property
    def name(self) -> str:
        return f"{self.page.stem.lower()}_{self.number}"


def examples(page: pathlib.Path) -> list[Example]:
    """The python blocks of ``page``, each with the text block right after it, if any."""
    blocks = [
        (m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(page.read_text())
    ]
    found: list[Example] = []
    for index, (lang, body, _start, end) in enumerate(blocks):
        if lang != "python":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        expected = None
        if following is not None and following[0] == "text" and following[2] == end + 1:
            expected = following[1]
        found.append(Example(page, len(found) + 1, body, expected))
    return found


PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
EXAMPLES = [example for page in PAGES for example in examples(page)]


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.name for example in EXAMPLES])
def test_example_runs_alone_and_prints_what_the_page_shows(example: Example) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{example.name}"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example.code, f"{example.page.name}[{example.number}]", "exec"), namespace)
    if example.expected is not None:
        assert out.getvalue() == example.expected


# --- the API reference ----------------------------------------------------------------------

REFERENCE = DOCS / "reference"


@pytest.mark.parametrize("name", agentlib.__all__)
def test_every_public_name_of_agentlib_has_a_reference_entry(name: str) -> None:
    assert f"::: agentlib.{name}\n" in (REFERENCE / "agentlib.md").read_text()


@pytest.mark.parametrize("name", agentlib_sync.__all__)
def test_every_public_name_of_agentlib_sync_has_a_reference_entry(name: str) -> None:
    page = (REFERENCE / "agentlib_sync.md").read_text()
    own = f"::: agentlib_sync.{name}\n" in page
    shared = f"[agentlib.{name}]" in page and getattr(agentlib_sync, name) is getattr(
        agentlib, name
    )
    assert own or shared


def test_every_reference_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in REFERENCE.glob("*.md"):
        assert f" reference/{page.name}\n" in nav
