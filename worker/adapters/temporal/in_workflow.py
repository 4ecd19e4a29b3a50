"""The workflow side: ``decision = await request_approval(...)`` in a Temporal workflow.

Each request runs the ``CREATE_ACTIVITY`` (``HandoffActivities.create_handoff``, registered
on the workflow's Temporal worker), which creates the handoff under an idempotency key made
of the workflow's and the activity's ids, and then waits, durably, for the decision that a
`handoff worker` delivers as the ``DECISION_UPDATE`` (or ``DECISION_SIGNAL``). The first
request registers both handlers, on one ``_Inbox`` per workflow run: they are there before
the handoff exists, so before its decision can be sent.

Everything here is deterministic: it calls only Temporal's workflow API, reads no clock,
no environment and no Redis, and keeps its state on the handlers of the running workflow,
never in the module. Import it passed through the sandbox::

    with workflow.unsafe.imports_passed_through():
        from worker.adapters.temporal import request_approval
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Unpack

from temporalio import workflow

from worker.adapters.pauses import HandoffOptions, RequestDefaults, option_names
from worker.adapters.temporal.messages import (
    CANCEL_ACTIVITY,
    CREATE_ACTIVITY,
    DECISION_SIGNAL,
    DECISION_UPDATE,
    DELIVERIES,
    CancelRequest,
    Decision,
    Delivery,
    HandoffRequest,
)
from worker.client import reject_unknown_options

ACTIVITY_TIMEOUT = timedelta(seconds=30)
"""Longest one attempt of the create and cancel activities may take (a Redis round trip or
two); Temporal retries an attempt past it, and the idempotency key makes that harmless."""

CANCELLED_REASON = "The workflow was cancelled while waiting for this decision."


class _Inbox:
    """The decisions a workflow run has received, by handoff id; the first for each id is
    kept and any repeat ignored (a signal sent again, an update then its fallback)."""

    def __init__(self) -> None:
        self.decisions: dict[str, Decision] = {}

    def receive(self, payload: dict[str, Any]) -> str:
        """The update handler: keep the decision, say whether it was new."""
        decision = Decision.from_payload(payload)
        if decision.handoff_id in self.decisions:
            return "duplicate"
        self.decisions[decision.handoff_id] = decision
        return "received"

    def check(self, payload: dict[str, Any]) -> None:
        """The update validator: a payload that is no decision is refused before it reaches
        the workflow's history (raised in the handler, it would fail the workflow task)."""
        Decision.from_payload(payload)

    def receive_signal(self, payload: dict[str, Any]) -> None:
        """The signal handler (a signal has no result, and nobody to refuse it to)."""
        try:
            self.receive(payload)
        except (TypeError, ValueError, AttributeError) as exc:
            workflow.logger.warning(
                "ignored a %s signal that is no decision: %s", DECISION_SIGNAL, exc
            )


def _inbox() -> _Inbox:
    """This run's inbox, registering its handlers the first time."""
    handler = workflow.get_update_handler(DECISION_UPDATE)
    inbox = getattr(handler, "__self__", None)
    if isinstance(inbox, _Inbox):
        return inbox
    inbox = _Inbox()
    workflow.set_update_handler(DECISION_UPDATE, inbox.receive, validator=inbox.check)
    # Signals sent before this (the resume's fallback when an update found no handler)
    # were kept by Temporal and are handed to this handler now.
    workflow.set_signal_handler(DECISION_SIGNAL, inbox.receive_signal)
    return inbox


