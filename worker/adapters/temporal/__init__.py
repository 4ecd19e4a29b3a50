"""Temporal adapter: a workflow asks a person and waits, durably, for the decision.

Install with ``pip install 'slack-handoff[temporal]'``. In workflow code (imported passed
through the sandbox: the helpers are deterministic and keep no state of their own)::

    from temporalio import workflow

    with workflow.unsafe.imports_passed_through():
        from worker.adapters.temporal import request_approval

    @workflow.defn
    class Refund:
        @workflow.run
        async def run(self, order_id: str) -> str:
            decision = await request_approval(
                "issue_refund", {"order_id": order_id, "amount_usd": 30}, channel="C0123ABCD"
            )
            return "refunded" if decision.approved else f"not refunded: {decision.message}"

On the workflow's Temporal worker, register the activities
(``HandoffActivities(Handoffs.from_env()).all()``); run `handoff worker` with
``HANDOFF_TEMPORAL_ADDRESS`` pointing at Temporal. How it fits together:

1. ``request_approval`` / ``ask_human`` run the ``CREATE_ACTIVITY``, which creates the
   handoff once per activity, however often Temporal retries it (``activities``).
2. The workflow waits (``workflow.wait_condition``) for the decision, on update and signal
   handlers it registered before the handoff existed (``in_workflow``).
3. When the handoff is decided (or expires, or is cancelled), a `handoff worker` runs
   ``deliver_decision``: an Update whose id is the handoff id, once (``delivery``).
"""

from worker.adapters.temporal.activities import CANCELLED_BY, HandoffActivities
from worker.adapters.temporal.delivery import (
    NOT_DELIVERED_EVENT,
    RESUME_TARGET,
    TemporalResume,
    TemporalSettings,
    TemporalUnavailable,
    decision_of,
    deliver_decision,
)
from worker.adapters.temporal.in_workflow import ask_human, request_approval, wait_for_decision
from worker.adapters.temporal.messages import (
    CANCEL_ACTIVITY,
    CREATE_ACTIVITY,
    DECISION_SIGNAL,
    DECISION_UPDATE,
    CancelRequest,
    Decision,
    Delivery,
    HandoffRequest,
)

__all__ = [
    "CANCELLED_BY",
    "CANCEL_ACTIVITY",
    "CREATE_ACTIVITY",
    "DECISION_SIGNAL",
    "DECISION_UPDATE",
    "NOT_DELIVERED_EVENT",
    "RESUME_TARGET",
    "CancelRequest",
    "Decision",
    "Delivery",
    "HandoffActivities",
    "HandoffRequest",
    "TemporalResume",
    "TemporalSettings",
    "TemporalUnavailable",
    "ask_human",
    "decision_of",
    "deliver_decision",
    "request_approval",
    "wait_for_decision",
]
