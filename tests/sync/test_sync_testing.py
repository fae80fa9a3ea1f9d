"""agentlib.testing from blocking scripts: TestModel, Agent.override and block_model_requests
reach the engine's thread (SPEC section 15)."""

from __future__ import annotations

import json

import pytest
from _http_server import recording, serve_in_thread

import agentlib_sync as agents
from agentlib.testing import TestModel, block_model_requests

from ._support import WAIT, add

KEY = "sk-test-sync-guard-93d0"


def test_test_model_calls_a_blocking_agents_tools_then_answers() -> None:
    model = TestModel()
    session = agents.Agent("a", model=model, tools=[add]).start_session()
    record = session.run("go", timeout=WAIT)
    session.cancel()
    assert isinstance(record, agents.Completed)
    assert [(call.name, call.arguments) for call in record.tool_calls] == [
        ("add", {"a": 0, "b": 1})
    ]
    assert json.loads(record.text) == {"add": 1}
    assert len(model.requests) == 2


def test_override_runs_a_blocking_agents_sessions_on_the_model() -> None:
    agent = agents.Agent("a", model=agents.ScriptedModel(["own"] * 5))
    session = agent.start_session()
    with agent.override(model=TestModel(custom_output_text="override")):
        inside = session.run("go", timeout=WAIT)
        assert isinstance(agent.model, TestModel)
    outside = session.run("go", timeout=WAIT)
    session.cancel()
    assert isinstance(inside, agents.Completed)
    assert inside.text == "override"
    assert isinstance(outside, agents.Completed)
    assert outside.text == "own"


def test_override_of_a_blocking_agent_puts_the_model_back_when_the_block_raises() -> None:
    own = agents.ScriptedModel(["own"])
    agent = agents.Agent("a", model=own)
    with pytest.raises(LookupError), agent.override(model=TestModel()):
        raise LookupError
    assert agent.model is own
    assert agent.agent.model is own


def test_override_of_a_blocking_subagent_reaches_its_parents_delegations() -> None:
    helper = agents.Agent("helper", model=agents.ScriptedModel(["own"]))
    parent = agents.Agent("parent", model=TestModel(), subagents=[helper])
    with helper.override(model=TestModel(custom_output_text="overridden")):
        session = parent.start_session()
        record = session.run("go", timeout=WAIT)
        session.cancel()
    assert isinstance(record, agents.Completed)
    assert json.loads(record.text) == {"helper": "overridden"}


def test_a_block_in_the_scripts_thread_reaches_the_engines_thread() -> None:
    with serve_in_thread() as server:
        model = agents.MistralModel(
            "mistral-small-latest", api_key=KEY, base_url=f"{server.url}/v1"
        )
        session = agents.Agent("a", model=model).start_session()
        with block_model_requests():
            record = session.run("go", timeout=WAIT)
        session.cancel()
        assert server.requests == []
    assert isinstance(record, agents.Failed)
    assert record.error.type == "ModelError"
    assert record.error.message.startswith("model requests are blocked: MistralModel(")
    assert KEY not in record.error.message


def test_the_environment_variable_blocks_a_blocking_scripts_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTLIB_BLOCK_MODEL_REQUESTS", "1")
    with serve_in_thread() as server:
        model = agents.OpenAICompatibleModel("llama3.1", f"{server.url}/v1")
        session = agents.Agent("a", model=model).start_session()
        record = session.run("go", timeout=WAIT)
        session.cancel()
        assert server.requests == []
    assert isinstance(record, agents.Failed)
    assert "AGENTLIB_BLOCK_MODEL_REQUESTS=1" in record.error.message


def test_a_blocking_scripts_requests_go_through_once_the_block_ends() -> None:
    with serve_in_thread() as server:
        server.play(recording("mistral/chat_text.json"))
        model = agents.MistralModel(
            "mistral-small-latest", api_key=KEY, base_url=f"{server.url}/v1", stream=False
        )
        session = agents.Agent("a", model=model).start_session()
        with block_model_requests():
            blocked = session.run("go", timeout=WAIT)
        record = session.run("go", timeout=WAIT)
        session.cancel()
        assert len(server.requests) == 1
    assert isinstance(blocked, agents.Failed)
    assert isinstance(record, agents.Completed)
