"""A misspelt option of an adapter is a ``TypeError`` that names it, before anything is
written: ``@require_approval(reviwers=[...])`` must not open an approval to everyone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from store.exceptions import InvalidHandoffRequest
from worker.adapters.agent_framework import AgentFrameworkHandoffs, WorkflowHandoffs
from worker.adapters.decorators import ask_human, question_tool, require_approval
from worker.adapters.langgraph import LangGraphHandoffs
from worker.adapters.openai_agents import OpenAIAgentsHandoffs
from worker.adapters.pydantic_ai import PydanticAIHandoffs
from worker.adapters.temporal import request_approval as temporal_approval
from worker.client import Handoffs


def _approval_guard(handoffs: Handoffs, **options: Any) -> object:
    return require_approval(handoffs=handoffs, **options)


def _question(handoffs: Handoffs, **options: Any) -> object:
    return ask_human("Which customer?", handoffs=handoffs, run_id="run-1", **options)


def _question_tool(handoffs: Handoffs, **options: Any) -> object:
    return question_tool(handoffs=handoffs, **options)


def _langgraph(handoffs: Handoffs, **options: Any) -> object:
    return LangGraphHandoffs(handoffs, "tests.support.adapter_graphs:refund_graph", **options)


def _openai_agents(handoffs: Handoffs, **options: Any) -> object:
    return OpenAIAgentsHandoffs(handoffs, "tests.support.adapter_agents:refund_agent", **options)


def _pydantic_ai(handoffs: Handoffs, **options: Any) -> object:
    return PydanticAIHandoffs(
        handoffs, "tests.support.adapter_pydantic_agents:build_refund_agent", **options
    )


def _temporal(handoffs: Handoffs, **options: Any) -> object:
    # Workflow code: checked when called, before its activity is scheduled.
    return asyncio.run(temporal_approval("issue_refund", {}, **options))


def _agent_framework(handoffs: Handoffs, **options: Any) -> object:
    return AgentFrameworkHandoffs(
        handoffs, "tests.support.adapter_af_agents:build_refund_agent", **options
    )


def _agent_framework_workflow(handoffs: Handoffs, **options: Any) -> object:
    return WorkflowHandoffs(
        handoffs,
        "tests.support.adapter_af_workflows:build_intake",
        checkpoint_dir="/nonexistent/never-written",
        **options,
    )


ADAPTERS: dict[str, Callable[..., object]] = {
    "require_approval": _approval_guard,
    "ask_human": _question,
    "question_tool": _question_tool,
    "LangGraphHandoffs": _langgraph,
    "OpenAIAgentsHandoffs": _openai_agents,
    "AgentFrameworkHandoffs": _agent_framework,
    "WorkflowHandoffs": _agent_framework_workflow,
    "request_approval": _temporal,
    "PydanticAIHandoffs": _pydantic_ai,
}


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_a_misspelt_reviewers_is_a_type_error_naming_it(
    name: str, handoffs: Handoffs, redis: Redis
) -> None:
    keys = set(redis.keys())

    with pytest.raises(TypeError) as raised:
        ADAPTERS[name](handoffs, reviwers=["U0ALICE"])

    message = str(raised.value)
    assert message.startswith(f"{name}() got unexpected keyword argument 'reviwers'")
    assert "did you mean 'reviewers'?" in message
    assert "reviewers" in message.split("it accepts ")[1].split(", ")
    assert set(redis.keys()) == keys


@pytest.mark.parametrize("name", ["require_approval", "question_tool", "LangGraphHandoffs"])
def test_every_unknown_option_is_named(name: str, handoffs: Handoffs) -> None:
    with pytest.raises(TypeError, match="arguments 'totally_bogus', 'also_bogus'"):
        ADAPTERS[name](handoffs, totally_bogus=5, also_bogus=6)


def test_the_options_the_adapters_document_are_accepted(handoffs: Handoffs) -> None:
    options = {"reviewers": ["U0ALICE"], "channel": "C0REFUNDS", "agent_name": "refunds"}
    require_approval(handoffs=handoffs, **options)
    question_tool(handoffs=handoffs, **options)
    _langgraph(handoffs, **options)


@pytest.mark.parametrize("name", list(ADAPTERS))
@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"reviewers": ["U0ALICE", "bob"]}, "reviewers: 'bob' is not a Slack user id (U…/W…)"),
        (
            {"channel": "#refunds"},
            "channel: '#refunds' is not a Slack channel id (C…/G…/D…) or user id",
        ),
        ({"channel": "C0X> <!channel>"}, "channel: 'C0X> <!channel>' is not a Slack channel id"),
    ],
)
def test_a_routing_option_that_is_no_slack_id_is_refused_when_set_up(
    name: str, options: dict[str, Any], refused: str, handoffs: Handoffs, redis: Redis
) -> None:
    # Refused at once, not at the run's first pause (days later, in a worker).
    keys = set(redis.keys())
    if name == "ask_human":  # it blocks for the answer: not forever, should it be asked
        options = {**options, "timeout": 0.1}

    with pytest.raises(InvalidHandoffRequest) as raised:
        ADAPTERS[name](handoffs, **options)

    assert str(raised.value).startswith(f"invalid handoff options: {refused}")
    assert set(redis.keys()) == keys
