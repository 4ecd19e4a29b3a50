"""The Microsoft Agent Framework adapter, with real agents (a scripted chat client, no
network), real workflows checkpointed to files, and real `handoff worker` processes: tool
approvals and request_info requests → handoffs → decisions → the run continues once, from
its stored session or its checkpoint, to the right output."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from store.exceptions import AlreadyDecided
from store.models import RequestType, TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support import adapter_af_agents as agents
from tests.support import adapter_af_workflows as flows
from tests.support import agent_run_checks
from tests.support.adapter_runs import adapter_env, make_adapter, recorded
from tests.support.preloaded_workers import (
    hanging_once,
    kill_worker_and_horse,
    start_preloaded_worker,
)
from worker.adapters.agent_framework import (
    AgentFrameworkHandoffs,
    CheckpointMissing,
    UnsupportedRequest,
    WorkflowHandoffs,
)
from worker.adapters.agent_framework.agents import RESUME_TARGET, resume_run
from worker.adapters.agent_framework.workflows import resume_workflow
from worker.client import Handoffs

PRELOAD = ("agent_framework", "tests.support.adapter_af_agents")
PRELOAD_FLOWS = ("agent_framework", "tests.support.adapter_af_workflows")
WORKFLOWS = flows.__name__


@pytest.fixture
def agent_env(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """Environment of the agents' tools and the workflows' checkpoints (the test Redis, a
    checkpoint folder), here and in workers."""
    env = {"REDIS_URL": redis_url, "AF_CHECKPOINTS": str(tmp_path / "checkpoints")}
    yield from adapter_env(monkeypatch, env)


def _agent(handoffs: Handoffs, factory: str, **options: Any) -> AgentFrameworkHandoffs:
    return make_adapter(AgentFrameworkHandoffs, handoffs, agents.__name__, factory, **options)


def _workflow(handoffs: Handoffs, factory: str, env: dict[str, str], **options: Any) -> Any:
    return WorkflowHandoffs(
        handoffs,
        f"{WORKFLOWS}:{factory}",
        checkpoint_dir=env["AF_CHECKPOINTS"],
        channel="C0SUPPORT",
        on_finish=f"{WORKFLOWS}:record_finish",
        **options,
    )


def _finished(redis: Redis) -> list[dict[str, Any]]:
    return recorded(redis, agents.FINISHED)


# -- agents, through real workers ---------------------------------------------------------


def test_two_approvals_continue_the_run_once_with_an_edit_and_a_rejection_message(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, agent_env: dict[str, str]
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=agent_env)
    adapter = _agent(handoffs, "build_refund_agent")

    outcome = adapter.run_sync("Refund A-1 and B-2", run_id="run-two")

    assert outcome.status == "paused"
    first, second = outcome.handoffs
    assert [h.payload.action.args for h in outcome.handoffs] == [  # type: ignore[union-attr]
        {"order_id": "A-1", "amount_usd": 30},
        {"order_id": "B-2", "amount_usd": 5},
    ]
    schema = first.payload.action.args_schema  # type: ignore[union-attr]
    assert schema is not None and schema["properties"]["amount_usd"]["type"] == "integer"
    assert {h.resume_target for h in outcome.handoffs} == {RESUME_TARGET}

    # The framework's own refusal, then the reviewer's reason as the user's next message.
    output = (
        "Error: Tool call invocation was rejected by user. | refunded 25 USD on A-1 || refund "
        '{"order_id": "B-2", "amount_usd": 5}: The reviewer rejected this call: B-2 was '
        "already refunded"
    )
    agent_run_checks.edit_then_reject_continue_the_run_once(
        redis, handoffs, adapter, agents, (first, second), output=output
    )


def test_worker_killed_mid_resume_continues_the_run_without_running_a_tool_twice(
    redis: Redis, workers: WorkerProcesses, agent_env: dict[str, str]
) -> None:
    handoffs = hanging_once(redis, workers, PRELOAD, hang_key=agents.HANG_ONCE, extra_env=agent_env)
    adapter = _agent(handoffs, "build_refund_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-kill").handoffs

    agent_run_checks.worker_killed_mid_resume_runs_no_tool_twice(
        redis,
        workers,
        handoffs,
        agents,
        (first, second),
        first_edit={"amount_usd": 20},
        output="refunded 5 USD on B-2 | refunded 20 USD on A-1",
    )


# -- workflows, through real workers ------------------------------------------------------


def test_workflow_question_and_correction_resume_from_the_checkpoint_once(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, agent_env: dict[str, str]
) -> None:
    start_preloaded_worker(workers, PRELOAD_FLOWS, extra_env=agent_env)
    adapter = _workflow(handoffs, "build_intake", agent_env)

    outcome = adapter.run_sync("A-1", run_id="wf-two")

    assert outcome.status == "paused"
    question, correction = outcome.handoffs
    assert question.request_type is RequestType.QUESTION
    assert question.payload.question == "Refund A-1: which card?"  # type: ignore[union-attr]
    assert question.payload.choices == ["Visa", "Amex"]  # type: ignore[union-attr]
    assert correction.request_type is RequestType.CORRECTION
    assert correction.payload.draft == "We refunded your order A-1."  # type: ignore[union-attr]

    handoffs.decide(question.id, "answered", by="U_ALICE", answer="Visa")
    wait_until(lambda: handoffs.get(question.id).resume.state is TaskState.COMPLETED)
    assert recorded(redis, flows.HANDLED) == []  # nothing runs before both are decided
    fixed = "We refunded order A-1. Sorry for the wait!"
    handoffs.decide(correction.id, "approved", by="U_BOB", corrected_draft=fixed)
    wait_until(lambda: len(recorded(redis, flows.FINISHED)) == 1, timeout=30)

    outputs = [f"A-1 to Visa: {fixed}"]
    assert recorded(redis, flows.FINISHED) == [{"run_id": "wf-two", "outputs": outputs}]
    assert adapter.outputs("wf-two") == outputs
    with pytest.raises(AlreadyDecided):
        handoffs.decide(correction.id, "rejected", by="U_CAROL")
    time.sleep(1.0)
    assert len(recorded(redis, flows.FINISHED)) == 1
    assert len(recorded(redis, flows.HANDLED)) == 2


def test_workflow_worker_killed_mid_resume_completes_the_run_once(
    redis: Redis, workers: WorkerProcesses, agent_env: dict[str, str]
) -> None:
    handoffs = hanging_once(
        redis, workers, PRELOAD_FLOWS, hang_key=flows.HANG_ONCE, extra_env=agent_env
    )
    adapter = _workflow(handoffs, "build_intake", agent_env)
    question, correction = adapter.run_sync("B-2", run_id="wf-kill").handoffs

    handoffs.decide(question.id, "answered", by="U_ALICE", answer="Amex")
    handoffs.decide(correction.id, "approved", by="U_ALICE")
    wait_until(lambda: redis.exists(flows.HUNG), timeout=30)
    kill_worker_and_horse(workers, redis.get(flows.HUNG))

    wait_until(lambda: len(recorded(redis, flows.FINISHED)) == 1, timeout=40)

    outputs = ["B-2 to Amex: We refunded your order B-2."]
    assert recorded(redis, flows.FINISHED) == [{"run_id": "wf-kill", "outputs": outputs}]
    # The next attempt resumed from the same checkpoint with the same responses.
    assert [e["step"] for e in recorded(redis, flows.HANDLED)].count("reply") == 2
    time.sleep(1.0)
    assert len(recorded(redis, flows.FINISHED)) == 1


# -- the resume targets called in this process, as a worker calls them --------------------


def test_an_approval_runs_the_call_and_a_run_that_stops_again_hands_off_the_next(
    redis: Redis, handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = _agent(handoffs, "build_two_step_agent")
    [first] = adapter.run_sync("Refund A-1, then B-2", run_id="run-steps").handoffs

    outcome = asyncio.run(adapter.resume(handoffs.decide(first.id, "approved", by="U1")))

    assert outcome is not None and outcome.status == "paused"
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]
    [second] = handoffs.list_pending(run_id="run-steps").items
    assert [h.id for h in outcome.handoffs] == [second.id]
    assert second.payload.action.args == {"order_id": "B-2", "amount_usd": 5}  # type: ignore[union-attr]

    asyncio.run(resume_run(handoffs.decide(second.id, "approved", by="U1"), handoffs=handoffs))

    assert adapter.final_output("run-steps") == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    for handoff_id in (first.id, second.id):  # repeated resumes run nothing again
        asyncio.run(resume_run(handoffs.get(handoff_id), handoffs=handoffs))
    assert len(agents.tool_runs(redis)) == 2
    assert len(_finished(redis)) == 1


def test_a_question_tool_gets_the_persons_answer_as_its_result(
    handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = _agent(handoffs, "build_question_agent")
    outcome = adapter.run_sync("Refund A-1", run_id="run-q")
    [question] = [h for h in outcome.handoffs if h.request_type is RequestType.QUESTION]
    [refund] = [h for h in outcome.handoffs if h.request_type is RequestType.APPROVAL]
    assert question.payload.question == "Which card?"  # type: ignore[union-attr]
    assert question.payload.choices == ["Visa", "Amex"]  # type: ignore[union-attr]

    answered = handoffs.decide(question.id, "answered", by="U_ALICE", answer="Visa")
    assert asyncio.run(adapter.resume(answered)) is None  # waits for the refund's decision
    asyncio.run(resume_run(handoffs.decide(refund.id, "approved", by="U_A"), handoffs=handoffs))

    assert adapter.final_output("run-q") == "Visa | refunded 30 USD on A-1"


def test_an_expired_approval_reaches_the_model_as_a_refusal(
    redis: Redis, handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = _agent(handoffs, "build_one_refund_agent", expires_in=0.2)
    [approval] = adapter.run_sync("Refund A-1", run_id="run-exp").handoffs
    time.sleep(0.3)
    assert handoffs.store.expire_due() == [approval.id]

    asyncio.run(resume_run(handoffs.get(approval.id), handoffs=handoffs))

    assert adapter.final_output("run-exp") == (
        "Error: Tool call invocation was rejected by user. || refund "
        '{"order_id": "A-1", "amount_usd": 30}: Not run. Nobody decided in time; the request '
        "expired."
    )
    assert agents.tool_runs(redis) == []


def test_an_expired_workflow_question_reaches_the_step_as_a_refusal(
    redis: Redis, handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = WorkflowHandoffs(
        handoffs,
        f"{WORKFLOWS}:build_one_question",
        checkpoint_storage=f"{WORKFLOWS}:checkpoint_storage",
        expires_in=0.2,
    )
    [question] = adapter.run_sync("C-3", run_id="wf-exp").handoffs
    assert question.payload.question == "Refund C-3: which card?"  # type: ignore[union-attr]
    time.sleep(0.3)
    assert handoffs.store.expire_due() == [question.id]

    asyncio.run(resume_workflow(handoffs.get(question.id), handoffs=handoffs))

    refusal = "The person did not answer: Nobody decided in time; the request expired."
    assert adapter.outputs("wf-exp") == [refusal]


def test_a_workflow_approval_hands_the_step_the_reviewer_s_edited_arguments(
    handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = _workflow(handoffs, "build_approval", agent_env)
    [approval] = adapter.run_sync("D-4", run_id="wf-approval").handoffs
    assert approval.payload.action.name == "refund"  # type: ignore[union-attr]
    assert approval.payload.action.description == "Refund part of an order"  # type: ignore[union-attr]

    edited = handoffs.decide(approval.id, "approved", by="U_ALICE", edited_args={"amount_usd": 12})
    asyncio.run(resume_workflow(edited, handoffs=handoffs))

    assert adapter.outputs("wf-approval") == [
        "edit {'order_id': 'D-4', 'amount_usd': 12} by U_ALICE"
    ]


def test_a_workflow_agent_s_tool_approvals_become_approvals(
    redis: Redis, handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    adapter = _workflow(handoffs, "build_agent_flow", agent_env)
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="wf-agent").handoffs
    assert first.payload.action.name == "refund"  # type: ignore[union-attr]
    assert first.payload.action.args == {"order_id": "A-1", "amount_usd": 30}  # type: ignore[union-attr]

    asyncio.run(resume_workflow(handoffs.decide(first.id, "approved", by="U1"), handoffs=handoffs))
    edited = handoffs.decide(second.id, "approved", by="U1", edited_args={"amount_usd": 1})
    asyncio.run(resume_workflow(edited, handoffs=handoffs))

    # The agent was shown B-2 for 5: an edit cannot reach it, so the call is refused.
    output = "refunded 30 USD on A-1 | Error: Tool call invocation was rejected by user."
    assert adapter.outputs("wf-agent") == [output]
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]


# -- bad input gets a clear error ---------------------------------------------------------


def test_unknown_options_and_missing_checkpoints_are_refused_by_name(
    handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    with pytest.raises(TypeError, match="reviewer"):
        _agent(handoffs, "build_refund_agent", reviewer=["U1"])
    with pytest.raises(TypeError, match="chanel"):
        _workflow(handoffs, "build_intake", agent_env, chanel="C1")
    with pytest.raises(TypeError, match="exactly one of checkpoint_dir"):
        WorkflowHandoffs(handoffs, f"{WORKFLOWS}:build_intake")


def test_a_request_the_checkpoint_cannot_hold_or_a_person_cannot_answer_is_refused(
    handoffs: Handoffs, agent_env: dict[str, str]
) -> None:
    unregistered = _workflow(handoffs, "build_unregistered", agent_env)
    with pytest.raises(CheckpointMissing, match="register_checkpoint_type"):
        unregistered.run_sync("A-1", run_id="wf-unregistered")

    str_correction = _workflow(handoffs, "build_str_correction", agent_env)
    with pytest.raises(UnsupportedRequest, match="use HumanReply"):
        str_correction.run_sync("A-1", run_id="wf-str")
    assert handoffs.list_pending().items == []
