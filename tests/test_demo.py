"""``python -m agentlib demo``, run as a user runs it: each turn printed once, as it happens;
its approval answered by a handler or at the terminal; colour for a terminal only; Ctrl-C and
Ctrl-D at the prompt; offline, or on Mistral when the key is set."""

from __future__ import annotations

import json
import os
import pathlib
import pty
import re
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import pytest
from _http_server import Reply, Server, serve_in_thread
from _support import HERE

import agentlib
from agentlib._cli._demo import make_agent

QUICKSTART = pathlib.Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"
DEMO_CODE = pathlib.Path(agentlib.__file__).resolve().parent / "_cli" / "_demo.py"

#: Longer than any run takes, even on a busy machine: these deadlines only catch hangs.
DEADLINE = 60.0


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without MISTRAL_* (offline), NO_COLOR and COLUMNS (a terminal's width
    is then its own, 80 for a pseudo-terminal of no size), plus ``env``."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MISTRAL_") and key not in ("NO_COLOR", "COLUMNS")
    }
    return {**kept, **(env or {})}


def demo(
    *arguments: str, stdin: str = "", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the demo through pipes; offline (no MISTRAL_API_KEY) unless ``env`` says otherwise."""
    return subprocess.run(
        [sys.executable, "-m", "agentlib", "demo", *arguments],
        cwd=HERE,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env=environment(env),
    )


def start_demo(*arguments: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the demo with pipes, Ctrl-C (SIGINT) raising KeyboardInterrupt in it as in a
    terminal, even when this process was started with SIGINT ignored."""
    return subprocess.Popen(
        [sys.executable, "-m", "agentlib", "demo", *arguments],
        cwd=HERE,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(env),
        preexec_fn=_sigint_raises,
    )


def _sigint_raises() -> None:
    # Python raises KeyboardInterrupt on SIGINT unless it started with SIGINT ignored (as a
    # background job's children do).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def read_until(fd: int, marker: bytes) -> bytes:
    """What ``fd`` gives until ``marker`` is among it (perhaps more); fails on its end or a
    hang."""
    read = b""
    while marker not in read:
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"no {marker!r} after {read!r}"
        chunk = os.read(fd, 4096)
        assert chunk, f"the output ended before {marker!r}: {read!r}"
        read += chunk
    return read


def in_terminal(
    *arguments: str,
    env: Mapping[str, str],
    at_prompt: Callable[[subprocess.Popen[bytes], int], object] | None = None,
) -> tuple[int, str, str]:
    """Run the demo with a pseudo-terminal as its stdin and stdout; once it asks for the
    approval, call ``at_prompt`` with the process and the terminal's end. Returns the exit
    status, what the terminal showed (newlines as ``\\n``) and stderr."""
    terminal, child_end = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlib", "demo", *arguments],
        cwd=HERE,
        stdin=child_end,
        stdout=child_end,
        stderr=subprocess.PIPE,
        env=environment(env),
        preexec_fn=_sigint_raises,
    )
    os.close(child_end)
    shown = b""
    try:
        if at_prompt is not None:
            shown = read_until(terminal, b"[y/N] ")
            at_prompt(process, terminal)
        for chunk in _until_closed(terminal):
            shown += chunk
    finally:
        os.close(terminal)
    assert process.stderr is not None
    errors = process.stderr.read().decode()
    process.stderr.close()
    status = process.wait(timeout=DEADLINE)
    return status, shown.decode().replace("\r\n", "\n"), errors


def typing(keys: bytes) -> Callable[[subprocess.Popen[bytes], int], object]:
    return lambda process, terminal: os.write(terminal, keys)


def ctrl_c(process: subprocess.Popen[bytes], terminal: int | None = None) -> None:
    # The terminal would send SIGINT to the foreground process group; the demo is its one
    # process.
    process.send_signal(signal.SIGINT)


def _until_closed(fd: int) -> Iterator[bytes]:
    while True:
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, "the demo hangs"
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # a terminal on Linux: EIO once the child's end is closed
            return
        if not chunk:
            return
        yield chunk


def quickstart_transcript() -> str:
    """The demo's output as the quick start shows it."""
    match = re.search(r"^```text\n(model: scripted.*?)^```\n", QUICKSTART.read_text(), re.M | re.S)
    assert match is not None
    return match[1]


def as_shown_in_docs(output: str) -> str:
    return output.replace(str(DEMO_CODE), ".../agentlib/_cli/_demo.py")


def test_the_demo_prints_each_turn_once_as_the_quick_start_shows() -> None:
    run = demo()
    assert (run.returncode, run.stderr) == (0, "")
    assert as_shown_in_docs(run.stdout) == quickstart_transcript()


