"""The API's request and response bodies. These models are the contract that
``docs/openapi.json`` records: a field renamed here breaks a test until the document is
regenerated (``python -m bot.api.openapi > docs/openapi.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from store.answer_schemas import answer_schema_problem
from store.models import (
    MAX_QUORUM,
    MAX_WAIT_SECONDS,
    ApprovalPayload,
    CorrectionPayload,
    EscalationPayload,
    ProposedAction,
    QuestionPayload,
    RequestType,
)
from store.public import HandoffView

IDEMPOTENCY_KEY_MAX = 180
"""Stored as ``<key name>/<idempotency key>``: 64 + 1 + 180 fit the store's 256."""


class _Body(BaseModel):
    # Unknown fields are refused (422 naming them): a typo must not pass silently.
    model_config = ConfigDict(extra="forbid")


class CallbackIn(_Body):
    """Where the decided handoff is POSTed."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        description="https URL the decided handoff is POSTed to, signed per Standard Webhooks.",
    )


class CreateHandoff(_Body):
    """A handoff request. Give the fields of its type: ``action`` (approval), ``question``
    and ``choices`` or ``answer_schema`` (question), ``draft`` and ``instructions``
    (correction), ``summary`` (escalation)."""

    request_type: RequestType
    run_id: str = Field(min_length=1, max_length=256, description="The agent run it belongs to.")
    thread_id: str = Field(
        min_length=1, max_length=256, description="What the run works on (ticket, chat)."
    )
    context: str = Field(default="", description="What the person needs to know (mrkdwn).")
    action: ProposedAction | None = None
    approvals_required: int | None = Field(
        default=None,
        ge=1,
        le=MAX_QUORUM,
        description="Approvals from distinct people an approval needs (default 1).",
    )
    rejections_required: int | None = Field(
        default=None,
        ge=1,
        le=MAX_QUORUM,
        description="Rejections that reject an approval (default 1: the first is a veto).",
    )
    question: str | None = None
    choices: list[str] | None = None
    answer_schema: dict[str, Any] | None = Field(
        default=None,
        description="A typed answer: the JSON Schema of a flat object (string, date, enum, "
        "number, integer, boolean fields), filled in Slack's Answer form; the decision "
        "carries it in resume_data.answer_data.",
    )
    draft: str | None = None
    instructions: str | None = None
    summary: str | None = None
    channel: str | None = Field(default=None, description="Slack channel id (C…, G…) or user id.")
    reviewers: list[str] = Field(default_factory=list, description="User (U…) or group (S…) ids.")
    requester: str | None = None
    expires_in_seconds: float | None = Field(
        default=None, gt=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    callback: CallbackIn | None = None
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX,
        description="The same key and body return the same handoff (or the Idempotency-Key "
        "header).",
    )

    def payload(self) -> dict[str, Any]:
        """The store's payload of this request's type (``ValueError`` naming a missing field)."""
        kind = self.request_type
        if kind is RequestType.APPROVAL:
            if self.action is None:
                raise ValueError("action: an approval needs an action {name, args}")
            return ApprovalPayload(
                action=self.action,
                approvals_required=self.approvals_required or 1,
                rejections_required=self.rejections_required or 1,
            ).model_dump()
        if kind is RequestType.QUESTION:
            if not self.question:
                raise ValueError("question: a question needs its text")
            if self.answer_schema is not None and (
                problem := answer_schema_problem(self.answer_schema)
            ):
                raise ValueError(f"answer_schema: {problem}")
            return QuestionPayload(
                question=self.question, choices=self.choices, answer_schema=self.answer_schema
            ).model_dump()
        if kind is RequestType.CORRECTION:
            if not self.draft:
                raise ValueError("draft: a correction needs a draft")
            return CorrectionPayload(draft=self.draft, instructions=self.instructions).model_dump()
        if not self.summary:
            raise ValueError("summary: an escalation needs a summary")
        return EscalationPayload(summary=self.summary).model_dump()

    def misplaced_fields(self) -> list[str]:
        """Payload fields of another request type than this one's."""
        belongs = {
            RequestType.APPROVAL: {"action", "approvals_required", "rejections_required"},
            RequestType.QUESTION: {"question", "choices", "answer_schema"},
            RequestType.CORRECTION: {"draft", "instructions"},
            RequestType.ESCALATION: {"summary"},
        }[self.request_type]
        every = {"action", "approvals_required", "rejections_required", "question", "choices"}
        every.add("answer_schema")
        every |= {"draft", "instructions", "summary"}
        return sorted(n for n in every - belongs if getattr(self, n) is not None)


class CancelHandoff(_Body):
    reason: str | None = Field(default=None, max_length=2000)


class DecideHandoff(_Body):
    """A decision (admin keys): ``approved`` or ``rejected`` for approvals, ``answered``
    for the other types."""

    outcome: Literal["approved", "rejected", "answered"]
    by: str = Field(min_length=1, max_length=256, description="Who decides (audited).")
    comment: str | None = Field(default=None, max_length=4000)
    answer: str | None = Field(default=None, max_length=40000)
    answer_data: dict[str, Any] | None = Field(
        default=None,
        description="A typed answer to a question with an answer_schema (checked against "
        "it; answer defaults to it as text).",
    )
    edited_args: dict[str, Any] | None = None


HandoffOut = HandoffView
"""A handoff as the API (and its webhooks) show it."""


class HandoffPage(BaseModel):
    handoffs: list[HandoffOut]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null on the last. A page may hold "
        "fewer than limit handoffs."
    )


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = Field(
        default=None, description="Each offending field and what is wrong with it."
    )


class AuditEventOut(BaseModel):
    """One audit event."""

    id: str | None = Field(description="The stream entry id (namespace audit only); unique.")
    time: datetime
    event: str
    actor: str
    handoff_id: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    events: list[AuditEventOut]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null at the end."
    )
