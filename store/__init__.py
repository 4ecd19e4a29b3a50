"""The Redis data model of handoffs and its atomic transitions. Knows nothing of Slack."""

from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    InvalidResumeTarget,
    NotRetryable,
    PayloadTooLarge,
)
from store.ids import new_handoff_id
from store.keys import KeySpace
from store.models import (
    AuditEvent,
    Handoff,
    HandoffRequest,
    Page,
    RequestType,
    ResumeData,
    Status,
    TaskKind,
    TaskState,
)
from store.repository import HandoffStore, StoreConfig, TaskPolicy

__all__ = [
    "AlreadyDecided",
    "AuditEvent",
    "ClaimRequired",
    "ClaimedByOther",
    "Handoff",
    "HandoffError",
    "HandoffNotFound",
    "HandoffRequest",
    "HandoffStore",
    "IdempotencyConflict",
    "InvalidDecision",
    "InvalidHandoffRequest",
    "InvalidResumeTarget",
    "KeySpace",
    "NotRetryable",
    "Page",
    "PayloadTooLarge",
    "RequestType",
    "ResumeData",
    "Status",
    "StoreConfig",
    "TaskKind",
    "TaskPolicy",
    "TaskState",
    "new_handoff_id",
]
