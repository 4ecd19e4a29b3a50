"""The worker side: the resume target that hands a decided handoff to its workflow.

A `handoff worker` calls ``deliver_decision`` once per decided handoff (the store and the
resume job see to that). It sends the decision to the workflow run that asked, as the
``DECISION_UPDATE`` with the handoff id as the update id: a repeat after a worker died
mid-way (the resume's next attempt) is the same update to Temporal, which runs it once and
answers the repeat with the first result. With ``delivery="signal"`` it is sent as the
``DECISION_SIGNAL``, which Temporal records even while no worker of the workflow runs; the
workflow keeps the first decision per handoff and ignores a repeat.

What the resume does when the decision cannot be delivered as asked:

- the workflow has no update handler (it never waited for a decision yet): sent as the
  signal instead, which Temporal keeps until the workflow registers its handler;
- the workflow run has finished, was cancelled, terminated or is gone: nothing can take
  the decision, so the resume ends (audited ``temporal_not_delivered``; never retried);
- Temporal cannot be reached, or the workflow does not take the update in time (no
  worker polls its task queue): the attempt fails and the resume job retries it, with
  backoff; after the last attempt it is failed (``handoff failed``; ``handoff retry``).

The worker's connection to Temporal is configured by its environment
(``TemporalSettings``: ``HANDOFF_TEMPORAL_ADDRESS``, ``HANDOFF_TEMPORAL_API_KEY``,
``HANDOFF_TEMPORAL_TLS``, ``HANDOFF_TEMPORAL_UPDATE_TIMEOUT_SECONDS``), never by what
Redis holds; the Temporal namespace is the workflow's, kept with the handoff.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, ClassVar

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from store.exceptions import ConfigurationError, HandoffError
from store.models import ApprovalPayload, Handoff
from worker.adapters.pauses import AdapterMetadata, decision_note, worker_handoffs
from worker.adapters.temporal.messages import (
    DECISION_SIGNAL,
    DECISION_UPDATE,
    Decision,
    Delivery,
)
from worker.client import Handoffs

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.temporal:deliver_decision"
"""The resume target of every handoff the adapter creates."""

METADATA_KEY = "temporal"
"""Where in a handoff's metadata the adapter keeps the workflow that asked."""

NOT_DELIVERED_EVENT = "temporal_not_delivered"
"""Audit event of a decision that no workflow could take (the run had ended)."""


class TemporalResume(AdapterMetadata):
    """The workflow run a handoff answers, kept in ``metadata["temporal"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    namespace: str
    """The handoff store's namespace (for the audit event)."""
    temporal_namespace: str
    workflow_id: str
    workflow_run_id: str
    workflow_type: str
    delivery: Delivery = "update"


class TemporalSettings(BaseSettings):
    """How a worker reaches Temporal, from its environment (and ``.env``)."""

    model_config = SettingsConfigDict(
        env_prefix="HANDOFF_TEMPORAL_", env_file=".env", extra="ignore", hide_input_in_errors=True
    )

    address: str = "localhost:7233"
    """``host:port`` of the Temporal frontend (Temporal Cloud: ``<ns>.<acct>.tmprl.cloud:7233``)."""
    api_key: str | None = None
    """API key sent as a bearer token (Temporal Cloud); turns TLS on unless TLS says no."""
    tls: bool | None = None
    """Use TLS; unset: only with an API key."""
    update_timeout_seconds: float = Field(default=60.0, gt=0)
    """Longest wait for the workflow to take an update before the attempt fails (and is
    retried): keep it under the resume timeout so a down Temporal worker does not hold a
    resume worker for the whole attempt."""

    @classmethod
    def from_env(cls) -> TemporalSettings:
        """The settings, or ``ConfigurationError`` naming each bad variable."""
        try:
            return cls()
        except ValidationError as exc:
            bad = ", ".join(
                f"HANDOFF_TEMPORAL_{str(error['loc'][0]).upper()}: {error['msg']}"
                for error in exc.errors()
            )
            raise ConfigurationError(f"bad Temporal setting {bad}") from None


@functools.cache
def _worker_settings() -> TemporalSettings:
    """This process's settings, read once (a worker's environment does not change)."""
    return TemporalSettings.from_env()


class TemporalUnavailable(HandoffError):
    """Temporal could not be reached, or the workflow did not take the decision in time:
    the resume attempt fails and is retried."""


_clients: dict[tuple[str, str, str | None, bool | None], Client] = {}


