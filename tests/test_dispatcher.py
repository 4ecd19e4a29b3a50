"""The dispatcher moves due tasks to RQ, and dispatches a task again only when its job may
have been lost, never while the job still waits in the queue."""

from __future__ import annotations

import time

from redis import Redis
from rq.job import Job, JobStatus

from worker.client import Handoffs
from worker.dispatcher import Dispatcher
from worker.queues import TaskQueues

VISIBILITY = 0.2


def _dispatcher(handoffs: Handoffs) -> Dispatcher:
    return Dispatcher(
        handoffs.store,
        TaskQueues.named(handoffs.redis),
        interval=0.05,
        dispatch_timeout=VISIBILITY,
    )


def _approval(handoffs: Handoffs) -> str:
    return handoffs.request_approval(run_id="r", thread_id="t", action="refund").id


def _after_visibility(dispatcher: Dispatcher) -> None:
    time.sleep(VISIBILITY + 0.05)
    dispatcher.tick()


def test_a_job_still_waiting_in_the_queue_is_not_dispatched_again(
    redis: Redis, handoffs: Handoffs
) -> None:
    dispatcher = _dispatcher(handoffs)
    for _ in range(3):
        _approval(handoffs)
    assert dispatcher.tick().dispatched == 3

    for _ in range(3):
        _after_visibility(dispatcher)

    assert dispatcher.queues.slack.count == 3, "a backlog longer than the timeout is not copied"


def test_a_job_taken_by_a_worker_that_died_is_dispatched_again(
    redis: Redis, handoffs: Handoffs
) -> None:
    dispatcher = _dispatcher(handoffs)
    _approval(handoffs)
    dispatcher.tick()
    queue = dispatcher.queues.slack  # a delivery is Slack work
    # A worker pops the job (into RQ's intermediate queue) and dies before starting it.
    [lost] = queue.get_job_ids()
    redis.lmove(queue.key, queue.intermediate_queue_key, "LEFT", "RIGHT")

    _after_visibility(dispatcher)

    [again] = queue.get_job_ids()
    assert again != lost


def test_a_started_or_vanished_job_is_dispatched_again(redis: Redis, handoffs: Handoffs) -> None:
    dispatcher = _dispatcher(handoffs)
    _approval(handoffs)
    _approval(handoffs)
    dispatcher.tick()
    queue = dispatcher.queues.slack  # a delivery is Slack work
    started, vanished = (Job.fetch(job_id, connection=redis) for job_id in queue.get_job_ids())
    # One was started by a worker that then died; the other's record is gone altogether.
    redis.delete(queue.key)
    started.set_status(JobStatus.STARTED)
    vanished.delete()

    _after_visibility(dispatcher)

    assert queue.count == 2
    assert not {started.id, vanished.id} & set(queue.get_job_ids())
