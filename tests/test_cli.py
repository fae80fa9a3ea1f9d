"""``python -m agentlib``, run as a user runs it: its version, its help, its usage errors and
exit statuses; and ``python -m agentlib_sync``, which points to it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support import HERE

import agentlib


def run(
    module: str, *arguments: str, closed: tuple[int, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <arguments>``, offline, with the file descriptors ``closed``
    closed (1 for stdout, 2 for stderr), as a shell's ``>&-`` and ``2>&-`` do."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MISTRAL_")}

    def close() -> None:  # in the child, once its pipes are in place
        for fd in closed:
            os.close(fd)

    return subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        preexec_fn=close if closed else None,
    )


def test_version_prints_agentlib_and_its_version() -> None:
    result = run("agentlib", "--version")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"agentlib {agentlib.__version__}\n",
        "",
    )


def test_help_describes_agentlib_and_each_command() -> None:
    result = run("agentlib", "--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(
        "usage: python -m agentlib [-h] [--version] <command> [<args>]\n\n"
        "agentlib: a Python agent runtime on trio."
    )
    assert (
        "commands:\n"
        "  demo       run an agent with three tools over three turns (offline, or on Mistral)\n"
        "  selfcheck  check that this installation works\n"
    ) in result.stdout
    assert "--version   print agentlib's version and exit\n" in result.stdout


@pytest.mark.parametrize("command", ["demo", "selfcheck"])
def test_a_commands_help_opens_with_the_line_the_main_help_lists_for_it(command: str) -> None:
    listed = run("agentlib", "--help").stdout.split("commands:\n")[1]
    summary = next(
        line.split(maxsplit=1)[1]
        for line in listed.splitlines()
        if line.startswith(f"  {command} ")
    )
    paragraphs = run("agentlib", command, "--help").stdout.split("\n\n")
    assert paragraphs[1] == f"{summary[0].upper()}{summary[1:]}."


def test_the_demos_help_says_what_it_does_its_options_environment_and_exit_statuses() -> None:
    result = run("agentlib", "demo", "--help")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: python -m agentlib demo [-h] [--interactive]\n")
    for said in (
        'The agent, "forecaster", looks up the weather',
        "--interactive  ask you at the terminal",
        "MISTRAL_API_KEY",
        "MISTRAL_BASE_URL",
        "NO_COLOR",
        "130 interrupted (Ctrl-C)",
        "141 the output was closed early",
    ):
        assert said in result.stdout


def test_selfcheck_round_trips_an_entry_through_json() -> None:
    result = run("agentlib", "selfcheck")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"agentlib {agentlib.__version__}: data model round trip ok")


DEMO_USAGE = "usage: python -m agentlib demo [-h] [--interactive]\n"
MAIN_USAGE = "usage: python -m agentlib [-h] [--version] <command> [<args>]\n"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ("demo", "--bogus"),
            DEMO_USAGE + "python -m agentlib demo: error: unrecognized arguments: --bogus\n",
        ),
        (
            ("demo", "extra"),
            DEMO_USAGE + "python -m agentlib demo: error: unrecognized arguments: extra\n",
        ),
        (
            ("selfcheck", "--bogus"),
            "usage: python -m agentlib selfcheck [-h]\n"
            "python -m agentlib selfcheck: error: unrecognized arguments: --bogus\n",
        ),
        (
            ("--bogus", "demo"),
            MAIN_USAGE + "python -m agentlib: error: unrecognized arguments: --bogus\n",
        ),
    ],
    ids=["demo-option", "demo-argument", "selfcheck-option", "before-the-command"],
)
def test_an_unknown_argument_prints_the_usage_it_breaks_and_exits_2(
    arguments: tuple[str, ...], message: str
) -> None:
    result = run("agentlib", *arguments)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message)


def test_an_unknown_command_exits_2_naming_the_commands() -> None:
    result = run("agentlib", "demoo")
    assert (result.returncode, result.stdout) == (2, "")
    assert "invalid choice: 'demoo'" in result.stderr
    # Quoted before CPython 3.12.8 and 3.13.1, bare since (python/cpython#125431).
    choices = result.stderr.partition("(choose from ")[2]
    assert choices.replace("'", "") == "demo, selfcheck, serve)\n"


def test_no_command_prints_the_help_and_exits_2() -> None:
    result = run("agentlib")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == run("agentlib", "--help").stdout


def test_python_m_agentlib_sync_says_to_use_python_m_agentlib() -> None:
    result = run("agentlib_sync")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "agentlib_sync has no command line: use `python -m agentlib` "
        "(`python -m agentlib demo` runs the demo)\n"
    )


@pytest.mark.parametrize("option", ["--help", "-h"])
def test_python_m_agentlib_sync_help_says_the_same_and_exits_0(option: str) -> None:
    result = run("agentlib_sync", option)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == run("agentlib_sync").stderr


EVERY_COMMAND = pytest.mark.parametrize(
    "arguments",
    [
        ("demo",),
        ("demo", "--interactive"),
        ("selfcheck",),
        ("--help",),
        ("--version",),
        ("demo", "--help"),
        ("selfcheck", "--help"),
        (),
    ],
    ids=lambda arguments: " ".join(arguments) or "no-command",
)


@EVERY_COMMAND
def test_a_closed_stdout_is_a_usage_error_said_in_one_line(arguments: tuple[str, ...]) -> None:
    result = run("agentlib", *arguments, closed=(1,))
    assert (result.returncode, result.stderr) == (
        2,
        "python -m agentlib: error: standard output is closed\n",
    )


@EVERY_COMMAND
def test_a_closed_stdout_and_stderr_exit_2_without_a_word(arguments: tuple[str, ...]) -> None:
    # The status is all there is to check: a traceback would make it 1.
    assert run("agentlib", *arguments, closed=(1, 2)).returncode == 2


# -- serve's store --------------------------------------------------------------------------

AGENTS_MODULE = """\
import agentlib

