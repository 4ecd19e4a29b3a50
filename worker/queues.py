"""The RQ queues: resumes on one, Slack work on another.

A resume is what an agent's run waits for; posts, message updates, reminders and escalations
wait on Slack, which may be slow or rate-limited for minutes. On one queue, a worker busy
with Slack work makes a decision's resume wait behind it; so each kind of work has a queue of
its own, and `handoff worker` runs one RQ worker on each (each listening on one queue, so RQ
moves jobs with BLMOVE, atomically).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer

from store import defaults
from store.models import TaskKind

logger = logging.getLogger(__name__)

JOB_FUNCTIONS: dict[TaskKind, str] = {
    TaskKind.DELIVER: "worker.jobs.run_delivery",
    TaskKind.RESUME: "worker.jobs.run_resume",
    TaskKind.NOTIFY: "worker.jobs.run_notify",
    TaskKind.REMIND: "worker.jobs.run_remind",
    TaskKind.ESCALATE: "worker.jobs.run_escalate",
}
"""The function each task's RQ job calls; the only functions the workers call."""


class UnknownJobFunction(Exception):
    """An RQ job names a function the workers do not run."""


class ProjectJob(Job):
    """An RQ job that calls only the project's job functions.

    RQ imports and calls whatever function a job record names, and its callbacks' too; a
    job record is a Redis hash, so whoever can write to Redis could have a worker call
    ``os.system``. This job class refuses every function but ``JOB_FUNCTIONS`` (the job
    fails, nothing is imported) and ignores callbacks and RQ webhooks (the project sets
    none).
    """

    @property
    def func(self) -> Any:
        name = self.func_name
        if name not in _ALLOWED or self.instance is not None:
            raise UnknownJobFunction(
                f"job {self.id} names {name!r}, which is not one of the project's job "
                "functions; refused (only worker.jobs.run_* are run)"
            )
        return super().func

    @property
    def success_callback(self) -> None:
        return self._refused_callback(self._success_callback_name)

    @property
    def failure_callback(self) -> None:
        return self._refused_callback(self._failure_callback_name)

    @property
    def stopped_callback(self) -> None:
        return self._refused_callback(self._stopped_callback_name)

    def send_webhooks(self, status: Any, *, exc_string: str | None = None) -> None:
        # RQ's own job webhooks (URL, method and headers from the record) would have the
        # worker call any address with its traceback: the project registers none.
        if self.webhooks:
            logger.warning("job %s names %d webhooks; ignored", self.id, len(self.webhooks))

    def _refused_callback(self, name: str | None) -> None:
        if name:
            logger.warning("job %s names a callback %r; ignored", self.id, name)


_ALLOWED = frozenset(JOB_FUNCTIONS.values())

SLACK_TASKS = frozenset({TaskKind.DELIVER, TaskKind.NOTIFY, TaskKind.REMIND, TaskKind.ESCALATE})
"""The tasks that call Slack (through the notifier)."""


def make_queue(redis: Redis, queue_name: str = defaults.QUEUE_NAME) -> Queue:
    """An RQ queue of the project's, with the JSON serializer."""
    return Queue(queue_name, connection=redis, serializer=JSONSerializer, job_class=ProjectJob)


def slack_queue_name(queue_name: str = defaults.QUEUE_NAME) -> str:
    """The name of the queue of Slack work beside the resume queue ``queue_name``."""
    return queue_name + defaults.SLACK_QUEUE_SUFFIX


@dataclass(frozen=True)
class TaskQueues:
    """Where each task's job goes: resumes to ``resumes``, Slack work to ``slack``.

    Example::

        queues = TaskQueues.named(redis, "handoff")   # "handoff" and "handoff-slack"
        queues.for_kind(TaskKind.RESUME).name          # "handoff"
    """

    resumes: Queue
    slack: Queue

    @classmethod
    def named(cls, redis: Redis, queue_name: str = defaults.QUEUE_NAME) -> TaskQueues:
        """The resume queue ``queue_name`` and its Slack queue."""
        return cls(make_queue(redis, queue_name), make_queue(redis, slack_queue_name(queue_name)))

    @classmethod
    def single(cls, queue: Queue) -> TaskQueues:
        """Every task on one queue (one worker then serves both kinds of work in turn)."""
        return cls(queue, queue)

    def for_kind(self, kind: TaskKind) -> Queue:
        """The queue a task of ``kind`` is enqueued on."""
        return self.slack if kind in SLACK_TASKS else self.resumes

    @property
    def distinct(self) -> list[Queue]:
        """Each queue once."""
        return (
            [self.resumes] if self.slack.name == self.resumes.name else [self.resumes, self.slack]
        )
