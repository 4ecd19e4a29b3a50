"""The activities a workflow's requests run: create its handoff, once, and withdraw it.

Register them on the Temporal worker that runs the workflows::

    activities = HandoffActivities(Handoffs.from_env())
    Worker(client, task_queue="refunds", workflows=[Refund], activities=activities.all())

The handoff's idempotency key is made of the workflow's id and run id and the activity's
id, which Temporal keeps for every attempt of one activity: a retry (the first attempt
timed out, its worker died, its reply was lost) finds the handoff the first attempt
created instead of creating a second. The run id is part of it because activity ids are
numbered per run: a new run under the same workflow id asks anew.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from store.exceptions import AlreadyDecided, HandoffNotFound, IdempotencyConflict
from store.exceptions import InvalidHandoffRequest as _InvalidRequest
from store.models import Handoff
from worker.adapters.pauses import HandoffOptions, RequestDefaults, option_names, stable_id
from worker.adapters.temporal.delivery import METADATA_KEY, RESUME_TARGET, TemporalResume
from worker.adapters.temporal.messages import (
    CANCEL_ACTIVITY,
    CREATE_ACTIVITY,
    CancelRequest,
    HandoffRequest,
)
from worker.client import Handoffs, reject_unknown_options

logger = logging.getLogger(__name__)

CANCELLED_BY = "temporal"
"""Who withdrew a handoff whose workflow was cancelled, as the audit trail shows it."""

_MAX_RUN_ID = 256  # the store's limit on run and thread ids


class HandoffActivities:
    """The adapter's activities, on one ``Handoffs`` client (register ``all()``)."""

    def __init__(self, handoffs: Handoffs) -> None:
        self.handoffs = handoffs

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``Worker(activities=...)``."""
        return [self.create_handoff, self.cancel_handoff]

    @activity.defn(name=CREATE_ACTIVITY)
    async def create_handoff(self, request: HandoffRequest) -> str:
        """Create the handoff a workflow asked for (or find the one an earlier attempt of
        this activity created) and return its id. A request that can never be created
        (a bad channel, too large) fails the activity for good, with the reason."""
        info = activity.info()
        try:
            handoff = await asyncio.to_thread(self._create, request, info)
        except (_InvalidRequest, IdempotencyConflict, ValidationError, TypeError) as exc:
            raise ApplicationError(
                f"the handoff could not be created: {exc}",
                type=type(exc).__name__,
                non_retryable=True,
            ) from exc
        logger.info(
            "handoff %s for workflow %s (activity %s, attempt %d)",
            handoff.id,
            info.workflow_id,
            info.activity_id,
            info.attempt,
            extra={"handoff_id": handoff.id, "run_id": handoff.run_id},
        )
        return handoff.id

    @activity.defn(name=CANCEL_ACTIVITY)
    async def cancel_handoff(self, request: CancelRequest) -> None:
        """Withdraw a workflow's pending handoff; one decided already stays decided."""
        try:
            await asyncio.to_thread(
                self.handoffs.cancel,
                request.handoff_id,
                reason=request.reason,
                by=CANCELLED_BY,
                resume=False,  # the workflow that would receive it is the one cancelling
            )
        except (AlreadyDecided, HandoffNotFound) as exc:
            logger.info("handoff %s not cancelled: %s", request.handoff_id, exc)

    def _create(self, request: HandoffRequest, info: activity.Info) -> Handoff:
        workflow_id = info.workflow_id or ""
        run_id = info.workflow_run_id or ""
        namespace = info.workflow_namespace or info.namespace
        reject_unknown_options(CREATE_ACTIVITY, request.options, option_names(HandoffOptions))
        defaults = RequestDefaults.build(**request.options)
        resume = TemporalResume(
            namespace=self.handoffs.store.keys.namespace,
            temporal_namespace=namespace,
            workflow_id=workflow_id,
            workflow_run_id=run_id,
            workflow_type=info.workflow_type or "",
            delivery=request.delivery,
        )
        what = "an approval" if request.kind == "approval" else "an answer"
        options = defaults.options(
            context=f"Temporal workflow {resume.workflow_type} ({workflow_id}) waits for {what}.",
            idempotency_key=stable_id("tmp", namespace, workflow_id, run_id, info.activity_id),
            resume=RESUME_TARGET,
            metadata={METADATA_KEY: resume.model_dump(mode="json")},
        )
        run = workflow_id if len(workflow_id) <= _MAX_RUN_ID else stable_id("wf", workflow_id)
        if request.kind == "question":
            return self.handoffs.ask(
                run_id=run,
                thread_id=run,
                question=request.question or "",
                choices=request.choices,
                **options,
            )
        return self.handoffs.request_approval(
            run_id=run,
            thread_id=run,
            action=request.action or "",
            args=request.args,
            args_schema=request.args_schema,
            description=request.description,
            **options,
        )


__all__ = ["CANCELLED_BY", "HandoffActivities"]
