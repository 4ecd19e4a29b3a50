"""Replies in a question's thread: the first reply by an allowed reviewer answers it.

Slack retries events it thinks were not received, so each event is handled once, by
``event_id``. The bot's own messages (dropped by Bolt), other bots' messages, edits,
deletions, messages outside a handoff's thread and replies to a handoff that no longer
exists (purged after its retention) are ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from handlers.decisions import STORE_DOWN, UNAVAILABLE, Refusal, decide_as
from handlers.deps import deps_of
from store.exceptions import HandoffNotFound
from store.models import RequestType

logger = logging.getLogger(__name__)

VIA_THREAD = "slack_thread"


def register(app: App) -> None:
    """Attach the message-event listener to ``app``."""
    app.event("message")(on_message)


def on_message(
    body: dict[str, Any], event: dict[str, Any], client: WebClient, context: dict[str, Any]
) -> None:
    """Answer a pending question from a reply in its thread."""
    if event.get("subtype") or event.get("bot_id"):
        return  # edits, deletions, joins and bots' messages never answer a question
    thread_ts, channel, user = event.get("thread_ts"), event.get("channel"), event.get("user")
    if not thread_ts or thread_ts == event.get("ts") or not channel or not user:
        return
    deps = deps_of(context)
    try:
        handoff_id = deps.store.handoff_for_message(channel, thread_ts)
        if handoff_id is None:
            return
        # Read before the event is marked seen: a reply to a handoff that is gone (purged
        # after its retention, while a link to it survived) changes nothing at all.
        handoff = deps.store.get(handoff_id)
        event_id = body.get("event_id")
        if event_id and not deps.store.first_sighting(str(event_id)):
            logger.info("duplicate event ignored", extra={"event_id": event_id})
            return
    except HandoffNotFound:
        logger.info("reply to a handoff that no longer exists", extra={"handoff_id": handoff_id})
        return
    except STORE_DOWN:
        logger.exception("store unavailable while reading a thread reply")
        parent_author = event.get("parent_user_id")
        if parent_author and parent_author == context.get("bot_user_id"):
            # Likely an answer to one of our questions: say it was not taken, rather than
            # leave the person thinking it was.
            _reply_privately(client, channel, user, thread_ts, UNAVAILABLE)
        return
    if handoff.request_type is not RequestType.QUESTION:
        return
    text = (event.get("text") or "").strip()
    if not text:
        return
    result = decide_as(
        deps, user, handoff_id, "answered", via=VIA_THREAD, channel=channel, answer=text
    )
    if isinstance(result, Refusal):
        _reply_privately(client, channel, user, thread_ts, result.message)


def _reply_privately(client: WebClient, channel: str, user: str, thread_ts: str, text: str) -> None:
    try:
        client.chat_postEphemeral(channel=channel, user=user, thread_ts=thread_ts, text=text)
    except Exception:  # a courtesy reply; the decision (or refusal) already stands
        logger.exception("ephemeral reply failed")