async def request_approval(
    action: str,
    args: Mapping[str, Any] | None = None,
    *,
    description: str | None = None,
    args_schema: Mapping[str, Any] | None = None,
    delivery: Delivery = "update",
    **options: Unpack[HandoffOptions],
) -> Decision:
    """Ask a person to approve ``action`` with ``args`` and wait for the decision.

    Returns the ``Decision``: ``decision.approved`` and ``decision.args`` (with the
    reviewer's edits), or why not (``decision.status``, ``decision.message``). ``options``
    are ``HandoffOptions`` (channel, reviewers, agent_name, requester, expires_in,
    context); ``delivery`` is how the decision reaches the workflow (``"update"``, or
    ``"signal"`` when the workflow's worker may be down for longer than the resume's
    retries last).

    Example::

        decision = await request_approval(
            "issue_refund", {"order_id": "A-1001", "amount_usd": 30}, channel="C0123ABCD"
        )
        if decision.approved:
            await workflow.execute_activity(issue_refund, decision.args, ...)
    """
    request = HandoffRequest(
        kind="approval",
        action=action,
        args=dict(args or {}),
        description=description,
        args_schema=dict(args_schema) if args_schema is not None else None,
        options=_checked_options("request_approval", options),
        delivery=_checked_delivery(delivery),
    )
    return await wait_for_decision(await _create(request))


async def ask_human(
    question: str,
    *,
    choices: Sequence[str] | None = None,
    delivery: Delivery = "update",
    **options: Unpack[HandoffOptions],
) -> Decision:
    """Ask a person ``question`` (optionally offering ``choices``) and wait for the answer:
    ``decision.answered`` and ``decision.answer``, or why not. Options as for
    ``request_approval``."""
    if isinstance(choices, str):
        raise TypeError("choices must be a list of answers, not one string")
    request = HandoffRequest(
        kind="question",
        question=question,
        choices=list(choices) if choices else None,
        options=_checked_options("ask_human", options),
        delivery=_checked_delivery(delivery),
    )
    return await wait_for_decision(await _create(request))


async def wait_for_decision(handoff_id: str) -> Decision:
    """Wait for the decision about ``handoff_id`` (the second half of ``request_approval``,
    for a handoff created by running the ``CREATE_ACTIVITY`` yourself). A decision that
    came before the wait is returned at once.

    If the workflow is cancelled while it waits (or while the handoff is being created),
    the handoff is withdrawn before the cancellation goes on.
    """
    inbox = _inbox()
    try:
        await workflow.wait_condition(lambda: handoff_id in inbox.decisions)
    except asyncio.CancelledError:
        await _withdraw(handoff_id)
        raise
    return inbox.decisions[handoff_id]


async def _create(request: HandoffRequest) -> str:
    _inbox()  # the handlers exist before the handoff does
    creating = workflow.start_activity(
        CREATE_ACTIVITY, request, start_to_close_timeout=ACTIVITY_TIMEOUT, result_type=str
    )
    try:
        # Shielded: a cancellation must not leave behind a handoff created by an attempt
        # whose result the workflow stopped waiting for.
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        await _withdraw(await creating)
        raise


async def _withdraw(handoff_id: str) -> None:
    """Cancel the handoff of a workflow being cancelled: Slack shows it withdrawn, and
    nobody decides for a run that is gone."""
    await workflow.execute_activity(
        CANCEL_ACTIVITY,
        CancelRequest(handoff_id=handoff_id, reason=CANCELLED_REASON),
        start_to_close_timeout=ACTIVITY_TIMEOUT,
    )


def _checked_options(where: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options by name (JSON for the activity), refused here when unknown (a misspelt
    ``reviewers`` must not open the request to everyone) or when the channel or a reviewer
    is no Slack id: the workflow task fails with the reason, before anything is asked."""
    reject_unknown_options(where, options, option_names(HandoffOptions))
    RequestDefaults.build(**options)  # pure checks: deterministic
    checked = dict(options)
    expires_in = checked.get("expires_in")
    if isinstance(expires_in, timedelta):
        checked["expires_in"] = expires_in.total_seconds()
    if "reviewers" in checked:
        checked["reviewers"] = list(checked["reviewers"])
    return checked


def _checked_delivery(delivery: str) -> Delivery:
    if delivery not in DELIVERIES:
        raise ValueError(f"delivery must be one of {', '.join(DELIVERIES)}, not {delivery!r}")
    return delivery  # type: ignore[return-value]


__all__ = ["ACTIVITY_TIMEOUT", "ask_human", "request_approval", "wait_for_decision"]
