"""Retried resumes of the Pydantic AI adapter, which reads its stored stop and the recorded
results of a stop's approved calls with the pause's claim: a resume that dies midway, or
fails in one call while another ran, and is retried runs no approved tool twice, and never
answers another call with an approved call's recorded result."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolResults, Tool
from pydantic_ai.capabilities import AbstractCapability
from redis import Redis

from store.models import Handoff
from store.repository import TaskPolicy
from tests.conftest import WorkerProcesses, wait_until
from tests.support import adapter_pydantic_agents as agents
from tests.support.adapter_runs import adapter_env, env_redis, make_adapter, recorded
from tests.support.preloaded_workers import start_preloaded_worker
from worker.adapters.pydantic_ai import (
    HandoffCapability,
    PydanticAIHandoffs,
    PydanticAIResume,
    resume_run,
)
from worker.client import Handoffs

CRASH_MODEL_ONCE = "test:pai-retries:crash_model_once"
"""While set, the model raises (once) when it reads a tool result: the worker 'dies'."""
CRASH_TOOL_ONCE = "test:pai-retries:crash_tool_once"
"""While set, the refund of B-2 raises (once) before doing anything."""


class WorkerDied(RuntimeError):
    pass


def _crash_once(key: str) -> None:
    if env_redis().delete(key):
        raise WorkerDied(f"simulated worker death ({key})")


def _refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order."""
    if order_id == "B-2":
        _crash_once(CRASH_TOOL_ONCE)
    return agents.refund(order_id, amount_usd)


def _crash_after_a_result(results: list[str]) -> None:
    if results:
        _crash_once(CRASH_MODEL_ONCE)


def _agent(
    name: str,
    *turns: list[agents.Call],
    tool: Callable[..., str] = _refund,
    capabilities: Sequence[AbstractCapability[Any]] = (),
) -> Agent:
    """An agent scripted to make ``turns`` of ``refund`` calls, each needing an approval."""
    return Agent(
        agents.scripted(*turns, on_results=_crash_after_a_result),
        name=name,
        output_type=agents.OUTPUT,
        tools=[Tool(tool, name="refund", requires_approval=True)],
        capabilities=capabilities,
    )


def build_same_id_agent() -> Agent[Any, Any]:
    """Two stops whose calls the model names alike (as TestModel does)."""
    return _agent(
        "same-id",
        [("refund", {"order_id": "A-1", "amount_usd": 30}, "call_same")],
        [("refund", {"order_id": "B-2", "amount_usd": 5}, "call_same")],
    )


def build_two_call_agent() -> Agent[Any, Any]:
    """One stop of two approvals (A-1 then B-2)."""
    return _agent("two-calls", agents.TWO_REFUNDS)


def build_two_call_agent_with_capability() -> Agent[Any, Any]:
    """``build_two_call_agent``'s agent built with the adapter's ``HandoffCapability``:
    the adapter adds none to its runs, the agent's own keeps the records."""
    return _agent("two-calls", agents.TWO_REFUNDS, capabilities=[HandoffCapability()])


@pytest.fixture
def agent_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


def _adapter(handoffs: Handoffs, factory: str) -> PydanticAIHandoffs:
    adapter = make_adapter(PydanticAIHandoffs, handoffs, agents.__name__, "build_refund_agent")
    adapter.agent_path = f"{__name__}:{factory}"
    return adapter


def _resume(handoffs: Handoffs, handoff_id: str) -> Any:
    return asyncio.run(resume_run(handoffs.get(handoff_id), handoffs=handoffs))


def test_a_retried_resume_does_not_answer_a_new_call_of_the_same_id_with_the_recorded_result(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_same_id_agent")
    [first] = adapter.run_sync("Refund A-1, then B-2", run_id="run-same-crash").handoffs
    handoffs.decide(first.id, "approved", by="U1")

    redis.set(CRASH_MODEL_ONCE, "1")
    with pytest.raises(WorkerDied):  # A-1 ran and was recorded, then the worker died
        asyncio.run(adapter.resume(handoffs.get(first.id)))
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30]]

    outcome = asyncio.run(adapter.resume(handoffs.get(first.id)))  # the retry

    # As without the crash: A-1 is not run again, and B-2 (a new call, named alike) is
    # handed to a person, not answered with A-1's recorded result.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30]]
    assert outcome is not None
    assert outcome.status == "paused", (outcome.status, adapter.final_output("run-same-crash"))
    [second] = outcome.handoffs
    assert second.payload.action.args == {"order_id": "B-2", "amount_usd": 5}  # type: ignore[union-attr]


def _both_approved(
    handoffs: Handoffs, factory: str, run_id: str
) -> tuple[PydanticAIHandoffs, Handoff, Handoff]:
    """A run of ``factory``'s agent stopped for A-1 and B-2, both approved, and B-2's
    resume done (it waits for A-1's, which continues the run)."""
    adapter = _adapter(handoffs, factory)
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id=run_id).handoffs
    handoffs.decide(first.id, "approved", by="U1")
    handoffs.decide(second.id, "approved", by="U1")
    assert asyncio.run(adapter.resume(handoffs.get(second.id))) is None
    return adapter, first, second


