"""End to end through real `handoff worker` processes: delivery, resume exactly once,
crashes, retries and expiry."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
import time
from datetime import timedelta

import pytest
from redis import Redis

from store.exceptions import AlreadyDecided
from store.models import Status, TaskKind, TaskState
from store.repository import TaskPolicy
from tests.conftest import WorkerProcesses, wait_until
from tests.support import resume_targets
from worker.client import Handoffs


def _entries(redis: Redis, key: str) -> list[dict]:
    return [json.loads(raw) for raw in redis.lrange(key, 0, -1)]


def _approval(handoffs: Handoffs, target: str, **options) -> str:
    handoff = handoffs.request_approval(
        run_id="run-1",
        thread_id="thread-1",
        action="issue_refund",
        args={"order_id": "A-1", "amount": 30},
        context="double charge",
        resume=target,
        **options,
    )
    return handoff.id


def test_decided_handoff_is_delivered_and_resumed_once_with_its_decision(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    workers.start()
    handoff_id = _approval(handoffs, "tests.support.resume_targets:record")
    wait_until(lambda: handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED)

    handoffs.decide(handoff_id, "approved", by="U_ALICE", edited_args={"amount": 25})

    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    [resumed] = _entries(redis, resume_targets.COMPLETED)
    assert resumed["handoff_id"] == handoff_id
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["decided_by"] == "U_ALICE"
    # The decision carries the whole arguments as approved: the edit merged over the request's.
    assert resumed["resume_data"]["edited_args"] == {"order_id": "A-1", "amount": 25}
    assert resumed["attempt"] == 1
    assert resumed["idempotency_key"] == handoff_id
    wait_until(lambda: handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    events = [event.event for event in handoffs.audit(handoff_id)]
    assert events[:4] == ["created", "delivery_started", "delivered", "decided"]
    # After the decision, the resume and the message update run independently.
    assert sorted(events[4:]) == sorted(
        ["resume_started", "resumed", "update_started", "message_updated"]
    )


def test_async_resume_target_runs_to_completion(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    workers.start()
    handoff = handoffs.ask(
        run_id="run-async",
        thread_id="t",
        question="Which customer?",
        resume="tests.support.resume_targets:record_async",
    )
    handoffs.decide(handoff.id, "answered", by="U_BOB", answer="Dana")
    wait_until(lambda: redis.llen(resume_targets.COMPLETED) == 1)
    [resumed] = _entries(redis, resume_targets.COMPLETED)
    assert resumed["resume_data"]["answer"] == "Dana"


def test_fifty_concurrent_decisions_make_one_winner_and_one_resume(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    handoff_id = _approval(handoffs, "tests.support.resume_targets:record")
    barrier = threading.Barrier(50)
    winners: list[str] = []
    losers: list[AlreadyDecided] = []

    def decide(reviewer: str) -> None:
        barrier.wait()
        try:
            handoffs.decide(handoff_id, "approved", by=reviewer)
            winners.append(reviewer)
        except AlreadyDecided as exc:
            losers.append(exc)

    threads = [threading.Thread(target=decide, args=(f"U{i:02d}",)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(winners) == 1
    assert len(losers) == 49
    assert {loser.decided_by for loser in losers} == set(winners)

    workers.start()
    workers.start()
    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    time.sleep(1.0)  # room for any duplicate resume to show up
    completed = _entries(redis, resume_targets.COMPLETED)
    assert [entry["resume_data"]["decided_by"] for entry in completed] == winners
    assert [e.event for e in handoffs.audit(handoff_id)].count("resumed") == 1


@pytest.mark.parametrize("mode", ["--no-fork", "--fork"])
def test_worker_killed_mid_resume_is_retried_and_completes_once(
    redis: Redis, redis_url: str, workers: WorkerProcesses, mode: str
) -> None:
    policy = TaskPolicy(
        resume_max_attempts=3,
        resume_timeout_seconds=3,
        backoff_seconds=0.1,
        lease_grace_seconds=0.5,
    )
    handoffs = Handoffs(redis, tasks=policy)
    first = workers.start(args=[mode])
    handoff_id = _approval(handoffs, "tests.support.resume_targets:hang_on_first_attempt")
    handoffs.decide(handoff_id, "approved", by="U_ALICE")
    wait_until(lambda: redis.llen(resume_targets.STARTED) == 1)

    # The machine dies: SIGKILL to the worker and its dispatcher, and to the work horse
    # running the target if the worker forked one (RQ puts it in a process group of its own).
    [started] = _entries(redis, resume_targets.STARTED)
    workers.kill(first)
    with contextlib.suppress(ProcessLookupError):
        os.kill(started["pid"], signal.SIGKILL)
    assert redis.llen(resume_targets.COMPLETED) == 0
    assert handoffs.get(handoff_id).resume.state is TaskState.RUNNING
    # The target runs in a process of its own (a child of the work horse with --fork),
    # which dies with the worker.
    assert started["pid"] != first.pid

    workers.start(args=[mode])
    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.COMPLETED, timeout=30)
    time.sleep(0.5)
    started = _entries(redis, resume_targets.STARTED)
    completed = _entries(redis, resume_targets.COMPLETED)
    assert [entry["attempt"] for entry in started] == [1, 2]
    assert [entry["attempt"] for entry in completed] == [2]
    assert handoffs.get(handoff_id).resume.attempt == 2


@pytest.mark.parametrize("mode", ["--no-fork", "--fork"])
def test_attempt_that_swallows_its_timeout_is_stopped_before_the_next_starts(
    redis: Redis, workers: WorkerProcesses, mode: str
) -> None:
    # RQ's timeout reaches the target as an ordinary Exception; this target swallows it and
    # works on. Two workers, so that one is free to start the next attempt as soon as the
    # dispatcher finds the lease lapsed.
    policy = TaskPolicy(
        resume_max_attempts=3,
        resume_timeout_seconds=1,
        backoff_seconds=0.1,
        lease_grace_seconds=0.5,
    )
    handoffs = Handoffs(redis, tasks=policy)
    workers.start(args=[mode])
    workers.start(args=[mode])
    handoff_id = _approval(handoffs, "tests.support.resume_targets:swallow_the_timeout")
    handoffs.decide(handoff_id, "approved", by="U_ALICE")

    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.FAILED, timeout=30)
    time.sleep(1.0)  # a target still running would go on ticking meanwhile
    started = _entries(redis, resume_targets.STARTED)
    ticks = _entries(redis, resume_targets.TICKS)
    assert [entry["attempt"] for entry in started] == [1, 2, 3]
    for earlier, later in itertools.pairwise(started):
        last_tick = max(t["at"] for t in ticks if t["attempt"] == earlier["attempt"])
        assert last_tick < later["at"], (
            f"attempt {earlier['attempt']} was still running "
            f"{last_tick - later['at']:.2f} s after attempt {later['attempt']} started"
        )
    assert max(t["at"] for t in ticks) < time.time() - 0.5  # the last one was stopped too
    # Killed at its timeout, never allowed to finish its 4 s of work.
    assert _entries(redis, resume_targets.COMPLETED) == []
    failed = handoffs.get(handoff_id)
    assert "did not return within 1 s; its process was killed" in (failed.resume.last_error or "")


def test_failing_target_is_retried_then_marked_failed_and_can_be_retried(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    redis.set(resume_targets.FAIL_FLAG, "1")
    workers.start()
    handoff_id = _approval(handoffs, "tests.support.resume_targets:fail_while_flagged")
    handoffs.decide(handoff_id, "rejected", by="U_ALICE", comment="too much")

    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.FAILED)
    failed = handoffs.get(handoff_id)
    assert failed.resume.attempt == 3  # fast_tasks allows 3 attempts
    assert "downstream unavailable" in (failed.resume.last_error or "")
    assert (TaskKind.RESUME, handoff_id) in handoffs.store.failed_tasks()
    events = [event.event for event in handoffs.audit(handoff_id)]
    assert events.count("resume_attempt_failed") == 2
    assert events.count("resume_failed") == 1

    redis.delete(resume_targets.FAIL_FLAG)
    handoffs.retry_resume(handoff_id, by="U_ADMIN")
    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    [resumed] = _entries(redis, resume_targets.COMPLETED)
    assert resumed["attempt"] == 4
    assert resumed["resume_data"]["comment"] == "too much"
    assert handoffs.store.failed_tasks() == []


def test_expired_handoff_resumes_its_run_with_expired_never_approved(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    workers.start()
    handoff_id = _approval(
        handoffs, "tests.support.resume_targets:record", expires_in=timedelta(milliseconds=300)
    )
    expired = handoffs.wait(handoff_id, timeout=10)
    assert expired.status is Status.EXPIRED
    wait_until(lambda: redis.llen(resume_targets.COMPLETED) == 1)
    [resumed] = _entries(redis, resume_targets.COMPLETED)
    assert resumed["status"] == "expired"
    assert resumed["resume_data"]["outcome"] == "expired"
    assert handoffs.list_pending().items == []


def test_wait_returns_within_100_ms_of_a_decision(handoffs: Handoffs) -> None:
    handoff_id = _approval(handoffs, "tests.support.resume_targets:record")
    returned_at: list[float] = []

    def waiter() -> None:
        handoffs.wait(handoff_id, timeout=10)
        returned_at.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)
    handoffs.decide(handoff_id, "approved", by="U_ALICE")
    decided_at = time.monotonic()
    thread.join(timeout=5)
    assert returned_at, "wait() did not return"
    assert returned_at[0] - decided_at < 0.1


def test_the_spawned_dispatcher_logs_like_its_worker(workers: WorkerProcesses) -> None:
    worker = workers.start()

    wait_until(lambda: "dispatcher started" in workers.logs())

    line = next(x for x in workers.logs().splitlines() if "dispatcher started" in x)
    assert " INFO worker.runner: dispatcher started (pid " in line
    assert f"(pid {worker.pid})" not in line  # logged by the dispatcher's own process


@pytest.mark.parametrize("work", ["all", "resumes"])
def test_a_burst_stops_only_once_the_work_due_is_done(
    handoffs: Handoffs, workers: WorkerProcesses, work: str
) -> None:
    """`--burst` (a cron job, a CI step) dispatches and works until nothing is due: it never
    stops on an empty queue the dispatcher was about to fill."""
    ids = [_approval(handoffs, "tests.support.resume_targets:record") for _ in range(3)]
    for handoff_id in ids:
        handoffs.decide(handoff_id, "approved", by="U_ALICE")

    burst = workers.start(args=["--burst", "--work", work])
    assert burst.wait(timeout=60) == 0

    for handoff in handoffs.store.get_many(ids):
        assert handoff.resume.state is TaskState.COMPLETED, workers.logs()
        assert (handoff.delivery.state is TaskState.COMPLETED) is (work == "all")
