"""The guides' (and the README's) examples run, and print what the guides say they print.

In each page of docs/, the ```python blocks run in order in one namespace; a ```text block
right after one is the output it must print.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

import agentlib
import agentlib_sync

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def examples(page: pathlib.Path) -> list[tuple[str, str | None]]:
    """(code, expected output or None) for each python block of ``page``."""
    blocks = [
        (m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(page.read_text())
    ]
    pairs: list[tuple[str, str | None]] = []
    for index, (lang, body, _start, end) in enumerate(blocks):
        if lang != "python":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        expected = None
        if following is not None and following[0] == "text" and following[2] == end + 1:
            expected = following[1]
        pairs.append((body, expected))
    return pairs


PAGES = sorted(page for page in [*DOCS.glob("*.md"), DOCS.parent / "README.md"] if examples(page))


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_guide_examples_run_and_print_what_the_guide_shows(page: pathlib.Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, (code, expected) in enumerate(examples(page), start=1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{page.name}[{number}]", "exec"), namespace)
        if expected is not None:
            assert out.getvalue() == expected, f"{page.name}, example {number}"


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
