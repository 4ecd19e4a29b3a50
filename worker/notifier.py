"""How a handoff reaches people. The Slack notifier lives in ``bot``; this is the interface."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from store.exceptions import HandoffError
from store.models import Handoff, PostWindow

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    """One attempt at a task, as a notifier is given it.

    ``started_at``: when it began, epoch seconds by Redis's clock (the look-up window of
    what it posts starts there; 0 when not run by a job). ``unanswered``: where an earlier
    attempt's post may have landed with its answer lost: look there, and only then, before
    posting again (None: nothing of this task is unaccounted for).
    """

    number: int = 1
    started_at: float = 0.0
    unanswered: PostWindow | None = None


FIRST_ATTEMPT = Attempt()
"""A first attempt with nothing to look for (a notifier called outside a job)."""


class DeliveryFailed(HandoffError):
    """An attempt to show a handoff failed, and says what it leaves behind.

    ``retry_after``: Slack asked to wait this many seconds (a 429, or the shared budget of
    look-ups is spent): the task runs again then, and the attempt does not count against
    its attempts. ``unanswered``: where a post may have landed unanswered, as this attempt
    leaves it (None: nowhere; a window with no end runs until the attempt ends).
    ``message_refs``: references the attempt made before it failed (say, the ts of a thread
    record posted), stored with the failure so that the next attempt does not make them again.
    Example: ``DeliveryFailed("rate limited", retry_after=30, unanswered=None)``.
    """

    def __init__(
        self,
        message: str,
        *,
        unanswered: PostWindow | None,
        retry_after: float | None = None,
        message_refs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.unanswered = unanswered
        self.retry_after = retry_after
        self.message_refs = message_refs


class Undeliverable(HandoffError):
    """The handoff cannot be shown where it was sent, and retrying will not change that (an
    archived channel, a bot not in it, a revoked token, a message Slack refuses).

    Raised by ``Notifier.deliver``: the delivery fails at once rather than after its attempts,
    and the handoff is closed ``undeliverable`` with this message as the decision's comment,
    so the agent's run is told. Example: ``Undeliverable("Slack refused the message to
    C0APPROVALS: is_archived")``.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        """The error code of what refused it (Slack's ``error``), when there is one."""


class Notifier(Protocol):
    """Shows a new handoff to the people who can decide it.

    ``deliver`` is called in a worker, possibly more than once for the same handoff when an
    earlier attempt's outcome was lost; it returns references to what it posted (for
    example a Slack channel and message ts), stored on the handoff as ``message_refs``.
    Raise to have the delivery retried with backoff; raise ``Undeliverable`` when no retry
    can help (the handoff is then closed ``undeliverable`` at once). A delivery whose last
    attempt fails closes the handoff ``undeliverable`` too.
    """

    def deliver(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> dict[str, Any]:
        """Post the handoff; return references to the posted message (``channel`` and
        ``ts`` link the message to the handoff, for thread replies). When
        ``attempt.unanswered`` is set, an earlier attempt may have posted without hearing
        back: look for that post before posting again. Raise ``DeliveryFailed`` to say what
        the attempt leaves behind (a post whose answer was lost, a rate limit)."""
        ...

    def update(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Show the handoff's current state (claimed, decided) where it was posted.

        Called after each change, possibly more than once: it must render the state it is
        given rather than append to what it showed before. Returns new message references
        to store (replacing the old ones), or None to keep them."""
        ...

    def remind(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> None:
        """Nudge the reviewers of a handoff that is still pending (``attempt`` as in
        ``deliver``)."""
        ...

    def escalate(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Show a still-pending handoff to ``handoff.escalate_to`` as well; returns the new
        message references (kept on the handoff), or None to keep the old ones. ``attempt``
        as in ``deliver``. Called for a decided handoff only when ``attempt.unanswered``
        says an earlier copy may have landed: find it, post nothing."""
        ...


class LoggingNotifier:
    """Writes each handoff to the log; the default when no Slack workspace is configured."""

    def deliver(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> dict[str, Any]:
        """Log the handoff's id, type, run and channel."""
        logger.warning(
            "handoff %s needs a person: %s in run %s (channel %s)",
            handoff.id,
            handoff.request_type.value,
            handoff.run_id,
            handoff.channel or "-",
        )
        return {"notifier": "log"}

    def update(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Log the handoff's new state."""
        decided_by = handoff.resume_data.decided_by if handoff.resume_data else "-"
        logger.warning("handoff %s is %s (by %s)", handoff.id, handoff.status.value, decided_by)
        return None

    def remind(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> None:
        """Log a reminder."""
        logger.warning("reminder: handoff %s is still pending", handoff.id)

    def escalate(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Log the escalation."""
        logger.warning("handoff %s escalated to %s", handoff.id, handoff.escalate_to)
        return None
