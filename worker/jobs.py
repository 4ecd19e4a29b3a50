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
from redis.exceptions import RedisError
from rq import get_current_job
from rq.timeouts import JobTimeoutException

from store import defaults
from store.approved_action import check_approved_action
from store.exceptions import ActionDigestMismatch
from store.lua import ReplicaAcks
from store.models import Handoff, PostWindow, TaskKind
from store.repository import UNCHANGED, HandoffStore, StoreConfig, TaskStart
from worker import metrics
from worker.killable import AttemptFailed, AttemptTimedOut, KillableProcess, TargetRaised
from worker.notifier import Attempt, DeliveryFailed, LoggingNotifier, Notifier, Undeliverable
from worker.resume_targets import ResumeTargetRefused, call_target, resolve_target
from worker.tracing import attached, current_trace_context, flush_forked, span
from worker.webhooks import WebhookConfig, send_callback

logger = logging.getLogger(__name__)

_notifier: Notifier = LoggingNotifier()
_webhooks = WebhookConfig()
_store_redis: Redis | None = None
_replica_acks = ReplicaAcks()


def configure(
    *,
    notifier: Notifier | None = None,
    webhooks: WebhookConfig | None = None,
    store_redis: Redis | None = None,
    replica_acks: ReplicaAcks | None = None,
) -> None:
    """Set the notifier delivery jobs use, and how callbacks are sent, in this process (and
    the work horses it forks); ``store_redis``: the store's client when it is not RQ's own
    connection (``HANDOFF_QUEUE_REDIS_URL``); ``replica_acks``: the replicas a task's start
    and end wait for (``HANDOFF_MIN_REPLICA_ACKS``)."""
    global _notifier, _webhooks, _store_redis, _replica_acks
    if notifier is not None:
        _notifier = notifier
    if webhooks is not None:
        _webhooks = webhooks
    if store_redis is not None:
        _store_redis = store_redis
    if replica_acks is not None:
        _replica_acks = replica_acks


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
        try:
            # Whatever resumes it, an approval runs only as approved: stored arguments
            # changed after the decision are refused here, loudly and for good.
            check_approved_action(handoff)
        except ActionDigestMismatch as exc:
            detail = {"approved": exc.approved, "running": exc.running}
            store.record_audit(handoff.id, "action_refused", actor="worker", detail=detail)
            logger.error("%s", exc, extra={"handoff_id": handoff.id})
            raise
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
            # The target runs in this span (handoff.resume), else in the agent's trace.
            "trace_context": current_trace_context() or handoff.trace_context,
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
    target = resolve_target(request["target"])  # the agent's module may load OpenTelemetry
    try:
        with attached(request.get("trace_context")):
            call_target(target, handoff, attempt=request["attempt"])
    finally:
        flush_forked()


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


SPAN_NAMES = {
    TaskKind.DELIVER: "handoff.deliver",
    TaskKind.RESUME: "handoff.resume",
    TaskKind.NOTIFY: "handoff.update",
    TaskKind.REMIND: "handoff.remind",
    TaskKind.ESCALATE: "handoff.escalate",
}
"""The span each task runs in (``worker.tracing``): a child of the agent's stored trace."""


def _run_task(
    namespace: str,
    handoff_id: str,
    kind: TaskKind,
    work: Callable[[HandoffStore, Handoff, Attempt], dict[str, Any] | None],
) -> str:
    store = HandoffStore(
        _connection(), StoreConfig(namespace=namespace, replica_acks=_replica_acks)
    )
    start = store.begin_task(handoff_id, kind, run_token=uuid.uuid4().hex)
    if start.action != "run" or start.handoff is None:
        logger.info("%s of %s skipped: %s", kind.value, handoff_id, start.action)
        return start.action
    attempt = Attempt(start.attempt, start.started_at, start.unanswered)
    context = {"handoff_id": handoff_id, "run_id": start.handoff.run_id, "attempt": start.attempt}
    try:
        with span(
            SPAN_NAMES[kind],
            start.handoff.trace_context,
            {
                "handoff.id": handoff_id,
                "handoff.run_id": start.handoff.run_id,
                "handoff.request_type": start.handoff.request_type.value,
                "handoff.attempt": start.attempt,
            },
        ):
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
        if outcome == "deferred":
            metrics.count_retry_wait("deferred", exc.retry_after or 0.0)
    except Exception as exc:
        # No retry can help: Slack refused the message for good (Undeliverable), the
        # resume target is not one this worker may import (ResumeTargetRefused), or the
        # approved action is not the one stored now (ActionDigestMismatch).
        permanent = isinstance(exc, Undeliverable | ResumeTargetRefused | ActionDigestMismatch)
        error = str(exc) if permanent else f"{type(exc).__name__}: {exc}"
        logger.warning("%s attempt failed: %s", kind.value, error, extra=context)
        logger.debug("%s", traceback.format_exc())
        if isinstance(exc, RedisError):
            metrics.count_redis_error("worker")
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
        event = f"{kind.value}_{outcome}"
        logger.info("%s %s", kind.value, outcome, extra={**context, "event": event})
    metrics.count_task(kind.value, outcome, start.attempt)
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
    if _store_redis is not None:
        return _store_redis
    job = get_current_job()
    if job is None:
        raise RuntimeError("run_delivery and run_resume run inside an RQ worker")
    return job.connection
