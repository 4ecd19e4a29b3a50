"""The dispatcher: turns due outbox entries into RQ jobs, expires overdue handoffs, and
purges decided ones past retention.

Decisions and creations only write to the outbox (in the same atomic step as the state
change) and wake the dispatcher; it enqueues the RQ jobs. So a decision costs one round
trip in the request, and a crash between "decided" and "enqueued" loses nothing: the
outbox entry stays until its job finishes. Several dispatchers may run at once; each
entry is claimed atomically.

A claimed entry whose job has not started within the dispatch timeout is dispatched again
(its job may have been lost with a worker), unless that job is still waiting in the RQ
queue: behind a backlog longer than the timeout, dispatching every waiting task again
would only lengthen the queue, and each round of copies the next.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from redis.exceptions import RedisError
from rq.job import JobStatus

from store import defaults
from store.decoding import as_text
from store.repository import DueTask, HandoffStore
from worker import metrics
from worker.queues import JOB_FUNCTIONS, TaskQueues

logger = logging.getLogger(__name__)


# Keep finished RQ jobs briefly: the store, not RQ, is the record of what happened.
_RESULT_TTL_SECONDS = 600
_FAILURE_TTL_SECONDS = 7 * 24 * 3600
_PURGE_EVERY_SECONDS = 60.0
# How long the id of a dispatched job is remembered (a job waiting longer may be copied).
_DISPATCHED_JOB_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True)
class TickReport:
    """What one dispatcher pass did."""

    expired: int
    dispatched: int
    purged: int


class Dispatcher:
    """Moves due work from the store to RQ.

    Example::

        Dispatcher(store, TaskQueues.named(redis, "handoff")).run()
    """

    def __init__(
        self,
        store: HandoffStore,
        queues: TaskQueues,
        *,
        interval: float = defaults.SWEEP_INTERVAL_SECONDS,
        batch: int = defaults.SWEEP_BATCH,
        dispatch_timeout: float = defaults.DISPATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.store = store
        self.queues = queues
        self.interval = interval
        self.batch = batch
        self.dispatch_timeout = dispatch_timeout
        self._last_purge = 0.0

    def tick(self) -> TickReport:
        """Expire overdue handoffs, dispatch due tasks, and now and then purge old ones."""
        expired = self.store.expire_due(limit=self.batch)
        due = self.store.claim_due(limit=self.batch, visibility_seconds=self.dispatch_timeout)
        if due:
            self._enqueue(due)
        purged = 0
        if time.monotonic() - self._last_purge >= _PURGE_EVERY_SECONDS:
            self._last_purge = time.monotonic()
            purged = self.store.purge_decided(limit=self.batch)
        return TickReport(expired=len(expired), dispatched=len(due), purged=purged)

    def run(self, stop: threading.Event | None = None) -> None:
        """Tick until ``stop`` is set, sleeping on the wake list between idle ticks."""
        stop = stop or threading.Event()
        logger.info("dispatcher started on %s", self.store.keys.prefix)
        while not stop.is_set():
            try:
                report = self.tick()
                if report.dispatched < self.batch and report.expired < self.batch:
                    self.store.wait_for_work(self.interval)
            except Exception as exc:
                # Redis restarting or unreachable: keep trying; nothing is lost meanwhile.
                logger.exception("dispatcher pass failed; retrying")
                if isinstance(exc, RedisError):
                    metrics.count_redis_error("dispatcher")
                stop.wait(self.interval)

    def _enqueue(self, due: list[DueTask]) -> None:
        keys = self.store.keys
        waiting = self._still_waiting(due)
        # The queue's connection: RQ's jobs and our note of each task's job live with the
        # queues, which may be on a Redis of their own (HANDOFF_QUEUE_REDIS_URL).
        with self.queues.resumes.connection.pipeline() as pipe:
            for task in due:
                if task in waiting:
                    continue
                job = self.queues.for_kind(task.kind).enqueue_call(
                    func=JOB_FUNCTIONS[task.kind],
                    args=(keys.namespace, task.handoff_id),
                    timeout=max(1, int(task.timeout_seconds)),
                    result_ttl=_RESULT_TTL_SECONDS,
                    failure_ttl=_FAILURE_TTL_SECONDS,
                    description=f"{task.kind.value} {task.handoff_id}",
                    pipeline=pipe,
                )
                pipe.set(
                    keys.dispatched_job(task.kind.value, task.handoff_id),
                    job.id,
                    ex=_DISPATCHED_JOB_TTL_SECONDS,
                )
            pipe.execute()
        logger.debug(
            "dispatched %d tasks (%d still waiting)", len(due) - len(waiting), len(waiting)
        )

    def _still_waiting(self, due: list[DueTask]) -> set[DueTask]:
        """The tasks whose last job is still queued, not taken by a worker (a job a worker
        took, even one that it never marked started, may have died with it)."""
        redis = self.queues.resumes.connection
        job_ids = redis.mget(
            [self.store.keys.dispatched_job(task.kind.value, task.handoff_id) for task in due]
        )
        earlier = [(task, job_id) for task, job_id in zip(due, job_ids, strict=True) if job_id]
        if not earlier:
            return set()
        pipe = redis.pipeline(transaction=False)
        job_class = self.queues.resumes.job_class
        for _, job_id in earlier:
            pipe.hget(job_class.key_for(as_text(job_id)), "status")
        for queue in self.queues.distinct:
            pipe.lrange(queue.intermediate_queue_key, 0, -1)
        replies = pipe.execute()
        statuses = replies[: len(earlier)]
        taken = {job_id for listed in replies[len(earlier) :] for job_id in listed}
        return {
            task
            for (task, job_id), status in zip(earlier, statuses, strict=True)
            if status is not None and as_text(status) == JobStatus.QUEUED and job_id not in taken
        }
