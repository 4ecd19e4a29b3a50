"""The RQ jobs: deliver a handoff, and resume its run once decided.

Both follow the same protocol: take a lease on the task in the store (``begin_task``), do
the work, then record the outcome (``finish_task``) under the attempt number, which acts
as a fencing token. A duplicate job (RQ retry, re-dispatch after a lost worker, a double
enqueue) finds the task completed or leased and does nothing, so a completed delivery or
resume is never repeated and two attempts never run at once.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from redis import Redis
from rq import get_current_job

from store.models import Handoff, TaskKind
from store.repository import HandoffStore, StoreConfig
from worker.notifier import LoggingNotifier, Notifier
from worker.resume_targets import call_target, resolve_target

logger = logging.getLogger(__name__)

_notifier: Notifier = LoggingNotifier()


def configure(*, notifier: Notifier) -> None:
    """Set the notifier delivery jobs use in this process (and the work horses it forks)."""
    global _notifier
    _notifier = notifier


def run_delivery(namespace: str, handoff_id: str) -> str:
    """RQ job: show the handoff to people through the configured notifier."""

    def deliver(store: HandoffStore, handoff: Handoff, attempt: int) -> dict[str, Any] | None:
        refs = _notifier.deliver(handoff, attempt=attempt)
        if refs.get("channel") and refs.get("ts"):
            store.link_message(handoff.id, str(refs["channel"]), str(refs["ts"]))
        return refs

    return _run_task(namespace, handoff_id, TaskKind.DELIVER, deliver)


def run_resume(namespace: str, handoff_id: str) -> str:
    """RQ job: call the handoff's resume target with the decided handoff."""

    def resume(store: HandoffStore, handoff: Handoff, attempt: int) -> dict[str, Any] | None:
        call_target(resolve_target(handoff.resume_target or ""), handoff, attempt=attempt)
        return None

    return _run_task(namespace, handoff_id, TaskKind.RESUME, resume)


def run_notify(namespace: str, handoff_id: str) -> str:
    """RQ job: show a claim or a decision on the posted message."""

    def notify(store: HandoffStore, handoff: Handoff, attempt: int) -> dict[str, Any] | None:
        return _notifier.update(handoff)

    return _run_task(namespace, handoff_id, TaskKind.NOTIFY, notify)


def run_remind(namespace: str, handoff_id: str) -> str:
    """RQ job: remind the reviewers of a handoff that is still pending."""

    def remind(store: HandoffStore, handoff: Handoff, attempt: int) -> dict[str, Any] | None:
        _notifier.remind(handoff)
        return None

    return _run_task(namespace, handoff_id, TaskKind.REMIND, remind)


def run_escalate(namespace: str, handoff_id: str) -> str:
    """RQ job: show a still-pending handoff to its escalation channel or group too."""

    def escalate(store: HandoffStore, handoff: Handoff, attempt: int) -> dict[str, Any] | None:
        refs = _notifier.escalate(handoff, attempt=attempt)
        for copy in (refs or {}).get("copies", []):
            store.link_message(handoff.id, str(copy["channel"]), str(copy["ts"]))
        return refs

    return _run_task(namespace, handoff_id, TaskKind.ESCALATE, escalate)


def _run_task(
    namespace: str,
    handoff_id: str,
    kind: TaskKind,
    work: Callable[[HandoffStore, Handoff, int], dict[str, Any] | None],
) -> str:
    store = HandoffStore(_connection(), StoreConfig(namespace=namespace))
    start = store.begin_task(handoff_id, kind, run_token=uuid.uuid4().hex)
    if start.action != "run" or start.handoff is None:
        logger.info("%s of %s skipped: %s", kind.value, handoff_id, start.action)
        return start.action
    context = {"handoff_id": handoff_id, "run_id": start.handoff.run_id, "attempt": start.attempt}
    try:
        refs = work(store, start.handoff, start.attempt)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("%s attempt failed: %s", kind.value, error, extra=context)
        logger.debug("%s", traceback.format_exc())
        outcome = store.finish_task(handoff_id, kind, attempt=start.attempt, error=error)
    else:
        outcome = store.finish_task(handoff_id, kind, attempt=start.attempt, message_refs=refs)
        logger.info("%s %s", kind.value, outcome, extra=context)
    return outcome


def _connection() -> Redis:
    job = get_current_job()
    if job is None:
        raise RuntimeError("run_delivery and run_resume run inside an RQ worker")
    return job.connection
