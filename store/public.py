"""A handoff as the outside sees it: the HTTP API's responses and the webhooks' bodies
(one shape for both, so a receiver parses a callback as it parses ``GET /v1/handoffs/{id}``).
Internal bookkeeping (task leases, message refs, index lists) stays out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from store.models import Handoff, RequestType, ResumeData, Status


class CallbackView(BaseModel):
    url: str


class HandoffView(BaseModel):
    """A handoff as the HTTP API shows it and its webhooks send it."""

    id: str
    run_id: str
    thread_id: str
    request_type: RequestType
    status: Status
    context: str
    payload: dict[str, Any]
    channel: str | None
    reviewers: list[str]
    requester: str | None
    metadata: dict[str, Any]
    created_at: datetime
    expires_at: datetime | None
    decided_at: datetime | None
    claimed_by: str | None
    resume_data: ResumeData | None
    callback: CallbackView | None
    api_key: str | None
    """The name of the key that created it."""
    idempotency_key: str | None

    @classmethod
    def of(cls, handoff: Handoff) -> HandoffView:
        idem = handoff.idempotency_key
        if idem and handoff.api_key and idem.startswith(f"{handoff.api_key}/"):
            idem = idem[len(handoff.api_key) + 1 :]  # keys are scoped to their API key
        return cls(
            id=handoff.id,
            run_id=handoff.run_id,
            thread_id=handoff.thread_id,
            request_type=handoff.request_type,
            status=handoff.status,
            context=handoff.context,
            payload=handoff.payload.model_dump(mode="json"),
            channel=handoff.channel,
            reviewers=handoff.reviewers,
            requester=handoff.requester,
            metadata=handoff.metadata,
            created_at=handoff.created_at,
            expires_at=handoff.expires_at,
            decided_at=handoff.decided_at,
            claimed_by=handoff.claimed_by,
            resume_data=handoff.resume_data,
            callback=CallbackView(url=handoff.callback.url) if handoff.callback else None,
            api_key=handoff.api_key,
            idempotency_key=idem,
        )
