"""The OpenAI Agents SDK adapter, with real SDK runs (a scripted model, no network) and
real `handoff worker` processes: tool approvals → handoffs → decisions → the run continues
once, from its stored RunState, to the right output."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Runner
from redis import Redis

from store.models import RequestType, Status, TaskKind
from tests.conftest import WorkerProcesses
from tests.support import adapter_agents as agents
from tests.support import agent_run_checks
from tests.support.adapter_runs import adapter_env, make_adapter, recorded
from tests.support.preloaded_workers import (
    hanging_once,
    start_preloaded_worker,
)
from worker.adapters.openai_agents import (
    RESUME_TARGET,
    OpenAIAgentsHandoffs,
    OpenAIAgentsResume,
    ToolKind,
    resume_run,
)
from worker.client import Handoffs

PRELOAD = ("agents", "tests.support.adapter_agents")


@pytest.fixture
def agent_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """Environment of the agents' tools (the test Redis), here and in workers."""
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


def _adapter(handoffs: Handoffs, factory: str, **options: Any) -> OpenAIAgentsHandoffs:
    return make_adapter(OpenAIAgentsHandoffs, handoffs, agents.__name__, factory, **options)


def _finished(redis: Redis) -> list[dict[str, Any]]:
    return recorded(redis, agents.FINISHED)


# -- through real workers ---------------------------------------------------------------


def test_two_approvals_continue_the_run_once_with_an_edit_and_a_rejection_message(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, agent_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=agent_env)
    adapter = _adapter(handoffs, "build_refund_agent")

    outcome = adapter.run_sync("Refund A-1 and B-2", run_id="run-two")

    assert outcome.status == "paused"
    first, second = outcome.handoffs
    assert [h.payload.action.args for h in outcome.handoffs] == [  # type: ignore[union-attr]
        {"order_id": "A-1", "amount_usd": 30},
        {"order_id": "B-2", "amount_usd": 5},
    ]
    schema = first.payload.action.args_schema  # type: ignore[union-attr]
    assert schema["properties"]["amount_usd"]["type"] == "integer"
    assert {h.resume_target for h in outcome.handoffs} == {RESUME_TARGET}
    assert OpenAIAgentsResume.of(first).tool_kind is ToolKind.EDITABLE

    output = "refunded 25 USD on A-1 | The reviewer rejected this call: B-2 was already refunded"
    agent_run_checks.edit_then_reject_continue_the_run_once(
        redis, handoffs, adapter, agents, (first, second), output=output
    )


def test_worker_killed_mid_resume_continues_the_run_without_running_a_tool_twice(
    redis: Redis, workers: WorkerProcesses, agent_env: dict
) -> None:
    handoffs = hanging_once(redis, workers, PRELOAD, hang_key=agents.HANG_ONCE, extra_env=agent_env)
    adapter = _adapter(handoffs, "build_refund_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-kill").handoffs

    agent_run_checks.worker_killed_mid_resume_runs_no_tool_twice(
        redis,
        workers,
        handoffs,
        agents,
        (first, second),
        first_edit=None,
        output="refunded 30 USD on A-1 | refunded 5 USD on B-2",
    )


# -- the resume target called in this process, as a worker calls it ---------------------


def test_a_continued_run_that_stops_again_hands_the_next_approval_to_people(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_two_step_agent")
    [first] = adapter.run_sync("Refund A-1, then B-2", run_id="run-steps").handoffs

    outcome = asyncio.run(adapter.resume(handoffs.decide(first.id, "approved", by="U1")))

    assert outcome is not None and outcome.status == "paused"
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]
    [second] = handoffs.list_pending(run_id="run-steps").items
    assert [h.id for h in outcome.handoffs] == [second.id]
    assert second.payload.action.args == {"order_id": "B-2", "amount_usd": 5}  # type: ignore[union-attr]
    assert second.resume_target == RESUME_TARGET
    assert OpenAIAgentsResume.of(second).pause != OpenAIAgentsResume.of(first).pause

    asyncio.run(resume_run(handoffs.decide(second.id, "approved", by="U1"), handoffs=handoffs))

    assert adapter.final_output("run-steps") == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    assert len(agents.tool_runs(redis)) == 2


