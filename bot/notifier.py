"""Delivers handoffs to Slack and keeps their messages up to date (runs in workers).

A handoff's ``message_refs`` hold its primary message (``channel``, ``ts``) and ``copies``:
the copy posted to an escalation channel, and old messages left behind by a reassignment
(``moved_to``). Every update re-renders all of them from the handoff's current state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_sdk import WebClient

from bot.views import (
    escalation_note,
    reminder_text,
    render_message,
    render_moved,
    thread_record_text,
)
from store.models import Handoff

logger = logging.getLogger(__name__)

METADATA_EVENT_TYPE = "handoff_posted"


class NoChannel(Exception):
    """The handoff names no channel and no default channel is configured."""


class SlackNotifier:
    """Posts a handoff with ``chat.postMessage`` and keeps its messages up to date."""

    def __init__(
        self,
        client: WebClient,
        *,
        default_channel: str | None = None,
        on_change: Callable[[Handoff], None] | None = None,
    ) -> None:
        """``on_change`` is called after each delivery, update and escalation (the App Home
        refresh); its failures are logged, never raised, so they cannot fail the task."""
        self.client = client
        self.default_channel = default_channel
        self.on_change = on_change

    def deliver(self, handoff: Handoff) -> dict[str, Any]:
        """Post the handoff's message; returns its references.

        When the handoff was posted before (it has been reassigned), the new message becomes
        the primary one and the old one is updated to point to it.
        """
        channel = handoff.channel or self.default_channel
        if not channel:
            raise NoChannel(f"handoff {handoff.id} names no channel and HANDOFF_CHANNEL is not set")
        posted = self._post(handoff, channel)
        refs: dict[str, Any] = {"channel": posted["channel"], "ts": posted["ts"]}
        old = handoff.message_refs
        if old.get("ts"):
            moved = {"channel": old["channel"], "ts": old["ts"], "moved_to": posted["channel"]}
            refs["copies"] = [*old.get("copies", []), moved]
            self._show_moved(handoff, moved)
            refs["record_ts"] = None
        logger.info("posted", extra={"handoff_id": handoff.id, "channel": posted["channel"]})
        self._changed(handoff)
        return refs

    def update(self, handoff: Handoff) -> dict[str, Any] | None:
        """Re-render every message of the handoff; after a decision, also post a short
        record in the primary message's thread (once: its ts is kept in the refs)."""
        refs = dict(handoff.message_refs)
        channel, ts = refs.get("channel"), refs.get("ts")
        if not channel or not ts:
            if handoff.delivery.state.value in ("completed", "failed"):
                return None  # never posted to Slack (e.g. delivered to the log): nothing to update
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        message = render_message(handoff)
        self.client.chat_update(channel=channel, ts=ts, text=message.text, blocks=message.blocks)
        for copy in refs.get("copies", []):
            if copy.get("moved_to"):
                self._show_moved(handoff, copy)
            else:
                shown = render_message(handoff, note=escalation_note(handoff))
                self.client.chat_update(
                    channel=copy["channel"], ts=copy["ts"], text=shown.text, blocks=shown.blocks
                )
        self._changed(handoff)
        if not handoff.is_pending and not refs.get("record_ts"):
            record = self.client.chat_postMessage(
                channel=channel, thread_ts=ts, text=thread_record_text(handoff)
            )
            refs["record_ts"] = record["ts"]
            return refs
        return None

    def remind(self, handoff: Handoff) -> None:
        """Reply in the message's thread, mentioning the reviewers."""
        refs = handoff.message_refs
        if not refs.get("ts"):
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        self.client.chat_postMessage(
            channel=refs["channel"], thread_ts=refs["ts"], text=reminder_text(handoff)
        )

    def escalate(self, handoff: Handoff) -> dict[str, Any] | None:
        """Post a copy to the escalation channel, or call the escalation user group in the
        message's thread (its members may then decide)."""
        target = handoff.escalate_to or ""
        refs = dict(handoff.message_refs)
        if target.startswith("S"):
            if refs.get("ts"):
                self.client.chat_postMessage(
                    channel=refs["channel"],
                    thread_ts=refs["ts"],
                    text=f":rotating_light: <!subteam^{target}>: please decide this request.",
                )
            return None
        posted = self._post(handoff, target, note=escalation_note(handoff))
        refs["copies"] = [
            *refs.get("copies", []),
            {"channel": posted["channel"], "ts": posted["ts"]},
        ]
        self._changed(handoff)
        return refs

    def _changed(self, handoff: Handoff) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(handoff)
        except Exception:  # a stale App Home must not fail (and repeat) a Slack post
            logger.exception("App Home refresh failed", extra={"handoff_id": handoff.id})

    def _post(self, handoff: Handoff, channel: str, *, note: str | None = None) -> Any:
        message = render_message(handoff, note=note)
        return self.client.chat_postMessage(
            channel=channel,
            text=message.text,
            blocks=message.blocks,
            metadata={
                "event_type": METADATA_EVENT_TYPE,
                "event_payload": {"handoff_id": handoff.id, "run_id": handoff.run_id},
            },
            unfurl_links=False,
            unfurl_media=False,
        )

    def _show_moved(self, handoff: Handoff, moved: dict[str, Any]) -> None:
        shown = render_moved(handoff, channel=str(moved["moved_to"]))
        self.client.chat_update(
            channel=moved["channel"], ts=moved["ts"], text=shown.text, blocks=shown.blocks
        )
