"""``python -m agentlib demo``: it runs offline and its approval is answered, by a handler or at
the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _http_server import Reply, serve_in_thread


def demo(
    *arguments: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the demo; offline (no MISTRAL_API_KEY) unless ``env`` says otherwise."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MISTRAL_")}
    return subprocess.run(
        [sys.executable, "-m", "agentlib", "demo", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**environment, **(env or {})},
    )


def test_the_demo_answers_its_approval_from_a_handler() -> None:
    run = demo()
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("model: scripted, offline (set MISTRAL_API_KEY to use Mistral)\n")
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


def streamed(text: str = "", calls: tuple[tuple[str, str, dict[str, object]], ...] = ()) -> Reply:
    """A Mistral stream: the text in two pieces, then the tool calls (id, name, arguments)."""
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
    events = [
        {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d}]}
        for d in chunks
    ]
    events[-1]["choices"][0]["finish_reason"] = "tool_calls" if calls else "stop"  # type: ignore[index]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return Reply(
        headers=(("content-type", "text/event-stream"),), chunks=(body, b"data: [DONE]\n\n")
    )


def test_the_demo_runs_on_mistral_when_the_key_is_set() -> None:
    with serve_in_thread() as server:
        server.play(
            streamed(calls=(("a1b2c3d4e", "get_weather", {"city": "Paris"}),)),
            streamed("Paris is sunny."),
            streamed(calls=(("f5g6h7i8j", "convert_temperature", {"celsius": -3}),)),
            streamed("That is 26.6 °F."),
            streamed(calls=(("k9l0m1n2o", "send_forecast", {"to": "a@b.c", "text": "snow"}),)),
            streamed("Sent."),
        )
        run = demo(env={"MISTRAL_API_KEY": "sk-demo-key", "MISTRAL_BASE_URL": f"{server.url}/v1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(
        "model: mistral-small-latest (Mistral, as MISTRAL_API_KEY is set)\n"
    )
    assert "  … 'Paris i'\n  … 's sunny.'\n  assistant: Paris is sunny.\n" in run.stdout
    assert "  waiting for approval of send_forecast\n" in run.stdout
    assert "  tool result: send_forecast -> sent to a@b.c\n" in run.stdout
    assert run.stdout.count("turn ended: Completed") == 3
    assert len(server.requests) == 6
    first = server.requests[0].json()
    assert first["model"] == "mistral-small-latest"
    assert first["stream"] is True
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "get_weather",
        "convert_temperature",
        "send_forecast",
    ]
    assert "sk-demo-key" not in run.stdout + run.stderr