def test_a_question_tool_gets_the_persons_answer_as_its_result(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_question_agent")
    outcome = adapter.run_sync("Refund A-1", run_id="run-q")
    [question] = [h for h in outcome.handoffs if h.request_type is RequestType.QUESTION]
    [refund] = [h for h in outcome.handoffs if h.request_type is RequestType.APPROVAL]
    assert question.payload.question == "Which card?"  # type: ignore[union-attr]
    assert question.payload.choices == ["Visa", "Amex"]  # type: ignore[union-attr]

    answered = handoffs.decide(question.id, "answered", by="U_ALICE", answer="Visa")
    assert asyncio.run(adapter.resume(answered)) is None  # waits for the refund's decision
    asyncio.run(resume_run(handoffs.decide(refund.id, "approved", by="U_A"), handoffs=handoffs))

    assert adapter.final_output("run-q") == "Visa | refunded 30 USD on A-1"


def test_an_edit_to_a_plain_sdk_tool_is_refused_not_run_with_the_old_arguments(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_plain_agent")
    [approval] = adapter.run_sync("Refund A-1", run_id="run-plain").handoffs
    assert OpenAIAgentsResume.of(approval).tool_kind is ToolKind.PLAIN

    edited = handoffs.decide(approval.id, "approved", by="U_A", edited_args={"amount_usd": 3})
    asyncio.run(resume_run(edited, handoffs=handoffs))

    assert adapter.final_output("run-plain").startswith(
        'Not run: the reviewer changed the arguments to {"order_id": "A-1", "amount_usd": 3}'
    )
    assert agents.tool_runs(redis) == []


def test_an_expired_approval_reaches_the_model_as_a_rejection(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_plain_agent", expires_in=0.2)
    [approval] = adapter.run_sync("Refund A-1", run_id="run-exp").handoffs
    time.sleep(0.3)
    assert handoffs.store.expire_due() == [approval.id]

    asyncio.run(resume_run(handoffs.get(approval.id), handoffs=handoffs))

    assert (
        adapter.final_output("run-exp") == "Not run. Nobody decided in time; the request expired."
    )
    assert agents.tool_runs(redis) == []


def test_a_repeated_resume_of_a_continued_run_runs_nothing_again(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-rep").handoffs
    asyncio.run(resume_run(handoffs.decide(first.id, "approved", by="U1"), handoffs=handoffs))
    asyncio.run(resume_run(handoffs.decide(second.id, "approved", by="U1"), handoffs=handoffs))

    for handoff_id in (first.id, second.id, second.id):
        asyncio.run(resume_run(handoffs.get(handoff_id), handoffs=handoffs))

    assert len(agents.tool_runs(redis)) == 2
    assert len(_finished(redis)) == 1


def test_approval_tool_outside_the_adapter_behaves_like_an_sdk_approval_tool(
    redis: Redis, agent_env: dict
) -> None:
    agent = agents.build_refund_agent()

    async def run() -> Any:
        result = await Runner.run(agent, "Refund A-1 and B-2")
        state = result.to_state()
        first, second = result.interruptions
        state.approve(first)
        state.reject(second, rejection_message="no")
        return (await Runner.run(agent, state)).final_output

    assert asyncio.run(run()) == "refunded 30 USD on A-1 | no"
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]


def test_an_undeliverable_approval_reaches_the_model_as_a_refusal(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_plain_agent")
    [approval] = adapter.run_sync("Refund A-1", run_id="run-undeliverable").handoffs
    start = handoffs.store.begin_task(approval.id, TaskKind.DELIVER, run_token="job-1")
    handoffs.store.finish_task(
        approval.id, TaskKind.DELIVER, attempt=start.attempt, error="is_archived", permanent=True
    )
    assert handoffs.get(approval.id).status is Status.UNDELIVERABLE

    asyncio.run(resume_run(handoffs.get(approval.id), handoffs=handoffs))

    output = adapter.final_output("run-undeliverable")
    assert output.startswith("Not run. The request could not be delivered")
    assert "is_archived" in output
    assert agents.tool_runs(redis) == []
