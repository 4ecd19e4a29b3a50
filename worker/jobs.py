"""The RQ jobs: deliver a handoff, and resume its run once decided.

Both follow the same protocol: take a lease on the task in the store (``begin_task``), do
the work, then record the outcome (``finish_task``) under the attempt number, which acts
as a fencing token. A duplicate job (RQ retry, re-dispatch after a lost worker, a double
enqueue) finds the task completed or leased and does nothing, so a completed delivery or
resume is never repeated and two attempts never run at once.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from collections.abc import Callable
from typing import Any, Literal

from redis import Redis
from rq import get_current_job
from rq.timeouts import JobTimeoutException

from store import defaults
from store.models import Handoff, PostWindow, TaskKind
from store.repository import UNCHANGED, HandoffStore, StoreConfig, TaskStart
from worker.killable import AttemptFailed, AttemptTimedOut, KillableProcess, TargetRaised
from worker.notifier import Attempt, DeliveryFailed, LoggingNotifier, Notifier, Undeliverable
from worker.resume_targets import ResumeTargetRefused, call_target, resolve_target
from worker.webhooks import WebhookConfig, send_callback

logger = logging.getLogger(__name__)

_notifier: Notifier = LoggingNotifier()
_webhooks = WebhookConfig()


def configure(*, notifier: Notifier | None = None, webhooks: WebhookConfig | None = None) -> None:
    """Set the notifier delivery jobs use, and how callbacks are sent, in this process (and
    the work horses it forks)."""
    global _notifier, _webhooks
    if notifier is not None:
        _notifier = notifier
    if webhooks is not None:
        _webhooks = webhooks


def run_delivery(namespace: str, handoff_id: str) -> str:
    """RQ job: show the handoff to people through the configured notifier."""

    def deliver(store: HandoffStore, handoff: Handoff, attempt: Attempt) -> dict[str, Any] | None:
        refs = _notifier.deliver(handoff, attempt=attempt)
        if refs.get("channel") and refs.get("ts"):
            store.link_message(handoff.id, str(refs["channel"]), str(refs["ts"]))
        return refs

    return _run_task(namespace, handoff_id, TaskKind.DELIVER, deliver)


def run_resume(namespace: str, handoff_id: str) -> str:
    """RQ job: call the handoff's resume target with the decided handoff, or POST it to its
    callback URL (``worker.webhooks``)."""

    def resume(store: HandoffStore, handoff: Handoff, attempt: Attempt) -> dict[str, Any] | None:
        if handoff.callback is not None:
            # In this process, with the webhook's own timeout (well inside the job's): no
            # agent code runs, only an HTTP request.
            status = send_callback(store, handoff, _webhooks)
            return {"callback_status": status}
        path = handoff.resume_target or ""
        # An unusable target fails here, with the reason; one outside this worker's
        # HANDOFF_RESUME_MODULES before anything of it is imported, and for good.
        resolve_target(path)
        # In the worker's resume process, killed at the job's timeout (which ends before
        # the lease lapses): a target that swallows RQ's timeout never runs next to the
        # next attempt.
        timeout = _job_timeout()
        request = {
            "target": path,
            "attempt": attempt.number,
            "handoff": handoff.model_dump(mode="json"),
        }
        try:
            _resume_process.run(json.dumps(request).encode(), timeout=timeout)
        except AttemptFailed as failed:
            if failed.details:
                logger.debug("resume target raised in its process:\n%s", failed.details)
            refused = f"{ResumeTargetRefused.__name__}: "
            if isinstance(failed, TargetRaised) and str(failed).startswith(refused):
                # An adapter's entry point refused the path it was to import (its factory,
                # the approved function): no retry can change that.
                raise ResumeTargetRefused(str(failed).removeprefix(refused)) from failed
            raise
        except JobTimeoutException as exc:  # RQ's alarm, a moment before our own deadline
            raise AttemptTimedOut(
                f"the resume target did not return within {timeout:g} s; its process was killed"
            ) from exc
        return None

    return _run_task(namespace, handoff_id, TaskKind.RESUME, resume)


def _call_resume_target(payload: bytes) -> None:
    """In the resume process: call the target a ``run_resume`` job sent."""
    request = json.loads(payload)
    handoff = Handoff.model_validate(request["handoff"])
    call_target(resolve_target(request["target"]), handoff, attempt=request["attempt"])


_resume_process = KillableProcess(_call_resume_target)
"""The process this worker (or work horse) runs its resume targets in."""


def run_notify(namespace: str, handoff_id: str) -> str:
    """RQ job: show a claim or a decision on the posted message."""

    def notify(store: HandoffStore, handoff: Handoff, attempt: Attempt) -> dict[str, Any] | None:
        return _notifier.update(handoff, attempt=attempt)

    return _run_task(namespace, handoff_id, TaskKind.NOTIFY, notify)


def run_remind(namespace: str, handoff_id: str) -> str:
    """RQ job: remind the reviewers of a handoff that is still pending."""

    def remind(store: HandoffStore, handoff: Handoff, attempt: Attempt) -> dict[str, Any] | None:
        _notifier.remind(handoff, attempt=attempt)
        return None

    return _run_task(namespace, handoff_id, TaskKind.REMIND, remind)


def run_escalate(namespace: str, handoff_id: str) -> str:
    """RQ job: show a still-pending handoff to its escalation channel or group too."""

    def escalate(store: HandoffStore, handoff: Handoff, attempt: Attempt) -> dict[str, Any] | None:
        refs = _notifier.escalate(handoff, attempt=attempt)
        for copy in (refs or {}).get("copies", []):
            store.link_message(handoff.id, str(copy["channel"]), str(copy["ts"]))
        return refs

    return _run_task(namespace, handoff_id, TaskKind.ESCALATE, escalate)


def _run_task(
    namespace: str,
    handoff_id: str,
    kind: TaskKind,
    work: Callable[[HandoffStore, Handoff, Attempt], dict[str, Any] | None],
) -> str:
    store = HandoffStore(_connection(), StoreConfig(namespace=namespace))
    start = store.begin_task(handoff_id, kind, run_token=uuid.uuid4().hex)
    if start.action != "run" or start.handoff is None:
        logger.info("%s of %s skipped: %s", kind.value, handoff_id, start.action)
        return start.action
    attempt = Attempt(start.attempt, start.started_at, start.unanswered)
    context = {"handoff_id": handoff_id, "run_id": start.handoff.run_id, "attempt": start.attempt}
    try:
        refs = work(store, start.handoff, attempt)
    except DeliveryFailed as exc:
        # The notifier says what it left: a rate limit to wait out, a post to look for.
        logger.warning("%s attempt failed: %s", kind.value, exc, extra=context)
        outcome = store.finish_task(
            handoff_id,
            kind,
            attempt=start.attempt,
            error=str(exc),
            defer_seconds=exc.retry_after or 0.0,
            unanswered=exc.unanswered,
            message_refs=exc.message_refs,
        )
    except Exception as exc:
        # No retry can help: Slack refused the message for good (Undeliverable), or the
        # resume target is not one this worker may import (ResumeTargetRefused).
        permanent = isinstance(exc, Undeliverable | ResumeTargetRefused)
        error = str(exc) if permanent else f"{type(exc).__name__}: {exc}"
        logger.warning("%s attempt failed: %s", kind.value, error, extra=context)
        logger.debug("%s", traceback.format_exc())
        outcome = store.finish_task(
            handoff_id,
            kind,
            attempt=start.attempt,
            error=error,
            permanent=permanent,
            unanswered=_may_have_posted(kind, start),
        )
    else:
        outcome = store.finish_task(handoff_id, kind, attempt=start.attempt, message_refs=refs)
        logger.info("%s %s", kind.value, outcome, extra=context)
    return outcome


def _may_have_posted(kind: TaskKind, start: TaskStart) -> PostWindow | Literal["unchanged"]:
    """After an attempt failed in a way nobody described (a bug, Redis lost after the post),
    it may have posted: the next attempt looks, from the earliest time still unaccounted for."""
    if kind is TaskKind.RESUME:
        return UNCHANGED
    earlier = start.unanswered.start if start.unanswered is not None else start.started_at
    return PostWindow(min(earlier, start.started_at), None)


def _job_timeout() -> float:
    job = get_current_job()
    timeout = job.timeout if job is not None else None
    return float(timeout) if timeout and timeout > 0 else float(defaults.RESUME_TIMEOUT_SECONDS)


def _connection() -> Redis:
    job = get_current_job()
    if job is None:
        raise RuntimeError("run_delivery and run_resume run inside an RQ worker")
    return job.connection
