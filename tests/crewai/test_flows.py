"""The CrewAI Flows adapter with real CrewAI flows and real `handoff worker` processes:
@human_feedback steps -> handoffs -> decisions -> the flow restored from its pause and
resumed once, routed by the click, with edits as the step's output."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from crewai.flow import Flow, human_feedback, start
from crewai.flow.async_feedback import HumanFeedbackPending
from redis import Redis
from rq import Worker

from store.exceptions import AlreadyDecided, PayloadTooLarge
from store.models import Handoff, RequestType, Status, TaskState
from store.repository import TaskPolicy
from tests.conftest import WorkerProcesses, wait_until
from tests.crewai import flows
from tests.support.adapter_runs import adapter_env, recorded
from tests.support.preloaded_workers import (
    hanging_once,
    kill_worker_and_horse,
    start_preloaded_worker,
)
from worker.adapters.crewai import (
    CrewAIResume,
    FeedbackShape,
    SlackFeedbackProvider,
    UnsupportedFlow,
    resume_flow,
)
from worker.adapters.crewai.flows import RESUME_TARGET
from worker.adapters.pauses import Pauses
from worker.client import Handoffs
from worker.resume_targets import allow_resume_modules, resolve_target

PRELOAD = ("crewai", "tests.crewai.flows")


@pytest.fixture
def flow_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """The flows' environment (the test Redis), here and in workers."""
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


@pytest.fixture
def provider(handoffs: Handoffs, monkeypatch: pytest.MonkeyPatch) -> SlackFeedbackProvider:
    """The flows' provider, handing off with the test's client (its task policy)."""
    monkeypatch.setattr(flows.slack, "_handoffs", handoffs)
    return flows.slack


def _ready(redis: Redis, workers: WorkerProcesses) -> None:
    """Wait until the started `handoff worker` processes listen (two RQ workers each): they
    import CrewAI first, which takes most of a minute on a loaded machine."""

    def listening() -> bool:
        if any(process.poll() is not None for process in workers.processes):
            raise AssertionError(f"a worker exited:\n{workers.logs()[-3000:]}")
        return Worker.count(connection=redis) >= 2 * len(workers.processes)

    wait_until(listening, timeout=240, interval=0.2)


def _steps(redis: Redis, name: str | None = None) -> list[dict[str, Any]]:
    return [s for s in recorded(redis, flows.STEPS) if name is None or s["step"] == name]


def _asked(handoffs: Handoffs, pending: Any) -> Handoff:
    assert isinstance(pending, HumanFeedbackPending), pending
    return handoffs.get(pending.callback_info["handoff_id"])


def _resume(handoffs: Handoffs, handoff: Handoff) -> None:
    asyncio.run(resume_flow(handoff, handoffs=handoffs))


# -- through real workers ---------------------------------------------------------------


