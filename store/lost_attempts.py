"""Resumes whose last attempt never reported how it ended.

An attempt is fenced out when its lease lapses before it records its outcome: its worker
died, or could not reach Redis until the next attempt had begun. When that was the last
attempt allowed, the next job marks the resume failed (``BEGIN_TASK``, with
``LOST_ATTEMPT_ERROR``) and a late report from the old attempt is ``stale`` and changes
nothing. The target may well have run to completion: a retry calls it again, with the same
idempotency key, so ``handoff retry`` and ``/handoff retry`` say so (``retry_warning``).
Such a resume is failed like any other: its handoff is kept until it is retried and
completes, or until it has been failed for the retention period (``PURGE_DECIDED``).
"""

from __future__ import annotations

from store.models import TaskProgress, TaskState

LOST_ATTEMPT_ERROR = "never finished (worker lost?) and no attempts remain"
"""The end of the error ``BEGIN_TASK`` records for a resume whose last attempt was lost."""


def last_attempt_lost(task: TaskProgress) -> bool:
    """The task failed because its last attempt never reported an outcome."""
    return task.state is TaskState.FAILED and LOST_ATTEMPT_ERROR in (task.last_error or "")


def retry_warning(task: TaskProgress) -> str | None:
    """What to tell whoever retries a resume whose last attempt was lost, else None."""
    if not last_attempt_lost(task):
        return None
    return (
        f"Its last attempt ({task.attempt}) never reported how it ended (its worker was lost, "
        "or could not reach Redis before its lease lapsed), so the resume target may have "
        "run to completion already: it is called again, with the same idempotency key."
    )
