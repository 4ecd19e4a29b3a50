"""What a CrewAI feedback request becomes in Slack, and what a decision becomes for the flow.

A ``@human_feedback`` step shows a person its method's output and a message, and reads back
free text; with ``emit=[...]`` CrewAI maps that text to one of the outcomes (with an LLM) and
routes the flow by it. In Slack the person clicks instead, so the outcome is known:

- ``emit`` is an approve-like and a reject-like outcome (``["approved", "rejected"]``): an
  **approval** of the output when it is a JSON object (a dict, a Pydantic model; its fields
  can be edited), a **correction** when it is text (the text can be edited);
- any other ``emit``: a **question** offering the outcomes as choices (nobody answering takes
  the reject-like outcome, else ``default_outcome``; the provider refuses a step with neither);
- no ``emit``: a **question** whose answer is the feedback.

This module knows nothing of CrewAI's classes: it reads plain values and decided handoffs.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from store.models import CorrectionPayload, Handoff, Status
from worker.adapters.pauses import decision_note, edited_args, refusal_message

APPROVE_WORDS = frozenset({"approve", "approved", "accept", "accepted", "yes"})
"""Outcomes that mean "go ahead" (compared without case)."""

REJECT_WORDS = frozenset({"reject", "rejected", "decline", "declined", "deny", "denied", "no"})
"""Outcomes that mean "no" (compared without case)."""


class FeedbackShape(StrEnum):
    """The kind of handoff a feedback request becomes."""

    APPROVAL = "approval"  # approve/reject outcomes, a JSON object: approve, edit, reject
    CORRECTION = "correction"  # approve/reject outcomes, a text: approve, edit, reject
    CHOICE = "choice"  # other outcomes: a question offering them
    TEXT = "text"  # no outcomes: a question whose answer is the feedback


class FeedbackRequest(BaseModel):
    """How one feedback request is asked, kept with its handoff for the worker."""

    shape: FeedbackShape
    outcomes: list[str] = Field(default_factory=list)
    approve: str | None = None
    """The approve-like outcome of ``outcomes``, if exactly one is."""
    reject: str | None = None
    """The reject-like outcome of ``outcomes``, if exactly one is: where a refusal goes."""
    default_outcome: str | None = None

    @classmethod
    def of(
        cls, emit: list[str] | None, default_outcome: str | None, output: Any
    ) -> FeedbackRequest:
        """The request for a step with these ``emit`` outcomes, reviewing ``output``."""
        outcomes = list(emit or [])
        approve = _only(outcomes, APPROVE_WORDS)
        reject = _only(outcomes, REJECT_WORDS)
        if not outcomes:
            shape = FeedbackShape.TEXT
        elif len(outcomes) == 2 and approve and reject and isinstance(output, str) and output:
            shape = FeedbackShape.CORRECTION
        elif len(outcomes) == 2 and approve and reject and isinstance(as_object(output), dict):
            shape = FeedbackShape.APPROVAL
        else:
            shape = FeedbackShape.CHOICE
        return cls(
            shape=shape,
            outcomes=outcomes,
            approve=approve,
            reject=reject,
            default_outcome=default_outcome,
        )


class FeedbackReply(BaseModel):
    """What the flow is resumed with for a decided handoff."""

    feedback: str
    """The feedback text (``HumanFeedbackResult.feedback``): what the person wrote, or the
    outcome's name when they only clicked, or why nobody answered."""
    outcome: str | None = None
    """The outcome the person chose; None lets CrewAI map ``feedback`` to one (a typed
    answer to a question with choices)."""
    output: Any = None
    """The output as the person edited it (``HumanFeedbackResult.output``), if ``edited``."""
    edited: bool = False
    decision: Literal["approve", "edit", "reject", "answer"]

    def record(self, handoff: Handoff) -> dict[str, Any]:
        """What a step's ``HumanFeedbackResult.metadata["handoff"]`` holds: the decision
        and the handoff's id (a stable key for the side effects of the steps after it)."""
        decision = handoff.resume_data
        return {
            "id": handoff.id,
            "decision": self.decision,
            "status": handoff.status.value,
            "decided_by": decision.decided_by if decision else None,
        }


def reply(handoff: Handoff, request: FeedbackRequest) -> FeedbackReply:
    """The reply a decided handoff gives its step. A refusal (rejected, expired, cancelled,
    undeliverable) takes the reject-like outcome, with the reason as the feedback."""
    decision = handoff.resume_data
    comment = decision.comment if decision and decision.comment else None
    if request.shape in (FeedbackShape.APPROVAL, FeedbackShape.CORRECTION):
        approve, reject = request.approve or "", request.reject or ""
        if handoff.status is not Status.APPROVED:
            return FeedbackReply(
                feedback=decision_note(handoff) or reject, outcome=reject, decision="reject"
            )
        edited = _edited(handoff, request.shape)
        return FeedbackReply(
            feedback=comment or approve,
            outcome=approve,
            output=edited,
            edited=edited is not None,
            decision="approve" if edited is None else "edit",
        )
    if handoff.status is Status.ANSWERED and decision is not None and decision.answer:
        answer = decision.answer
        chosen = next((o for o in request.outcomes if o.lower() == answer.strip().lower()), None)
        return FeedbackReply(feedback=answer, outcome=chosen, decision="answer")
    refused = refusal_message(handoff, question=True)
    if request.shape is FeedbackShape.TEXT:
        return FeedbackReply(feedback=refused, decision="reject")
    return FeedbackReply(
        feedback=refused, outcome=request.reject or request.default_outcome, decision="reject"
    )


def as_object(output: Any) -> Any:
    """``output`` as JSON values (a Pydantic model as its fields)."""
    return to_jsonable_python(output, fallback=str)


def shown(output: Any) -> str:
    """``output`` as a person reads it: text as it is, anything else as indented JSON."""
    if isinstance(output, str):
        return output
    return json.dumps(as_object(output), indent=2, ensure_ascii=False)


def _edited(handoff: Handoff, shape: FeedbackShape) -> Any:
    if shape is FeedbackShape.APPROVAL:
        return edited_args(handoff)
    payload = handoff.payload
    corrected = handoff.resume_data.corrected_draft if handoff.resume_data else None
    if isinstance(payload, CorrectionPayload) and corrected and corrected != payload.draft:
        return corrected
    return None


def _only(outcomes: list[str], words: frozenset[str]) -> str | None:
    found = [outcome for outcome in outcomes if outcome.strip().lower() in words]
    return found[0] if len(found) == 1 else None


__all__ = [
    "APPROVE_WORDS",
    "REJECT_WORDS",
    "FeedbackReply",
    "FeedbackRequest",
    "FeedbackShape",
    "as_object",
    "reply",
    "shown",
]
