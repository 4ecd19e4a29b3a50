"""Delivers handoffs to Slack and shows their outcome there (runs in workers)."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient

from bot.views import render_message, thread_record_text
from store.models import Handoff

logger = logging.getLogger(__name__)

METADATA_EVENT_TYPE = "handoff_posted"


class NoChannel(Exception):
    """The handoff names no channel and no default channel is configured."""


class SlackNotifier:
    """Posts a handoff with ``chat.postMessage`` and keeps the message up to date."""

    def __init__(self, client: WebClient, *, default_channel: str | None = None) -> None:
        self.client = client
        self.default_channel = default_channel

    def deliver(self, handoff: Handoff) -> dict[str, Any]:
        """Post the handoff's message; returns its channel and ts."""
        channel = handoff.channel or self.default_channel
        if not channel:
            raise NoChannel(f"handoff {handoff.id} names no channel and HANDOFF_CHANNEL is not set")
        message = render_message(handoff)
        response = self.client.chat_postMessage(
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
        logger.info("posted", extra={"handoff_id": handoff.id, "channel": response["channel"]})
        return {"channel": response["channel"], "ts": response["ts"]}

    def update(self, handoff: Handoff) -> dict[str, Any] | None:
        """Re-render the message for the handoff's state; after a decision, also post a
        short record in its thread (once: the record's ts is kept in the refs)."""
        refs = dict(handoff.message_refs)
        channel, ts = refs.get("channel"), refs.get("ts")
        if not channel or not ts:
            if handoff.delivery.state.value in ("completed", "failed"):
                return None  # never posted to Slack (e.g. delivered to the log): nothing to update
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        message = render_message(handoff)
        self.client.chat_update(channel=channel, ts=ts, text=message.text, blocks=message.blocks)
        if not handoff.is_pending and not refs.get("record_ts"):
            record = self.client.chat_postMessage(
                channel=channel, thread_ts=ts, text=thread_record_text(handoff)
            )
            refs["record_ts"] = record["ts"]
            return refs
        return None