def test_three_flows_paused_at_once_resume_once_approved_edited_rejected_and_answered(
    redis: Redis,
    handoffs: Handoffs,
    provider: SlackFeedbackProvider,
    workers: WorkerProcesses,
    flow_env: dict,
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=flow_env)
    _ready(redis, workers)
    refund = flows.build_refund_flow().kickoff(inputs={"order_id": "A-1", "amount_usd": 30})
    small = flows.build_refund_flow().kickoff(inputs={"order_id": "B-2", "amount_usd": 5})
    note = flows.NoteFlow().kickoff()

    approval, correction = _asked(handoffs, refund), _asked(handoffs, note)
    small_approval = _asked(handoffs, small)
    assert len(handoffs.list_pending().items) == 3
    assert approval.request_type is RequestType.APPROVAL
    action = approval.payload.action  # type: ignore[union-attr]
    assert (action.name, action.args) == ("propose", {"order_id": "A-1", "amount_usd": 30})
    assert action.description == "Refund this order?"
    assert action.args_schema is not None
    assert action.args_schema["properties"]["amount_usd"]["type"] == "integer"
    assert approval.channel == "C0SUPPORT" and approval.resume_target == RESUME_TARGET
    assert approval.run_id == refund.context.flow_id
    assert f"Flow 'RefundFlow' (flow {approval.run_id}) asks" in (approval.context or "")
    assert correction.request_type is RequestType.CORRECTION
    assert correction.payload.draft == "Dear customer, we refunded order A-1."  # type: ignore[union-attr]
    assert CrewAIResume.of(correction).request.shape is FeedbackShape.CORRECTION

    # The note first: edited; its flow goes on and asks again, from the worker.
    edited = "Dear customer, we refunded order A-1 in full."
    handoffs.decide(correction.id, "approved", by="U_BOB", corrected_draft=edited)
    wait_until(lambda: handoffs.list_pending(run_id=note.context.flow_id).items, timeout=30)
    [question] = handoffs.list_pending(run_id=note.context.flow_id).items
    assert question.request_type is RequestType.QUESTION
    assert question.payload.question == "Anything to add before we close the ticket?"  # type: ignore[union-attr]
    assert f"sent: {edited}" in (question.context or "")
    assert _steps(redis, "refund") == []  # the other flow still waits

    handoffs.decide(approval.id, "rejected", by="U_ALICE", comment="A-1 was already refunded")
    handoffs.decide(question.id, "answered", by="U_BOB", answer="Close it, thanks")
    handoffs.decide(small_approval.id, "approved", by="U_ALICE")
    wait_until(
        lambda: len(_steps(redis, "decline")) == len(_steps(redis, "close")) == 1, timeout=30
    )

    [send] = _steps(redis, "send")
    assert (send["outcome"], send["output"], send["order"]) == ("approve", edited, "A-1")
    assert send["handoff"]["decision"] == "edit" and send["handoff"]["decided_by"] == "U_BOB"
    [decline] = _steps(redis, "decline")
    assert (decline["outcome"], decline["feedback"]) == ("rejected", "A-1 was already refunded")
    wait_until(lambda: provider.final_output(refund.context.flow_id) is not None)
    assert provider.final_output(refund.context.flow_id) == "declined: A-1 was already refunded"
    wait_until(lambda: provider.final_output(note.context.flow_id) is not None)
    assert provider.final_output(note.context.flow_id) == "closed: Close it, thanks"

    with pytest.raises(AlreadyDecided):
        handoffs.decide(approval.id, "approved", by="U_CAROL")
    wait_until(lambda: recorded(redis, flows.FINISHED), timeout=30)
    [refunded] = _steps(redis, "refund")
    assert (refunded["outcome"], refunded["output"]) == (
        "approved",
        {"order_id": "B-2", "amount_usd": 5},
    )
    assert refunded["handoff"]["decision"] == "approve"
    assert redis.hgetall(flows.EFFECTS) == {
        small_approval.id.encode(): b'{"order_id":"B-2","amount_usd":5}'
    }

    with pytest.raises(AlreadyDecided):
        handoffs.decide(small_approval.id, "rejected", by="U_CAROL")
    time.sleep(1.0)  # room for a second resume to show up
    assert sorted(s["step"] for s in _steps(redis)) == ["close", "decline", "refund", "send"]
    [finished] = recorded(redis, flows.FINISHED)
    assert finished["said"] == "refunded 5 USD on B-2" and finished["state"]["refunded"] == 5
    decided = (approval, small_approval, correction, question)

    def resumes() -> set[tuple[TaskState, int]]:
        return {
            (handoffs.get(h.id).resume.state, handoffs.get(h.id).resume.attempt) for h in decided
        }

    wait_until(lambda: {state for state, _ in resumes()} == {TaskState.COMPLETED})
    assert resumes() == {(TaskState.COMPLETED, 1)}  # each resumed once, at its first attempt


