"""The agent-side API (``Handoffs``, ``AsyncHandoffs``, ``require_approval``,
``ask_human``), the errors it raises, and the RQ jobs that deliver and resume handoffs.

Every error raised on purpose derives from ``HandoffError``; its message says what to do.

Framework adapters live in ``worker.adapters`` and are imported from there (this package
imports no agent framework)."""

from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    ConfigurationError,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    InvalidResumeTarget,
    NotRetryable,
    PayloadTooLarge,
)
from store.settings import StoreSettings
from worker.adapters.decorators import (
    ApprovalRejected,
    DecisionTimeout,
    QuestionDeclined,
    ask_human,
    require_approval,
)
from worker.aio import AsyncHandoffs
from worker.client import Handoffs, RequestOptions
from worker.notifier import LoggingNotifier, Notifier

__all__ = [
    "AlreadyDecided",
    "ApprovalRejected",
    "AsyncHandoffs",
    "ClaimRequired",
    "ClaimedByOther",
    "ConfigurationError",
    "DecisionTimeout",
    "HandoffError",
    "HandoffNotFound",
    "Handoffs",
    "IdempotencyConflict",
    "InvalidDecision",
    "InvalidHandoffRequest",
    "InvalidResumeTarget",
    "LoggingNotifier",
    "NotRetryable",
    "Notifier",
    "PayloadTooLarge",
    "QuestionDeclined",
    "RequestOptions",
    "StoreSettings",
    "ask_human",
    "require_approval",
]