@pytest.mark.parametrize(
    "factory", ["build_two_call_agent", "build_two_call_agent_with_capability"]
)
def test_a_retry_after_dying_in_the_second_of_two_approved_calls_runs_only_that_one(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    adapter, first, _ = _both_approved(handoffs, factory, "run-second")
    redis.set(CRASH_TOOL_ONCE, "1")
    with pytest.raises(WorkerDied):  # the attempt dies in B-2's refund, after A-1's
        asyncio.run(adapter.resume(handoffs.get(first.id)))
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30]]

    outcome = asyncio.run(adapter.resume(handoffs.get(first.id)))  # the retry

    assert outcome is not None and outcome.status == "finished"
    assert outcome.output == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    # A-1 ran in the first attempt: it must not run again.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["B-2", 5]]


def test_a_purged_history_fails_the_resume_with_a_clear_error_every_attempt(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_two_call_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-purged").handoffs
    pause_id = PydanticAIResume.of(first).pause.pause_id
    redis.delete(f"{handoffs.store.keys.prefix}pai:history:{pause_id}")
    handoffs.decide(first.id, "approved", by="U1")
    assert asyncio.run(adapter.resume(handoffs.get(first.id))) is None  # waits for B-2
    handoffs.decide(second.id, "approved", by="U1")

    for _ in range(2):
        with pytest.raises(LookupError, match=r"message history of pause .* is gone"):
            asyncio.run(adapter.resume(handoffs.get(second.id)))
    assert agents.tool_runs(redis) == []


def _slow_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order (A-1 takes a while; B-2 fails once before doing anything)."""
    if order_id == "A-1":
        time.sleep(0.5)
    return _refund(order_id, amount_usd)


def build_slow_two_call_agent() -> Agent[Any, Any]:
    return _agent("two-calls-slow", agents.TWO_REFUNDS, tool=_slow_refund)


def test_a_sibling_call_that_failed_does_not_make_the_retry_run_a_finished_call_again(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter, first, _ = _both_approved(handoffs, "build_slow_two_call_agent", "run-sibling")

    redis.set(CRASH_TOOL_ONCE, "1")
    with pytest.raises(WorkerDied):  # B-2's tool raises: the job fails, RQ retries it
        asyncio.run(adapter.resume(handoffs.get(first.id)))
    time.sleep(1.0)  # A-1's thread finishes its side effect meanwhile
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30]]

    asyncio.run(adapter.resume(handoffs.get(first.id)))  # the retry

    # A-1 ran to its end in attempt 1 (its thread outlived the cancellation): not again.
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["B-2", 5]]


def test_through_a_worker_a_failed_sibling_call_does_not_run_a_finished_call_twice(
    redis: Redis, workers: WorkerProcesses, agent_env: dict
) -> None:
    """The same as above, through a real `handoff worker`: B-2's tool raises once, the
    resume fails and the worker retries it."""
    policy = TaskPolicy(resume_max_attempts=3, backoff_seconds=0.2, backoff_max_seconds=0.5)
    handoffs = Handoffs(redis, tasks=policy)
    start_preloaded_worker(workers, ("pydantic_ai", __name__), extra_env=agent_env)
    adapter = _adapter(handoffs, "build_slow_two_call_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-worker").handoffs
    redis.set(CRASH_TOOL_ONCE, "1")

    handoffs.decide(first.id, "approved", by="U1")
    handoffs.decide(second.id, "approved", by="U1")
    wait_until(lambda: len(recorded(redis, agents.FINISHED)) == 1, timeout=40)

    assert recorded(redis, agents.FINISHED)[0]["output"] == (
        "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    )
    assert max(handoffs.get(first.id).resume.attempt, handoffs.get(second.id).resume.attempt) >= 2
    runs = sorted(run["args"] for run in agents.tool_runs(redis))
    assert runs == [["A-1", 30], ["B-2", 5]], agents.tool_runs(redis)


def test_an_agent_built_with_the_capability_gets_none_added_and_runs_plainly_elsewhere(
    redis: Redis, handoffs: Handoffs, agent_env: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = _adapter(handoffs, "build_two_call_agent_with_capability")
    agent = adapter.agent
    added: list[Any] = []
    run = agent.run

    async def spied_run(*args: Any, **kwargs: Any) -> Any:
        added.append(kwargs.get("capabilities"))
        return await run(*args, **kwargs)

    monkeypatch.setattr(agent, "run", spied_run)
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-own").handoffs
    # The agent's own capability noted the tool definitions for the reviewers.
    assert first.payload.action.description.startswith("Refund part")  # type: ignore[union-attr]
    assert added == [None]

    # Outside the adapter the capability does nothing: a plain run of the same agent, its
    # calls approved, runs both tools and records nothing.
    history = adapter.history(PydanticAIResume.of(first).pause.pause_id)
    approvals = {PydanticAIResume.of(h).call_id: True for h in (first, second)}
    result = asyncio.run(
        run(message_history=history, deferred_tool_results=DeferredToolResults(approvals=approvals))
    )
    assert result.output == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    assert not list(redis.scan_iter(f"{{{handoffs.store.keys.namespace}}}:pai:call:*"))
