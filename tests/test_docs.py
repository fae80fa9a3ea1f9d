"""The README's and the guides' examples: each runs on its own, prints what the page says it
prints, and passes ``mypy --strict`` as a user's file outside the repository would.

Each ```python block is a whole script (its imports and definitions included): it runs in a
namespace of its own, and a ```text block right after it is the output it must print.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys

import attrs
import pytest

import agentlib
import agentlib.store
import agentlib.testing
import agentlib_sync

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: Files of a user's code that pin what a type checker infers, checked with the examples.
TYPED = pathlib.Path(__file__).resolve().parent / "typed"
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


@pytest.mark.slow
def test_examples_pass_mypy_strict_as_user_files(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the lint extra")
    for example in EXAMPLES:
        (tmp_path / f"{example.name}.py").write_text(example.code)
    for typed in TYPED.glob("*.py"):
        (tmp_path / f"typed_{typed.name}").write_text(typed.read_text())
    # Outside the repository, with no configuration of its own: as a user's script is checked.
    environment = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "."],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if 'module named "agentlib' in checked.stdout:
        pytest.fail(
            "mypy cannot find agentlib from outside the repository: install it as the "
            "README says (pip install -e . --config-settings editable_mode=strict)\n"
            + checked.stdout
        )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ci_runs_the_readme_test_command_with_the_strict_editable_install() -> None:
    commands = [
        line.strip()
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("    python3 -m venv .venv && ")
    ]
    assert commands, "the README shows no set-up command"
    for command in commands:
        assert "--config-settings editable_mode=strict" in command
    test_command = next(command for command in commands if "/pytest" in command)
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


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


@pytest.mark.parametrize("name", agentlib.testing.__all__)
def test_every_public_name_of_agentlib_testing_has_a_reference_entry(name: str) -> None:
    assert f"::: agentlib.testing.{name}\n" in (REFERENCE / "agentlib_testing.md").read_text()


@pytest.mark.parametrize("name", agentlib.store.__all__)
def test_every_public_name_of_agentlib_store_has_a_reference_entry(name: str) -> None:
    page = (REFERENCE / "agentlib_store.md").read_text()
    own = f"::: agentlib.store.{name}\n" in page
    shared = f"[agentlib.{name}]" in page and getattr(agentlib.store, name) is getattr(
        agentlib, name, None
    )
    assert own or shared


def test_the_store_contracts_suite_has_a_reference_entry_showing_every_test() -> None:
    page = (REFERENCE / "agentlib_testing.md").read_text()
    assert "::: agentlib.testing.store_contract\n" in page
    entry = page[page.index("::: agentlib.testing.store_contract\n") :]
    assert "show_if_no_docstring: true" in entry  # a test's name states its rule


def test_every_reference_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in REFERENCE.glob("*.md"):
        assert f" reference/{page.name}\n" in nav


def test_no_code_span_in_a_table_shows_a_backslash_before_a_pipe() -> None:
    """The site's tables take a pipe inside a code span as it is: ``\\|`` would show its
    backslash."""
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("|"):
                for span in re.findall(r"`[^`]*`", line):
                    assert "\\|" not in span, f"{page.name}:{number}: {span}"