def test_the_demos_last_line_says_where_its_code_is() -> None:
    run = demo()
    assert run.stdout.endswith(f"\nThe demo's code: {DEMO_CODE}\n")
    assert DEMO_CODE.is_file()


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        pytest.param(
            "y\n",
            "  allow it? [y/N] y\n"
            "  approved\n"
            "  send_forecast(…) → sent to team@example.com\n"
            "forecaster: Done: the forecast was sent to team@example.com.\n",
            id="yes",
        ),
        pytest.param(
            "n\n",
            "  allow it? [y/N] n\n"
            "  denied: the user said no\n"
            "  send_forecast(…) ✗ the client denied this call: the user said no\n"
            "forecaster: I did not send it (the client denied this call: the user said no).\n",
            id="no",
        ),
        pytest.param(
            "",
            "  allow it? [y/N] \n  denied: the user said no\n",
            id="end-of-input",
        ),
    ],
)
def test_the_interactive_demo_asks_for_the_approval_and_shows_the_answer(
    reply: str, shown: str
) -> None:
    run = demo("--interactive", stdin=reply)
    assert (run.returncode, run.stderr) == (0, "")
    asked = "  send_forecast(to='team@example.com', text='Oslo: snow, 26.6 °F.') needs approval\n"
    assert asked + shown in run.stdout
    assert run.stdout.count("Completed in") == 3


def test_the_interactive_demo_without_stdin_takes_it_as_the_end_of_input() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "agentlib", "demo", "--interactive"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env=environment(),
        preexec_fn=lambda: os.close(0),  # as a shell's `<&-` does
    )
    assert (run.returncode, run.stderr) == (0, "")
    assert "needs approval\n  allow it? [y/N] \n  denied: the user said no\n" in run.stdout
    assert run.stdout.count("Completed in") == 3


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        (b"y\r", "  allow it? [y/N] y\n  approved\n"),
        (b"\x04", "  allow it? [y/N] \n  denied: the user said no\n"),  # Ctrl-D: a new line
        (b"y\x04", "  allow it? [y/N] y\n  approved\n"),  # Ctrl-D ends the answer and its line
    ],
    ids=["yes", "ctrl-d", "yes-then-ctrl-d"],
)
def test_an_answer_typed_at_the_terminal_ends_its_line_once(typed: bytes, shown: str) -> None:
    status, output, errors = in_terminal(
        "--interactive", env={"NO_COLOR": "1", "TERM": "xterm"}, at_prompt=typing(typed)
    )
    assert (status, errors) == (0, "")
    assert "needs approval\n" + shown in output


def test_ctrl_c_at_the_approval_prompt_ends_the_demo_with_one_line_and_status_130() -> None:
    status, output, errors = in_terminal(
        "--interactive", env={"NO_COLOR": "1", "TERM": "xterm"}, at_prompt=ctrl_c
    )
    assert status == 130
    assert output.endswith("needs approval\n  allow it? [y/N] \nInterrupted.\n")
    assert errors == ""  # no traceback


def test_ctrl_c_at_the_prompt_read_from_an_open_pipe_ends_the_demo_as_cleanly() -> None:
    process = start_demo("--interactive")
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    shown = read_until(process.stdout.fileno(), b"[y/N] ")
    ctrl_c(process)
    # stdin stays open: the prompt's reader is still waiting on it as the demo exits.
    shown += b"".join(_until_closed(process.stdout.fileno()))
    errors = process.stderr.read()
    status = process.wait(timeout=DEADLINE)
    process.stdin.close()
    process.stdout.close()
    process.stderr.close()
    assert status == 130
    assert shown.decode().endswith("needs approval\n  allow it? [y/N] \nInterrupted.\n")
    assert errors == b""  # no traceback, and no abort at exit


def closing_the_output_first() -> tuple[int, bytes]:
    """Run the demo with its stdout a pipe that nobody reads: closed before it starts.
    Returns its exit status and stderr."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentlib", "demo"],
            cwd=HERE,
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            env=environment(),
        )
    finally:
        os.close(writer)
    _, errors = process.communicate(timeout=DEADLINE)
    return process.returncode, errors


def closing_the_output_at_the_prompt(answer_at_a_terminal: bool) -> tuple[int, bytes]:
    """Run the interactive demo; close its output once it asks for the approval, then answer
    it, through a pipe (the prompt echoes the answer) or at a terminal (the demo writes next
    the answer's line). Returns its exit status and stderr."""
    if answer_at_a_terminal:
        terminal, child_end = pty.openpty()
    else:
        child_end, terminal = os.pipe()  # the demo reads what the test writes
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlib", "demo", "--interactive"],
        cwd=HERE,
        stdin=child_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment({"NO_COLOR": "1"}),
    )
    os.close(child_end)
    assert process.stdout is not None
    try:
        read_until(process.stdout.fileno(), b"[y/N] ")
        process.stdout.close()
        os.write(terminal, b"y\r" if answer_at_a_terminal else b"y\n")
        _, errors = process.communicate(timeout=DEADLINE)
    finally:
        os.close(terminal)
    return process.returncode, errors


