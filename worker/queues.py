"""The RQ queues: resumes on one, Slack work on another.

A resume is what an agent's run waits for; posts, message updates, reminders and escalations
wait on Slack, which may be slow or rate-limited for minutes. On one queue, a worker busy
with Slack work makes a decision's resume wait behind it; so each kind of work has a queue of
its own, and `handoff worker` runs one RQ worker on each (each listening on one queue, so RQ
moves jobs with BLMOVE, atomically).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from store import defaults
from store.models import TaskKind

SLACK_TASKS = frozenset({TaskKind.DELIVER, TaskKind.NOTIFY, TaskKind.REMIND, TaskKind.ESCALATE})
"""The tasks that call Slack (through the notifier)."""


def make_queue(redis: Redis, queue_name: str = defaults.QUEUE_NAME) -> Queue:
    """An RQ queue of the project's, with the JSON serializer."""
    return Queue(queue_name, connection=redis, serializer=JSONSerializer)


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
