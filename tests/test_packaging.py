"""The package's metadata: the wheel's Project-URLs, and the README (its long description)
whose links work on the package index's page too."""

from __future__ import annotations

import configparser
import email
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")


def project_urls() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["metadata"]["project_urls"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)


DOCUMENTATION = project_urls()["Documentation"]
SOURCE = project_urls()["Source"]
README_LINKS = LINK.findall((ROOT / "README.md").read_text())


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory: pytest.TempPathFactory) -> email.message.Message:
    """The METADATA of a wheel built from a copy of the sources, as pip builds one."""
    source = tmp_path_factory.mktemp("source")
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("agentlib", "agentlib_sync"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("*.pyc"))
    wheels = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("agentlib-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


@pytest.mark.slow
def test_the_wheel_has_the_project_urls(wheel_metadata: email.message.Message) -> None:
    assert wheel_metadata.get_all("Project-URL") == [
        f"Documentation, {DOCUMENTATION}",
        f"Source, {SOURCE}",
        f"Issues, {SOURCE}/issues",
    ]


def test_the_wheel_long_description_is_the_readme(wheel_metadata: email.message.Message) -> None:
    assert wheel_metadata["Description-Content-Type"] == "text/markdown"
    description = wheel_metadata.get_payload(decode=True).decode("utf-8")
    assert description.strip() == (ROOT / "README.md").read_text().strip()


def test_the_docs_site_url_is_the_documentation_url() -> None:
    assert f"site_url: {DOCUMENTATION}\n" in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.parametrize("link", README_LINKS)
def test_readme_links_are_absolute(link: str) -> None:
    assert link.startswith("https://")


@pytest.mark.parametrize("link", [link for link in README_LINKS if link.startswith(DOCUMENTATION)])
def test_readme_links_to_the_docs_site_name_a_page(link: str) -> None:
    page = link.removeprefix(DOCUMENTATION).removesuffix("/")
    assert (ROOT / "docs" / f"{page or 'index'}.md").is_file()


@pytest.mark.parametrize("link", [link for link in README_LINKS if link.startswith(SOURCE + "/")])
def test_readme_links_to_the_source_name_a_file_of_main(link: str) -> None:
    path = re.sub(r"^/(tree|blob)/main/", "", link.removeprefix(SOURCE))
    assert (ROOT / path).exists()