@pytest.mark.parametrize(
    "run",
    [
        closing_the_output_first,
        lambda: closing_the_output_at_the_prompt(answer_at_a_terminal=False),
        lambda: closing_the_output_at_the_prompt(answer_at_a_terminal=True),
    ],
    ids=["before-the-first-line", "at-the-prompt-echoing-the-answer", "at-the-prompt-then-a-line"],
)
def test_output_closed_early_ends_the_demo_quietly_with_status_141(
    run: Callable[[], tuple[int, bytes]],
) -> None:
    status, errors = run()
    assert (status, errors) == (141, b"")  # 128 + SIGPIPE, as a shell reports `yes | head`


def test_colour_goes_to_a_terminal() -> None:
    status, output, errors = in_terminal(env={"TERM": "xterm"})
    assert (status, errors) == (0, "")
    assert "\x1b[32mCompleted in 2 steps, 2 tool calls\x1b[0m\n" in output
    assert re.sub(r"\x1b\[[0-9;]*m", "", as_shown_in_docs(output)) == quickstart_transcript()


@pytest.mark.parametrize(
    ("env", "coloured"),
    [
        ({"TERM": "xterm", "NO_COLOR": "1"}, False),
        ({"TERM": "dumb"}, False),
        ({"TERM": "xterm", "NO_COLOR": ""}, True),  # no-color.org: set and not empty
    ],
    ids=["no-color", "term-dumb", "no-color-empty"],
)
def test_no_color_or_a_dumb_terminal_turns_colour_off(env: dict[str, str], coloured: bool) -> None:
    status, output, _ = in_terminal(env=env)
    assert status == 0
    assert ("\x1b[" in output) is coloured


def test_a_pipe_gets_no_colour() -> None:
    run = demo(env={"TERM": "xterm"})
    assert "\x1b" not in run.stdout


# -- on Mistral ----------------------------------------------------------------------------


