"""``HandoffCapability`` built into an agent: the agent's one shared instance serves the
adapter's run only (found through the ``_ADAPTER_RUN`` context variable), not a run of the
same agent that a tool starts inside it, and an ``agent.override(capabilities=...)`` that
drops it leaves the adapter adding its own.

Each test runs both ways: the agent built without the capability (the adapter adds one to
each run: the reference behaviour) and with it, which must behave alike."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis import Redis

from tests import test_adapters_pydantic_ai_retries as retries
from tests.support import adapter_pydantic_agents as agents
from tests.support.adapter_runs import adapter_env, env_redis, make_adapter
from worker.adapters.pydantic_ai import HandoffCapability, PydanticAIHandoffs
from worker.client import Handoffs

CRASH_AT = "test:pai-capability:crash_at"
"""While set to N, the outer run's model raises (once) when it has read N tool results."""

# Pydantic AI's TestModel names every call of a tool `pyd_ai_tool_call_id__<tool>`, in every
# run (and OpenAI-compatible servers that number calls per response repeat ids as well): a
# run and a run it starts from a tool can make calls of the same id.
REFUND_ID = "pyd_ai_tool_call_id__large_refund"


class WorkerDied(RuntimeError):
    pass


def _results(messages: list[ModelMessage]) -> list[str]:
    return [
        part.model_response_str()
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def _delegating_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The outer run refunds A-1 for 300 USD (needs an approval), then delegates B-2's
    20 USD refund to a run of the same agent ("sub: ..."), which refunds it (no approval
    needed under 100 USD)."""
    results = _results(messages)
    if _prompt(messages).startswith("sub:"):
        if not results:
            args = {"order_id": "B-2", "amount_usd": 20}
            return ModelResponse(parts=[ToolCallPart("large_refund", args, tool_call_id=REFUND_ID)])
        return ModelResponse(parts=[TextPart(results[-1])])
    crash_at = env_redis().get(CRASH_AT)
    if crash_at is not None and int(crash_at) == len(results) and env_redis().delete(CRASH_AT):
        raise WorkerDied(f"simulated worker death after {len(results)} results")
    if not results:
        args = {"order_id": "A-1", "amount_usd": 300}
        return ModelResponse(parts=[ToolCallPart("large_refund", args, tool_call_id=REFUND_ID)])
    if len(results) == 1:
        args = {"order_id": "B-2"}
        return ModelResponse(
            parts=[ToolCallPart("delegate", args, tool_call_id="pyd_ai_tool_call_id__delegate")]
        )
    return ModelResponse(parts=[TextPart(" | ".join(results))])


async def delegate(ctx: RunContext[Any], order_id: str) -> str:
    """Hand a refund of an order to a sub-run of this same agent."""
    assert ctx.agent is not None
    result = await ctx.agent.run(f"sub: refund {order_id}")
    return str(result.output)


def _delegating_agent(**options: Any) -> Agent[Any, Any]:
    return Agent(
        FunctionModel(_delegating_model),
        name="delegating",
        output_type=agents.OUTPUT,
        tools=[Tool(agents.large_refund), Tool(delegate)],
        **options,
    )


def build_delegating_agent() -> Agent[Any, Any]:
    return _delegating_agent()


def build_delegating_agent_with_capability() -> Agent[Any, Any]:
    return _delegating_agent(capabilities=[HandoffCapability()])


@pytest.fixture
def agent_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


def _adapter(handoffs: Handoffs, factory: str) -> PydanticAIHandoffs:
    adapter = make_adapter(PydanticAIHandoffs, handoffs, agents.__name__, "build_refund_agent")
    adapter.agent_path = f"{__name__}:{factory}"
    return adapter


BOTH_WAYS = pytest.mark.parametrize(
    "factory", ["build_delegating_agent", "build_delegating_agent_with_capability"]
)


@BOTH_WAYS
def test_a_sub_run_of_the_same_agent_is_not_answered_with_the_approved_calls_record(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    """The worker dies after A-1's approved refund ran (and was recorded); the retry returns
    A-1's recorded result, as it should, then the model delegates B-2's refund to a sub-run
    of the same agent, whose call has the same id as A-1's."""
    adapter = _adapter(handoffs, factory)
    [approval] = adapter.run_sync("Refund A-1 300, B-2 20", run_id="run-delegate").handoffs
    handoffs.decide(approval.id, "approved", by="U1")

    redis.set(CRASH_AT, "1")
    with pytest.raises(WorkerDied):
        asyncio.run(adapter.resume(handoffs.get(approval.id)))
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 300]]

    outcome = asyncio.run(adapter.resume(handoffs.get(approval.id)))  # the retry

    assert outcome is not None and outcome.status == "finished"
    # With the capability built in, the sub-run's B-2 call is taken for the stop's approved
    # call: it is answered with A-1's recorded result and B-2 is never refunded.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 300], ["B-2", 20]]
    assert outcome.output == "refunded 300 USD on A-1 | refunded 20 USD on B-2"


@BOTH_WAYS
def test_a_sub_run_of_the_same_agent_does_not_overwrite_the_approved_calls_record(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    """The first attempt runs A-1 and the sub-run's B-2, then dies; the retry must answer
    A-1's call with A-1's result, not B-2's."""
    adapter = _adapter(handoffs, factory)
    [approval] = adapter.run_sync("Refund A-1 300, B-2 20", run_id="run-delegate-2").handoffs
    handoffs.decide(approval.id, "approved", by="U1")

    redis.set(CRASH_AT, "2")
    with pytest.raises(WorkerDied):
        asyncio.run(adapter.resume(handoffs.get(approval.id)))
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 300], ["B-2", 20]]

    outcome = asyncio.run(adapter.resume(handoffs.get(approval.id)))  # the retry

    assert outcome is not None and outcome.status == "finished"
    # With the capability built in, the sub-run recorded B-2's result under A-1's call id:
    # the retry tells the model A-1's refund was "refunded 20 USD on B-2".
    assert outcome.output.startswith("refunded 300 USD on A-1 | "), outcome.output


