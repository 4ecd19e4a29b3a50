"""The agent-side API (``Handoffs``, ``AsyncHandoffs``, ``require_approval``,
``ask_human``) and the RQ jobs that deliver and resume handoffs.

Framework adapters live in ``worker.adapters`` and are imported from there (this package
imports no agent framework)."""

from worker.adapters.decorators import ApprovalRejected, ask_human, require_approval
from worker.aio import AsyncHandoffs
from worker.client import Handoffs, RequestOptions
from worker.notifier import LoggingNotifier, Notifier

__all__ = [
    "ApprovalRejected",
    "AsyncHandoffs",
    "Handoffs",
    "LoggingNotifier",
    "Notifier",
    "RequestOptions",
    "ask_human",
    "require_approval",
]
