"""``python -m agentlib demo``: a scripted agent with two tools, two turns, offline."""

from __future__ import annotations

from typing import Any

import agentlib_sync as agents

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


def _call(name: str, **arguments: Any) -> agents.ModelReply:
    return agents.ModelReply(tool_calls=[agents.ToolCallRequest(name=name, arguments=arguments)])


def _answer_about_oslo(request: agents.ModelRequest) -> str:
    # A step can read the conversation: here, the last tool result.
    result = request.entries[-1]
    assert isinstance(result, agents.ToolResultEntry)
    return f"In Oslo it is {result.text} °F: bring a coat."


def make_agent() -> agents.Agent:
    """The demo's agent: a scripted model that calls both tools over two turns."""
    model = agents.ScriptedModel(
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
        ]
    )
    return agents.Agent(
        name="forecaster",
        instructions="You answer questions about the weather.",
        model=model,
        tools=[get_weather, convert_temperature],
    )


def _describe(event: agents.Event) -> str | None:
    match event:
        case agents.TurnStarted(message):
            return f"turn started: {message.text!r}"
        case agents.EntryDelta(delta=delta):
            return f"  … {delta!r}"
        case agents.EntryCompleted(agents.ToolCallEntry(name, arguments)):
            return f"  tool call: {name}({arguments})"
        case agents.EntryCompleted(agents.ToolResultEntry() as result):
            return f"  tool result: {result.name} -> {result.text}"
        case agents.EntryCompleted(agents.MessageEntry(role=role) as message):
            return f"  {role}: {message.text}"
        case agents.TurnEnded(record):
            return f"turn ended: {type(record).__name__}"
    return None


def main() -> int:
    """Run the demo; returns the exit status."""
    agent = make_agent()
    session = agent.start_session()
    print(f"session {session.id}")

    def show(event: agents.Event) -> None:
        line = _describe(event)
        if line is not None:
            print(line)

    records = [
        session.run("What's the weather in Paris and Oslo?", on_event=show),
        session.run("And in Fahrenheit, for Oslo?", on_event=show),
    ]
    print()
    for record in records:
        print(record)
    session.cancel()
    return 0 if all(isinstance(r, agents.Completed) for r in records) else 1