def test_worker_killed_mid_resume_completes_the_flow_once(
    redis: Redis, workers: WorkerProcesses, flow_env: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    hanging_once(redis, workers, PRELOAD, hang_key=flows.HANG_ONCE, extra_env=flow_env)
    # A longer resume lease than hanging_once's 3 s: restoring a flow and running it up to
    # the hanging step can take that long on a loaded machine, and the first attempt must
    # reach the step before its lease runs out.
    policy = TaskPolicy(resume_max_attempts=3, resume_timeout_seconds=8, lease_grace_seconds=0.5)
    handoffs = Handoffs(redis, tasks=policy)
    monkeypatch.setattr(flows.slack, "_handoffs", handoffs)
    _ready(redis, workers)
    refund = flows.build_refund_flow().kickoff(inputs={"order_id": "A-1", "amount_usd": 30})
    approval = _asked(handoffs, refund)

    handoffs.decide(approval.id, "approved", by="U_ALICE", edited_args={"amount_usd": 25})
    # The refund step hangs after its side effect: the worker dies in the middle.
    wait_until(lambda: redis.exists(flows.HUNG), timeout=60)
    kill_worker_and_horse(workers, redis.get(flows.HUNG))

    wait_until(lambda: recorded(redis, flows.FINISHED), timeout=60)
    [finished] = recorded(redis, flows.FINISHED)
    assert finished["said"] == "refunded 25 USD on A-1"
    assert finished["state"]["refunded"] == 25 and finished["state"]["amount_usd"] == 30
    # Kept once resume_async has returned, just after the last step recorded its finish.
    wait_until(lambda: flows.slack.final_output(refund.context.flow_id) is not None)
    assert flows.slack.final_output(refund.context.flow_id) == "refunded 25 USD on A-1"
    # The step ran again in the worker that took over; its keyed side effect happened once.
    runs = _steps(redis, "refund")
    assert len(runs) == 2 and runs[0]["pid"] != runs[1]["pid"]
    assert redis.hgetall(flows.EFFECTS) == {
        approval.id.encode(): b'{"order_id":"A-1","amount_usd":25}'
    }
    assert handoffs.get(approval.id).resume.attempt >= 2
    assert "died continuing this flow" in workers.logs()
    time.sleep(1.0)
    assert len(recorded(redis, flows.FINISHED)) == 1


# -- the resume target called in this process, as a worker calls it ---------------------


def test_an_approval_approved_as_is_runs_its_branch_with_the_state_at_the_pause(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    flow = flows.build_refund_flow()
    approval = _asked(handoffs, flow.kickoff(inputs={"order_id": "B-2", "amount_usd": 5}))

    decided = handoffs.decide(approval.id, "approved", by="U_ALICE", comment="fine")
    _resume(handoffs, decided)

    [run] = _steps(redis, "refund")
    assert (run["outcome"], run["feedback"]) == ("approved", "fine")
    assert run["output"] == {"order_id": "B-2", "amount_usd": 5}
    assert run["handoff"] == {
        "id": approval.id,
        "decision": "approve",
        "status": "approved",
        "decided_by": "U_ALICE",
    }
    [finished] = recorded(redis, flows.FINISHED)
    assert finished["state"] == {
        "id": flow.flow_id,
        "order_id": "B-2",
        "amount_usd": 5,
        "refunded": 5,
    }
    assert handoffs.get(approval.id).status is Status.APPROVED

    _resume(handoffs, decided)  # a retried job after the flow went on: nothing again
    assert len(_steps(redis, "refund")) == 1 and len(recorded(redis, flows.FINISHED)) == 1


def test_a_question_with_choices_routes_the_flow_by_the_choice_clicked(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    question = _asked(handoffs, flows.TriageFlow().kickoff())

    assert question.request_type is RequestType.QUESTION
    assert question.payload.question == "What do we do with this order?"  # type: ignore[union-attr]
    assert question.payload.choices == ["refund", "replace", "escalate"]  # type: ignore[union-attr]
    assert '"problem": "arrived broken"' in (question.context or "")

    _resume(handoffs, handoffs.decide(question.id, "answered", by="U_A", answer="Replace"))

    [step] = _steps(redis)
    assert (step["step"], step["outcome"], step["feedback"]) == ("replace", "replace", "Replace")
    assert step["handoff"]["decision"] == "answer"


def test_a_declined_question_with_choices_takes_the_default_outcome_with_the_reason(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    question = _asked(handoffs, flows.TriageFlow().kickoff())

    _resume(handoffs, handoffs.decide(question.id, "rejected", by="U_A", comment="not mine"))

    [step] = _steps(redis)
    assert (step["step"], step["outcome"]) == ("escalate", "escalate")
    assert step["feedback"] == "The person did not answer: not mine"


def test_typed_feedback_is_mapped_by_the_steps_own_llm_not_one_named_in_redis(
    redis: Redis,
    handoffs: Handoffs,
    provider: SlackFeedbackProvider,
    flow_env: dict,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-workers-own")
    asked: list[Any] = []

    def collapse(flow: Flow, feedback: str, outcomes: list[str], llm: Any) -> str:
        asked.append(llm)  # no model is called: the test only looks at which one
        return "replace"

    monkeypatch.setattr(Flow, "_collapse_to_outcome", collapse)
    pending = flows.TriageFlow().kickoff()
    # Whoever can write to Redis points the pause's LLM config at their own endpoint.
    key = Pauses(handoffs).keys.pause(pending.callback_info["pause_id"])
    kept = json.loads(redis.hget(key, "pending") or "{}")
    kept["context"]["llm"] = {"model": "openai/gpt-4o-mini", "base_url": "http://evil.test/v1"}
    redis.hset(key, "pending", json.dumps(kept))
    answer = "It arrived broken, send another one"
    handoff_id = pending.callback_info["handoff_id"]
    decided = handoffs.decide(handoff_id, "answered", by="U_A", answer=answer)

    _resume(handoffs, decided)

    [llm] = asked
    assert (llm.model, llm.base_url) == (flows.COLLAPSE_LLM, None)
    [step] = _steps(redis)
    assert (step["step"], step["feedback"]) == ("replace", answer)


def test_an_expired_approval_takes_the_reject_outcome(
    redis: Redis,
    handoffs: Handoffs,
    provider: SlackFeedbackProvider,
    flow_env: dict,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expiring = provider.defaults.model_copy(update={"expires_in_seconds": 0.2})
    monkeypatch.setattr(provider, "defaults", expiring)
    approval = _asked(handoffs, flows.build_refund_flow().kickoff())
    time.sleep(0.3)
    assert handoffs.store.expire_due() == [approval.id]

    _resume(handoffs, handoffs.get(approval.id))

    [decline] = _steps(redis, "decline")
    assert decline["outcome"] == "rejected"
    assert decline["feedback"] == "Nobody decided in time; the request expired."
    assert _steps(redis, "refund") == []


def test_a_resume_restores_the_pause_even_after_the_flows_store_forgot_it(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    flow = flows.build_refund_flow()
    approval = _asked(handoffs, flow.kickoff())
    # What a first attempt that died mid-way leaves: CrewAI cleared the pending feedback.
    flows.persistence().clear_pending_feedback(flow.flow_id)

    _resume(handoffs, handoffs.decide(approval.id, "approved", by="U_A"))

    assert [f["said"] for f in recorded(redis, flows.FINISHED)] == ["refunded 30 USD on A-1"]


def test_a_flow_kicked_off_again_with_an_earlier_runs_id_asks_anew(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    # CrewAI restores a flow's state when it is kicked off with the id of an earlier run.
    inputs = {"id": "refund-A-1", "order_id": "A-1"}
    first = _asked(handoffs, flows.build_refund_flow().kickoff(inputs={**inputs, "amount_usd": 30}))
    _resume(handoffs, handoffs.decide(first.id, "rejected", by="U_A", comment="too much"))

    again = flows.build_refund_flow().kickoff(inputs={**inputs, "amount_usd": 20})

    # A new request for the new proposal, not the first run's decided handoff.
    second = _asked(handoffs, again)
    assert second.id != first.id and second.is_pending
    assert second.payload.action.args == {"order_id": "A-1", "amount_usd": 20}  # type: ignore[union-attr]
    _resume(handoffs, handoffs.decide(second.id, "approved", by="U_A"))
    assert [f["said"] for f in recorded(redis, flows.FINISHED)] == ["refunded 20 USD on A-1"]


def test_a_question_with_no_outcome_for_nobody_answering_is_refused_before_anything_is_handed_off(
    handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    # Neither outcome means no and there is no default_outcome: an expiry would be mapped
    # to "ship" or "hold" by the step's LLM.
    with pytest.raises(UnsupportedFlow, match="none of which means no: give it a default_outc"):
        flows.ShipFlow().kickoff()
    assert handoffs.list_pending().items == []


def test_a_request_refused_when_handed_off_leaves_no_pause_holding_the_flows_state(
    redis: Redis, handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    for _ in range(2):
        with pytest.raises(PayloadTooLarge):
            flows.LongNoteFlow(persistence=flows.persistence()).kickoff()

    assert list(redis.scan_iter(Pauses(handoffs).keys.pause("*"))) == []


def test_the_resume_target_is_allowed_whatever_handoff_resume_modules_lists(
    handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    # The agent's and the worker's HANDOFF_RESUME_MODULES list the flow's module only.
    allow_resume_modules(["tests.crewai"])
    try:
        approval = _asked(handoffs, flows.build_refund_flow().kickoff())
        assert resolve_target(approval.resume_target or "") is resume_flow
    finally:
        allow_resume_modules(None)


def test_a_flow_a_worker_cannot_import_is_refused_before_anything_is_handed_off(
    handoffs: Handoffs, provider: SlackFeedbackProvider, flow_env: dict
) -> None:
    class LocalFlow(Flow):  # type: ignore[type-arg]
        _skip_auto_memory: bool = True

        @start()
        @human_feedback(message="OK?", provider=provider)
        def ask(self) -> str:
            return "draft"

    with pytest.raises(UnsupportedFlow, match="defined in a function, which a worker cannot"):
        LocalFlow().kickoff()
    assert handoffs.list_pending().items == []


def test_an_unknown_option_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="'chanel' \\(did you mean 'channel'\\?\\)"):
        SlackFeedbackProvider(chanel="C0SUPPORT")  # type: ignore[call-arg]