agent = agentlib.Agent("greeter", model=agentlib.ScriptedModel(["Hello."]))
"""


def serve(
    tmp_path: Path, store: str = ":memory:", *, port: str = "0"
) -> subprocess.CompletedProcess[str]:
    """``python -m agentlib serve my_agents:agent --port PORT --store STORE`` in
    ``tmp_path``."""
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    command = ["serve", "my_agents:agent", "--port", port, "--store", store]
    return subprocess.run(
        [sys.executable, "-m", "agentlib", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def usage_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a usage error of serve, checked to be one: its usage, then it."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith("usage: python -m agentlib serve "), result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.split("\n")[-2]
    assert result.stderr.endswith(f"{line}\n")
    assert line.startswith("python -m agentlib serve: error: --store: "), result.stderr
    return line


def test_serves_help_names_both_kinds_of_store() -> None:
    result = run("agentlib", "serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "sqlite:///path.db" in text
    assert "postgresql://host/database" in text


def test_serve_with_a_store_agentlib_does_not_know_says_so_in_one_line(tmp_path: Path) -> None:
    line = usage_error(serve(tmp_path, "sqlite:/sessions.db"))
    assert "unknown store 'sqlite:/sessions.db'" in line
    assert "'sqlite:///path/to/file.db'" in line


def test_serve_with_a_store_in_a_missing_directory_says_so_in_one_line(tmp_path: Path) -> None:
    line = usage_error(serve(tmp_path, "sqlite:///missing/dir/x.db"))
    assert "the directory missing/dir does not exist" in line
    assert not (tmp_path / "missing").exists()


def test_serve_with_a_database_out_of_reach_says_so_in_one_line_without_the_password(
    tmp_path: Path,
) -> None:
    line = usage_error(serve(tmp_path, "postgresql://user:s3cret@127.0.0.1:1/test"))
    assert "127.0.0.1:1" in line
    assert "s3cret" not in line


@pytest.mark.parametrize("port", ["99999", "65536", "-5"])
def test_serve_on_a_port_out_of_range_says_so_in_one_line(tmp_path: Path, port: str) -> None:
    result = serve(tmp_path, port=port)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.endswith(
        f"python -m agentlib serve: error: argument --port: {port!r} is not a port: give a "
        "whole number from 0 to 65535 (0 picks a free one)\n"
    )