def streamed(
    text: str = "",
    calls: tuple[tuple[str, str, dict[str, object]], ...] = (),
    tokens: int | None = None,
    finish: str | None = None,
) -> Reply:
    """A Mistral stream: the text in two pieces, then the tool calls (id, name, arguments),
    and the usage (``tokens`` in all) and the ``finish`` reason in the last event."""
    chunks = [
        {"role": "assistant", "content": text[: len(text) // 2]},
        {"content": text[len(text) // 2 :]},
    ]
    if calls:
        chunks.append(
            {
                "tool_calls": [
                    {"id": i, "function": {"name": n, "arguments": json.dumps(a)}, "index": k}
                    for k, (i, n, a) in enumerate(calls)
                ]
            }
        )
    events: list[dict[str, object]] = [
        {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]}
        for d in chunks
    ]
    finish = finish or ("tool_calls" if calls else "stop")
    events[-1]["choices"][0]["finish_reason"] = finish  # type: ignore[index]
    if tokens is not None:
        events[-1]["usage"] = {
            "prompt_tokens": tokens - 2,
            "completion_tokens": 2,
            "total_tokens": tokens,
        }
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return Reply(
        headers=(("content-type", "text/event-stream"),), chunks=(body, b"data: [DONE]\n\n")
    )


FIRST_TURN = (
    streamed(calls=(("a1b2c3d4e", "get_weather", {"city": "Paris"}),), tokens=100),
    streamed("Paris is sunny.", tokens=52),
)

FIRST_TURN_SHOWN = (
    "model: mistral-small-latest (Mistral, as MISTRAL_API_KEY is set)\n"
    "\n"
    "user: What's the weather in Paris and Oslo?\n"
    """  get_weather(city='Paris') → {"city": "Paris", "sky": "sunny", "celsius": 21}\n"""
    "forecaster: Paris is sunny.\n"
    "Completed in 2 steps, 1 tool call, 152 tokens\n"
)


def on_mistral(server: Server) -> dict[str, str]:
    return {"MISTRAL_API_KEY": "sk-demo-key", "MISTRAL_BASE_URL": f"{server.url}/v1"}


def test_the_demo_runs_on_mistral_when_the_key_is_set() -> None:
    with serve_in_thread() as server:
        server.play(
            *FIRST_TURN,
            streamed(calls=(("f5g6h7i8j", "convert_temperature", {"celsius": -3}),)),
            streamed("That is 26.6 °F."),
            streamed(calls=(("k9l0m1n2o", "send_forecast", {"to": "a@b.c", "text": "snow"}),)),
            streamed("Sent."),
        )
        run = demo(env=on_mistral(server))
    assert (run.returncode, run.stderr) == (0, "")
    assert as_shown_in_docs(run.stdout) == (
        FIRST_TURN_SHOWN
        + "\n"
        + "user: And in Fahrenheit, for Oslo?\n"
        + "  convert_temperature(celsius=-3) → 26.6\n"
        + "forecaster: That is 26.6 °F.\n"  # streamed in two pieces, shown once
        + "Completed in 2 steps, 1 tool call\n"  # no usage reported: no tokens
        + "\n"
        + "user: Email that to the team.\n"
        + "  send_forecast(to='a@b.c', text='snow') needs approval\n"
        + "  approved (by the demo's on_approval handler; --interactive asks you)\n"
        + "  send_forecast(…) → sent to a@b.c\n"
        + "forecaster: Sent.\n"
        + "Completed in 2 steps, 1 tool call\n"
        + "\n"
        + "The demo's code: .../agentlib/_cli/_demo.py\n"
    )
    first = server.requests[0].json()
    assert (first["model"], first["stream"]) == ("mistral-small-latest", True)
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "get_weather",
        "convert_temperature",
        "send_forecast",
    ]
    assert len(server.requests) == 6


def test_each_turn_reaches_a_pipe_as_it_happens() -> None:
    with serve_in_thread() as server:
        server.play(*FIRST_TURN, Reply(hang=True))  # the second turn waits for its model
        process = start_demo(env=on_mistral(server))
        try:
            assert process.stdout is not None
            shown = read_until(process.stdout.fileno(), b" tokens\n")
        finally:
            process.kill()
            process.communicate(timeout=DEADLINE)
    # The second turn may have printed its message: it waits for its model's reply.
    assert shown.decode().startswith(FIRST_TURN_SHOWN)


def test_a_failed_turn_says_why_at_once_and_the_demo_exits_1() -> None:
    refusal = {"object": "error", "message": "Unauthorized", "type": "auth", "code": "1000"}
    with serve_in_thread() as server:
        server.play(Reply(status=401, body=json.dumps(refusal).encode()))
        run = demo(env=on_mistral(server))
    assert (run.returncode, run.stderr) == (1, "")
    *_, asked, failed, end = run.stdout.split("\n")
    assert asked == "user: What's the weather in Paris and Oslo?"
    assert failed.startswith("Failed: Mistral answered HTTP 401 (code 1000): Unauthorized")
    assert "MISTRAL_API_KEY" in failed
    assert end == ""
    assert len(server.requests) == 1  # the demo stopped there
    assert "sk-demo-key" not in run.stdout


def test_a_mistral_key_that_cannot_be_sent_is_a_usage_error_that_hides_it() -> None:
    run = demo(env={"MISTRAL_API_KEY": "sk-demo key\n"})
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith("python -m agentlib demo: error: MISTRAL_API_KEY: api_key ")
    assert run.stderr.count("\n") == 1  # one line, no traceback
    assert "sk-demo" not in run.stderr


def test_the_demos_agent_runs_on_mistral_with_the_key_it_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    assert isinstance(make_agent("sk-demo-key").model, agentlib.MistralModel)


def test_the_demos_agent_without_a_key_is_scripted_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", "sk-demo-key")
    assert isinstance(make_agent(None).model, agentlib.ScriptedModel)


def test_a_mistral_base_url_that_cannot_be_used_is_a_usage_error_that_names_it() -> None:
    run = demo(env={"MISTRAL_API_KEY": "sk-demo-key", "MISTRAL_BASE_URL": "api.mistral.ai/v1"})
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith("python -m agentlib demo: error: MISTRAL_BASE_URL: base_url ")
    assert run.stderr.count("\n") == 1  # one line, no traceback
    assert "sk-demo" not in run.stderr


@pytest.mark.slow
def test_a_long_call_and_its_error_are_cut_to_one_short_line() -> None:
    town = "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"
    with serve_in_thread() as server:
        server.play(
            streamed(calls=(("a1b2c3d4e", "get_weather", {"city": town}),)),
            streamed("I do not know that town."),
        )
        run = demo(env=on_mistral(server))
    call, answer = run.stdout.splitlines()[3:5]
    assert call == (
        "  get_weather(city='Llanfairpwllgwyngyllgogerychwyrnd…) ✗ KeyError: 'llanfairpw…"
    )
    assert len(call) == 80
    assert answer == "forecaster: I do not know that town."


def test_a_reply_cut_mid_text_ends_its_line_before_the_failure() -> None:
    with serve_in_thread() as server:
        server.play(streamed("It is sunny in", tokens=30, finish="length"))
        run = demo(env=on_mistral(server))
    assert (run.returncode, run.stderr) == (1, "")
    *_, text, failed, end = run.stdout.split("\n")
    assert text == "forecaster: It is sunny in"
    assert failed.startswith("Failed: the reply from Mistral was cut by the token limit")
    assert end == ""