# -- an agent whose capabilities are overridden (``agent.override(capabilities=...)``) -------

OVERRIDE_WAYS = pytest.mark.parametrize(
    "factory", ["build_two_call_agent", "build_two_call_agent_with_capability"]
)
NEEDS_CAPABILITY_OVERRIDE = pytest.mark.skipif(
    "capabilities" not in inspect.signature(Agent.override).parameters,
    reason="this Pydantic AI's agent.override() takes no capabilities (newer ones do)",
)


def _retries_adapter(handoffs: Handoffs, factory: str) -> PydanticAIHandoffs:
    adapter = make_adapter(PydanticAIHandoffs, handoffs, agents.__name__, "build_refund_agent")
    adapter.agent_path = f"{retries.__name__}:{factory}"
    return adapter


@OVERRIDE_WAYS
@NEEDS_CAPABILITY_OVERRIDE
def test_under_a_capability_override_a_retried_resume_runs_no_approved_call_twice(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    """``agent.override(capabilities=[...])`` (Pydantic AI's testing hook) replaces the
    agent's capabilities for the runs inside it; ``agent.root_capability`` still lists the
    built ones, so the adapter, deciding from it, adds no capability of its own: no hooks
    run at all."""
    adapter = _retries_adapter(handoffs, factory)
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-override").handoffs
    handoffs.decide(first.id, "approved", by="U1")
    handoffs.decide(second.id, "approved", by="U1")
    assert asyncio.run(adapter.resume(handoffs.get(second.id))) is None

    with adapter.agent.override(capabilities=[]):
        redis.set(retries.CRASH_TOOL_ONCE, "1")
        with pytest.raises(retries.WorkerDied):  # dies in B-2's refund, after A-1's
            asyncio.run(adapter.resume(handoffs.get(first.id)))
        outcome = asyncio.run(adapter.resume(handoffs.get(first.id)))  # the retry

    assert outcome is not None and outcome.status == "finished"
    # With the capability built in, A-1 is refunded twice.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["B-2", 5]]


@OVERRIDE_WAYS
@NEEDS_CAPABILITY_OVERRIDE
def test_under_a_capability_override_the_reviewers_still_get_the_tool_description(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    adapter = _retries_adapter(handoffs, factory)
    with adapter.agent.override(capabilities=[]):
        first, _ = adapter.run_sync("Refund A-1 and B-2", run_id="run-override-2").handoffs
    # With the capability built in, no hook noted the definitions: description is None.
    assert first.payload.action.description == "Refund part of an order."  # type: ignore[union-attr]


# -- a sub-run of the same agent notes its own tool definitions for the reviewers ---------


def _describe_for_deps(ctx: RunContext[Any], definition: Any) -> Any:
    """The refund tool's description names the run's customer (its deps), if any."""
    if ctx.deps:
        return replace(definition, description=f"Refund part of an order of {ctx.deps}.")
    return definition


def _side_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The outer run asks a sub-run of the same agent (for another customer) something and
    asks to refund A-1 in the same step; the sub-run answers at once."""
    if _prompt(messages).startswith("sub:"):
        return ModelResponse(parts=[TextPart("nothing to add")])
    if _results(messages):
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(
        parts=[
            ToolCallPart("consult", {"question": "anything?"}, tool_call_id="call_consult"),
            ToolCallPart("refund", {"order_id": "A-1", "amount_usd": 30}, tool_call_id="call_r"),
        ]
    )


async def consult(ctx: RunContext[Any], question: str) -> str:
    """Ask a sub-run of this agent, on behalf of another customer."""
    assert ctx.agent is not None
    return str((await ctx.agent.run(f"sub: {question}", deps="customer Z")).output)


def _side_agent(**options: Any) -> Agent[Any, Any]:
    return Agent(
        FunctionModel(_side_model),
        name="side",
        output_type=agents.OUTPUT,
        tools=[
            Tool(agents.refund, requires_approval=True, prepare=_describe_for_deps),
            Tool(consult),
        ],
        **options,
    )


def build_side_agent() -> Agent[Any, Any]:
    return _side_agent()


def build_side_agent_with_capability() -> Agent[Any, Any]:
    return _side_agent(capabilities=[HandoffCapability()])


@pytest.mark.parametrize("factory", ["build_side_agent", "build_side_agent_with_capability"])
def test_the_reviewer_sees_the_tool_definition_the_run_offered_not_a_sub_runs(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    adapter = _adapter(handoffs, factory)
    [approval] = adapter.run_sync("Refund A-1", run_id="run-side").handoffs
    # With the capability built in, the sub-run's definition (made for customer Z) replaced
    # the one the run's model was offered.
    assert approval.payload.action.description == "Refund part of an order."  # type: ignore[union-attr]


def test_the_public_capability_is_exported() -> None:
    """``HandoffCapability`` is documented as public (docs/adapters.md, the example) but is
    missing from the module's ``__all__``."""
    from worker.adapters import pydantic_ai as adapter_module

    assert "HandoffCapability" in adapter_module.__all__
