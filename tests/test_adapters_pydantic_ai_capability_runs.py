"""An agent built with ``HandoffCapability`` in the runs around it: concurrent resumes on
one agent object, two capability instances, a wrapper agent, a sub-run of another agent
built with the capability: each approved call runs once (a worker SIGKILLed mid-resume:
``tests/test_adapters_pydantic_ai.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.agent import WrapperAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis import Redis

from tests import test_adapters_pydantic_ai_retries as retries
from tests.support import adapter_pydantic_agents as agents
from tests.support.adapter_runs import adapter_env, make_adapter
from worker.adapters.pydantic_ai import HandoffCapability, PydanticAIHandoffs, PydanticAIResume
from worker.client import Handoffs


def _slow_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order."""
    time.sleep(0.2)
    return retries._refund(order_id, amount_usd)


async def _async_slow_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order."""
    await asyncio.sleep(0.2)
    return retries._refund(order_id, amount_usd)


def build_slow_capability_agent() -> Agent[Any, Any]:
    return retries._agent(
        "two-calls-cap-slow",
        agents.TWO_REFUNDS,
        tool=_async_slow_refund,
        capabilities=[HandoffCapability()],
    )


def build_two_capabilities_agent() -> Agent[Any, Any]:
    return retries._agent(
        "two-caps", agents.TWO_REFUNDS, capabilities=[HandoffCapability(), HandoffCapability()]
    )


def build_wrapped_capability_agent() -> Any:
    return WrapperAgent(retries.build_two_call_agent_with_capability())


_SINGLETON: list[Agent[Any, Any]] = []


def build_singleton_agent() -> Agent[Any, Any]:
    if not _SINGLETON:
        _SINGLETON.append(build_slow_capability_agent())
    return _SINGLETON[0]


@pytest.fixture
def agent_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    _SINGLETON.clear()
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


def _adapter(handoffs: Handoffs, factory: str, module: str = __name__) -> PydanticAIHandoffs:
    adapter = make_adapter(PydanticAIHandoffs, handoffs, agents.__name__, "build_refund_agent")
    adapter.agent_path = f"{module}:{factory}"
    return adapter


def _approved_run(adapter: PydanticAIHandoffs, handoffs: Handoffs, run_id: str) -> Any:
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id=run_id).handoffs
    handoffs.decide(first.id, "approved", by="U1")
    handoffs.decide(second.id, "approved", by="U1")
    assert asyncio.run(adapter.resume(handoffs.get(second.id))) is None
    return first


@pytest.mark.parametrize("two_adapters", [False, True])
def test_concurrent_resumes_of_two_runs_on_one_agent_object_keep_their_records_apart(
    redis: Redis, handoffs: Handoffs, agent_env: dict, two_adapters: bool
) -> None:
    adapter = _adapter(handoffs, "build_singleton_agent")
    other = _adapter(handoffs, "build_singleton_agent") if two_adapters else adapter
    one = _approved_run(adapter, handoffs, "run-one")
    two = _approved_run(other, handoffs, "run-two")  # same call ids (call_a1, call_b2)

    async def both() -> list[Any]:
        return await asyncio.gather(
            adapter.resume(handoffs.get(one.id)), other.resume(handoffs.get(two.id))
        )

    outcomes = asyncio.run(both())
    assert [o.status for o in outcomes] == ["finished", "finished"]
    ns = handoffs.store.keys.namespace
    for first in (one, two):
        pause_id = PydanticAIResume.of(first).pause.pause_id
        keys = sorted(k.decode() for k in redis.scan_iter(f"{{{ns}}}:pai:call:{pause_id}:*"))
        assert [k.rsplit(":", 1)[1] for k in keys] == ["call_a1", "call_b2"]
    assert len(agents.tool_runs(redis)) == 4


@pytest.mark.parametrize(
    ("module", "factory"),
    [
        (__name__, "build_two_capabilities_agent"),
        (__name__, "build_wrapped_capability_agent"),
        (__name__, "build_slow_capability_agent"),
    ],
)
def test_a_retry_after_dying_in_the_second_approved_call_runs_only_that_one(
    redis: Redis, handoffs: Handoffs, agent_env: dict, module: str, factory: str
) -> None:
    adapter = _adapter(handoffs, factory, module)
    first = _approved_run(adapter, handoffs, "run-retry")
    assert first.payload.action.description.startswith("Refund part")  # type: ignore[union-attr]
    redis.set(retries.CRASH_TOOL_ONCE, "1")
    with pytest.raises(retries.WorkerDied):
        asyncio.run(adapter.resume(handoffs.get(first.id)))
    outcome = asyncio.run(adapter.resume(handoffs.get(first.id)))
    assert outcome is not None and outcome.status == "finished"
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["B-2", 5]]


# -- a tool that runs ANOTHER agent built with the capability, calls of the same ids -------


def _inner_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(getattr(p, "part_kind", "") == "tool-return" for m in messages for p in m.parts):
        return ModelResponse(parts=[TextPart("inner done")])
    args = {"order_id": "Z-9", "amount_usd": 1}
    return ModelResponse(parts=[ToolCallPart("refund", args, tool_call_id="call_a1")])


INNER = Agent(
    FunctionModel(_inner_model),
    output_type=agents.OUTPUT,
    tools=[Tool(agents.refund)],
    capabilities=[HandoffCapability()],
)


async def ask_inner(ctx: RunContext[Any], topic: str) -> str:
    """Ask another agent."""
    return str((await INNER.run(topic)).output)


def build_outer_agent() -> Agent[Any, Any]:
    turns = [[agents.TWO_REFUNDS[0]], [("ask_inner", {"topic": "x"}, "call_ask")]]
    return Agent(
        agents.scripted(*turns, on_results=retries._crash_after_a_result),
        output_type=agents.OUTPUT,
        tools=[Tool(retries._refund, name="refund", requires_approval=True), Tool(ask_inner)],
        capabilities=[HandoffCapability()],
    )


def test_a_sub_run_of_another_capability_agent_is_left_alone(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_outer_agent")
    [first] = adapter.run_sync("go", run_id="run-inner").handoffs
    handoffs.decide(first.id, "approved", by="U1")
    redis.set(retries.CRASH_MODEL_ONCE, "1")
    with pytest.raises(retries.WorkerDied):
        asyncio.run(adapter.resume(handoffs.get(first.id)))
    outcome = asyncio.run(adapter.resume(handoffs.get(first.id)))
    assert outcome is not None and outcome.status == "finished"
    # The inner agent's call named like the approved one (call_a1) runs: it is not the
    # adapter's run, so it is neither answered with A-1's record nor recorded over it.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["Z-9", 1]]
    assert outcome.output == "refunded 30 USD on A-1 | inner done"
