"""Exceptions raised by the store; each message says what the caller can do next."""

from __future__ import annotations

from datetime import datetime


class HandoffError(Exception):
    """Base class for every error slack-handoff raises on purpose."""


class ConfigurationError(HandoffError, ValueError):
    """The settings cannot run this (a variable unset or malformed); the message says which
    to set, and how. A ``ValueError`` too, as bad settings were before it existed."""


class InvalidHandoffRequest(HandoffError, ValueError):
    """The request to create a handoff is malformed (unknown type, missing or bad fields)."""


class PayloadTooLarge(InvalidHandoffRequest):
    """The handoff's context and payload exceed the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"handoff context+payload is {size} bytes, over the {limit}-byte limit; "
            "send a summary and keep the full data in your own storage (or raise "
            "HANDOFF_MAX_PAYLOAD_BYTES)"
        )
        self.size = size
        self.limit = limit


class InvalidResumeTarget(InvalidHandoffRequest):
    """The resume target is not an importable ``module:function`` callable."""


class IdempotencyConflict(HandoffError):
    """An idempotency key was reused for a different request."""


class HandoffNotFound(HandoffError, LookupError):
    """No handoff has this id (it never existed, or retention removed it)."""

    def __init__(self, handoff_id: str) -> None:
        super().__init__(
            f"no handoff with id {handoff_id!r}; check the id (ids look like ho_01J...)"
        )
        self.handoff_id = handoff_id


class InvalidDecision(HandoffError, ValueError):
    """The decision does not fit the handoff's request type (e.g. an answer for an approval)."""


class AlreadyDecided(HandoffError):
    """The handoff is no longer pending; the first decision stands and nothing was changed."""

    def __init__(
        self,
        handoff_id: str,
        status: str,
        decided_by: str | None,
        decided_at: datetime | None,
    ) -> None:
        who = f" by {decided_by}" if decided_by else ""
        when = f" at {decided_at.isoformat()}" if decided_at else ""
        super().__init__(
            f"handoff {handoff_id} was already {status}{who}{when}; a handoff is decided once"
        )
        self.handoff_id = handoff_id
        self.status = status
        self.decided_by = decided_by
        self.decided_at = decided_at


class ClaimRequired(HandoffError):
    """An escalation must be claimed, by the person resolving it, before it is resolved."""


class ClaimedByOther(HandoffError):
    """Someone else already claimed this escalation."""

    def __init__(self, handoff_id: str, claimed_by: str) -> None:
        super().__init__(f"handoff {handoff_id} is claimed by {claimed_by}; ask them or an admin")
        self.handoff_id = handoff_id
        self.claimed_by = claimed_by


class NotRetryable(HandoffError):
    """Only a resume (or delivery) that failed after all its attempts can be retried."""
