"""``python -m agentlib demo``: an agent with three tools, three turns.

Offline, a scripted model plays the turns. With ``MISTRAL_API_KEY`` set, Mistral's
``mistral-small-latest`` does, its text streamed as it is written (``MISTRAL_BASE_URL``
points it elsewhere).

The third turn calls a tool that needs the user's approval: the demo approves it from an
``on_approval`` handler, or, with ``--interactive``, asks at the terminal. Each turn is
printed as it runs, from its events (``on_event``).
"""

from __future__ import annotations

import io
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import agentlib_sync as agents

from ._transcript import Transcript

WEATHER = {"paris": ("sunny", 21), "oslo": ("snow", -3)}


def get_weather(city: str) -> dict[str, Any]:
    """Today's weather in a city.

    Args:
        city: The city's name, e.g. "Paris".
    """
    sky, celsius = WEATHER[city.lower()]
    return {"city": city, "sky": sky, "celsius": celsius}


def convert_temperature(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.
    """
    return round(celsius * 9 / 5 + 32, 1)


@agents.tool(requires_approval=True)
def send_forecast(to: str, text: str) -> str:
    """Email a forecast. Every call needs the user's approval.

    Args:
        to: The recipient's address.
        text: The forecast.
    """
    return f"sent to {to}"


def _call(name: str, **arguments: Any) -> agents.ModelReply:
    return agents.ModelReply(tool_calls=[agents.ToolCallRequest(name=name, arguments=arguments)])


def _answer_about_oslo(request: agents.ModelRequest) -> str:
    # A step can read the conversation: here, the last tool result.
    result = request.entries[-1]
    assert isinstance(result, agents.ToolResultEntry)
    return f"In Oslo it is {result.text} °F: bring a coat."


#: The Mistral model the demo uses when MISTRAL_API_KEY is set.
MISTRAL_MODEL = "mistral-small-latest"
#: Where Mistral's API is when MISTRAL_BASE_URL is not set.
MISTRAL_URL = "https://api.mistral.ai/v1"


def make_agent(mistral_key: str | None = None, mistral_url: str | None = None) -> agents.Agent:
    """The demo's agent: on Mistral's model with ``mistral_key`` (MISTRAL_API_KEY's value)
    if one is given, else on the scripted one.

    Args:
        mistral_key: The key to send to Mistral.
        mistral_url: Where Mistral's API is (MISTRAL_BASE_URL's value); by default,
            :data:`MISTRAL_URL`.

    Raises:
        ValueError: The key or the URL cannot be used: the message starts with the name of
            the variable to fix, and never shows the key.
    """
    model: agents.Model = scripted_model()
    if mistral_key:
        model = _mistral_model(mistral_key, mistral_url or MISTRAL_URL)
    return agents.Agent(
        name="forecaster",
        instructions=(
            "You answer questions about the weather with your tools, briefly. To email a "
            "forecast, call send_forecast."
        ),
        model=model,
        tools=[get_weather, convert_temperature, send_forecast],
    )


def _mistral_model(key: str, url: str) -> agents.MistralModel:
    # Each value is tried on its own, so that an error names the one to fix: the key first,
    # with Mistral's own URL, which it accepts.
    try:
        agents.MistralModel(MISTRAL_MODEL, api_key=key, base_url=MISTRAL_URL)
    except ValueError as error:  # its message hides the key
        raise ValueError(f"MISTRAL_API_KEY: {error}") from error
    try:
        return agents.MistralModel(MISTRAL_MODEL, api_key=key, base_url=url)
    except ValueError as error:
        raise ValueError(f"MISTRAL_BASE_URL: {error}") from error


def scripted_model() -> agents.ScriptedModel:
    """The offline model: it calls the tools over the three turns."""
    return agents.ScriptedModel(
        [
            # Turn 1: two tool calls in one reply (they run concurrently), then the answer.
            agents.ModelReply(
                text="Let me check both cities.",
                tool_calls=[
                    agents.ToolCallRequest(name="get_weather", arguments={"city": "Paris"}),
                    agents.ToolCallRequest(name="get_weather", arguments={"city": "Oslo"}),
                ],
            ),
            "Paris is sunny at 21 °C; Oslo has snow at -3 °C.",
            # Turn 2: one tool call, then an answer computed from its result.
            _call("convert_temperature", celsius=-3),
            _answer_about_oslo,
            # Turn 3: a call that waits for the user's approval, then an answer that says
            # whether it ran.
            _call("send_forecast", to="team@example.com", text="Oslo: snow, 26.6 °F."),
            _answer_about_email,
        ]
    )


def _answer_about_email(request: agents.ModelRequest) -> str:
    result = request.entries[-1]
    assert isinstance(result, agents.ToolResultEntry)
    if result.is_error:
        return f"I did not send it ({result.text})."
    return f"Done: the forecast was {result.text}."


def approve(callback: agents.OpenApproval) -> agents.AllowApproval:
    """The non-interactive demo's ``on_approval`` handler: it allows the call."""
    return agents.AllowApproval()


#: The user's messages, one a turn.
MESSAGES = (
    "What's the weather in Paris and Oslo?",
    "And in Fahrenheit, for Oslo?",
    "Email that to the team.",
)


def main(interactive: bool = False) -> int:
    """Run the demo, printing each turn as it runs.

    Returns:
        The exit status: 0 once every turn completed, 1 as soon as one did not (the turns
        after it would build on it), 2 for a MISTRAL_API_KEY or MISTRAL_BASE_URL that
        cannot be used, 130 on Ctrl-C (128 + SIGINT, as a shell reports a program that
        Ctrl-C stopped), 141 when the output was closed before the end (128 + SIGPIPE, as
        a shell reports ``yes`` in ``yes | head``).
    """
    if isinstance(sys.stdout, io.TextIOWrapper):
        # A character the output cannot encode (a model's emoji on a Windows pipe) shows as
        # "?" rather than ending the demo.
        sys.stdout.reconfigure(errors="replace")
    transcript = Transcript(
        sys.stdout,
        agent_name="forecaster",
        approver="" if interactive else "by the demo's on_approval handler; --interactive asks you",
    )
    try:
        try:
            return _run(transcript, interactive)
        except KeyboardInterrupt:
            transcript.interrupted()
            return 130
    except BrokenPipeError:
        # The reader went away (``| head``): nobody is left to tell. It comes here whichever
        # thread wrote: raised by the event handler or the prompt, it ends session.run. What
        # is still buffered then goes nowhere, so the flush at exit cannot fail again (the
        # recipe in the docs of Python's signal module).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141


def _run(transcript: Transcript, interactive: bool) -> int:
    # Read once: the model and the note about it go by the same value.
    mistral_key = os.environ.get("MISTRAL_API_KEY")
    try:
        agent = make_agent(mistral_key, os.environ.get("MISTRAL_BASE_URL"))
    except ValueError as error:  # it names the variable to fix, and hides the key
        print(f"python -m agentlib demo: error: {error}", file=sys.stderr)
        return 2
    if mistral_key:
        transcript.note(f"model: {MISTRAL_MODEL} (Mistral, as MISTRAL_API_KEY is set)")
    else:
        transcript.note("model: scripted, offline (set MISTRAL_API_KEY to use Mistral)")
    # agentlib_sync runs a plain handler in a worker thread: ``ask`` may wait for the terminal.
    on_approval: Callable[[agents.OpenApproval], Any] = transcript.ask if interactive else approve
    session = agent.start_session(on_approval=on_approval)
    for message in MESSAGES:
        record = session.run(message, on_event=transcript.show)
        if not isinstance(record, agents.Completed):
            session.cancel()
            return 1
    session.cancel()
    transcript.note("")
    transcript.note(f"The demo's code: {pathlib.Path(__file__).resolve()}")
    return 0
