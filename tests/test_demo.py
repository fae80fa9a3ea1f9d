"""``python -m agentlib demo``: it runs offline and its approval is answered, by a handler or at
the terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest


def demo(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentlib", "demo", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_demo_answers_its_approval_from_a_handler() -> None:
    run = demo()
    assert run.returncode == 0, run.stderr
    assert "  waiting for approval of send_forecast\n" in run.stdout
    assert "  approval answered: AllowApproval(scope='once')\n" in run.stdout
    assert "  tool result: send_forecast -> sent to team@example.com\n" in run.stdout
    assert run.stdout.count("turn ended: Completed") == 3
    assert run.stderr == ""


@pytest.mark.parametrize(
    ("reply", "result"),
    [
        ("y\n", "sent to team@example.com"),
        ("n\n", "the client denied this call: the user said no"),
        ("", "the client denied this call: the user said no"),  # end of input: no
    ],
)
def test_the_interactive_demo_asks_the_terminal(reply: str, result: str) -> None:
    run = demo("--interactive", stdin=reply)
    assert run.returncode == 0, run.stderr
    assert "allow send_forecast({'to': 'team@example.com'" in run.stdout
    assert f"  tool result: send_forecast -> {result}\n" in run.stdout
    assert run.stdout.count("turn ended: Completed") == 3