async def temporal_client(settings: TemporalSettings, namespace: str) -> Client:
    """A client of ``namespace``, connected once per process and kept (resumes come one
    after the other in a worker's resume process)."""
    key = (settings.address, namespace, settings.api_key, settings.tls)
    if key not in _clients:
        try:
            _clients[key] = await Client.connect(
                settings.address, namespace=namespace, api_key=settings.api_key, tls=settings.tls
            )
        except RuntimeError as exc:  # the SDK's "Failed client connect: ..."
            raise TemporalUnavailable(
                f"cannot reach Temporal at {settings.address} ({exc}); the resume is retried; "
                "check HANDOFF_TEMPORAL_ADDRESS in the worker's environment"
            ) from exc
    return _clients[key]


def decision_of(handoff: Handoff) -> Decision:
    """The decision a workflow receives for a decided handoff."""
    data = handoff.resume_data
    args = None
    edited = False
    if isinstance(handoff.payload, ApprovalPayload):
        args = dict(handoff.payload.action.args)
        if handoff.status.value == "approved" and data is not None and data.edited_args:
            merged = {**args, **data.edited_args}
            edited, args = merged != args, merged
    return Decision(
        handoff_id=handoff.id,
        status=handoff.status.value,
        decided_by=data.decided_by if data else None,
        args=args,
        edited=edited,
        answer=data.answer if data else None,
        answer_data=data.answer_data if data else None,
        message=decision_note(handoff) or (data.comment if data else None),
    )


async def deliver_decision(
    handoff: Handoff,
    *,
    attempt: int = 1,
    handoffs: Handoffs | None = None,
    settings: TemporalSettings | None = None,
) -> str:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``): hand the
    decision to the workflow run that asked. Returns what became of it: ``"delivered"``
    (the workflow took the update), ``"signalled"``, or ``"not delivered"`` (the run had
    ended; audited). Raises ``TemporalUnavailable`` for the resume job to retry.

    ``handoffs`` (for the audit event) and ``settings`` default to the worker's
    environment; tests and benchmarks pass their own.
    """
    resume = TemporalResume.of(handoff)
    settings = settings or _worker_settings()
    client = await temporal_client(settings, resume.temporal_namespace)
    handle = client.get_workflow_handle(resume.workflow_id, run_id=resume.workflow_run_id)
    payload = decision_of(handoff).to_payload()
    context = {"handoff_id": handoff.id, "run_id": handoff.run_id, "attempt": attempt}
    try:
        if resume.delivery == "signal":
            await _bounded(handle.signal(DECISION_SIGNAL, payload), settings, resume)
            outcome = "signalled"
        else:
            outcome = await _update(handle, payload, handoff.id, settings, resume)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise TemporalUnavailable(
                f"Temporal refused the decision for workflow {resume.workflow_id}: {exc}"
            ) from exc
        # Finished, cancelled, terminated or deleted: no retry can deliver it.
        logger.warning(
            "workflow %s (run %s) cannot take the decision: %s",
            resume.workflow_id,
            resume.workflow_run_id,
            exc.message,
            extra=context,
        )
        detail = {"workflow_id": resume.workflow_id, "reason": exc.message}
        (handoffs or worker_handoffs(resume.namespace)).store.record_audit(
            handoff.id, NOT_DELIVERED_EVENT, actor="worker", detail=detail
        )
        return "not delivered"
    logger.info("decision %s to workflow %s", outcome, resume.workflow_id, extra=context)
    return outcome


async def _update(
    handle: WorkflowHandle[Any, Any],
    payload: dict[str, Any],
    handoff_id: str,
    settings: TemporalSettings,
    resume: TemporalResume,
) -> str:
    try:
        await _bounded(
            handle.execute_update(DECISION_UPDATE, payload, id=handoff_id, result_type=str),
            settings,
            resume,
        )
    except WorkflowUpdateFailedError as exc:
        # The adapter's handler takes every decision, so a refusal means the run has no
        # handler yet. A signal waits in the run's history until it registers one.
        logger.info(
            "workflow %s refused the update (%s); sending the decision as a signal",
            resume.workflow_id,
            exc.cause,
            extra={"handoff_id": handoff_id},
        )
        await _bounded(handle.signal(DECISION_SIGNAL, payload), settings, resume)
        return "signalled"
    return "delivered"


async def _bounded(call: Any, settings: TemporalSettings, resume: TemporalResume) -> Any:
    """Await a client call for at most the update timeout: the SDK retries an update
    until the workflow takes it, however long no worker polls for it."""
    try:
        return await asyncio.wait_for(call, settings.update_timeout_seconds)
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
        raise TemporalUnavailable(
            f"workflow {resume.workflow_id} did not take the decision within "
            f"{settings.update_timeout_seconds:g} s (is a Temporal worker polling its task "
            f"queue? is Temporal at {settings.address} up?); the resume is retried"
        ) from exc


__all__ = [
    "METADATA_KEY",
    "NOT_DELIVERED_EVENT",
    "RESUME_TARGET",
    "TemporalResume",
    "TemporalSettings",
    "TemporalUnavailable",
    "decision_of",
    "deliver_decision",
    "temporal_client",
]
