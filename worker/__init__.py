"""The agent-side API (``Handoffs``, ``AsyncHandoffs``, ``require_approval``,
``ask_human``), the errors it raises, and the RQ jobs that deliver and resume handoffs.

Every error raised on purpose derives from ``HandoffError``; its message says what to do.

Framework adapters live in ``worker.adapters`` and are imported from there (this package
imports no agent framework)."""

from store.exceptions import (
    ActionDigestMismatch,
    AlreadyDecided,
    AlreadyVoted,
    ArgumentsChanged,
    ClaimedByOther,
    ClaimRequired,
    ConditionTooCostly,
    ConfigurationError,
    HandoffError,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    InvalidResumeTarget,
    MasterCutOff,
    NotRetryable,
    PayloadTooLarge,
    ReplicasNotConfirmed,
    RequesterMayNotVote,
    TooManyVotes,
    VoteRefused,
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
    "ActionDigestMismatch",
    "AlreadyDecided",
    "AlreadyVoted",
    "ApprovalRejected",
    "ArgumentsChanged",
    "AsyncHandoffs",
    "ClaimRequired",
    "ClaimedByOther",
    "ConditionTooCostly",
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
    "MasterCutOff",
    "NotRetryable",
    "Notifier",
    "PayloadTooLarge",
    "QuestionDeclined",
    "ReplicasNotConfirmed",
    "RequestOptions",
    "RequesterMayNotVote",
    "StoreSettings",
    "TooManyVotes",
    "VoteRefused",
    "ask_human",
    "require_approval",
]
