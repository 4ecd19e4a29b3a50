"""The agent-side API (``Handoffs``, ``AsyncHandoffs``) and the RQ jobs that deliver and
resume handoffs."""

from worker.aio import AsyncHandoffs
from worker.client import Handoffs, RequestOptions
from worker.notifier import LoggingNotifier, Notifier

__all__ = ["AsyncHandoffs", "Handoffs", "LoggingNotifier", "Notifier", "RequestOptions"]
