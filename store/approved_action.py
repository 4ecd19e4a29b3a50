"""The check whoever executes an approved action makes first: is what is about to run what
the people approved? (``store.canonical`` says how the digest is made.)"""

from __future__ import annotations

from typing import Any

from store.canonical import action_digest
from store.exceptions import ActionDigestMismatch
from store.models import ApprovalPayload, Handoff, Status


def check_approved_action(handoff: Handoff, args: dict[str, Any] | None = None) -> None:
    """Raise ``ActionDigestMismatch`` unless the action with ``args`` (default: the
    handoff's approved arguments, as stored now) has the digest its approval recorded.

    Nothing to check for a handoff that is no approved approval, or whose decision was made
    before decisions recorded a digest."""
    decision = handoff.resume_data
    payload = handoff.payload
    if handoff.status is not Status.APPROVED or not isinstance(payload, ApprovalPayload):
        return
    if decision is None or decision.action_digest is None:
        return
    running = action_digest(
        payload.action.name, handoff.approved_args if args is None else dict(args)
    )
    if running != decision.action_digest:
        raise ActionDigestMismatch(handoff.id, decision.action_digest, running)
