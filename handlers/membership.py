"""The bot leaving a channel: ``channel_left`` (public) and ``group_left`` (private).

Slack sends them when the bot leaves or is removed. The bot then hears no thread answers
there and cannot read the channel, though with ``chat:write.public`` it could still post in
a public one: so the join it made is forgotten at once (``bot.delivery.conversations``), and
the next handoff posted there joins the channel again first. Nothing else changes: handoffs
already posted there keep their buttons, which still work.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import App

from bot.delivery.conversations import forget_joined
from handlers.decisions import STORE_DOWN
from handlers.deps import deps_of

logger = logging.getLogger(__name__)


def register(app: App) -> None:
    """Attach the listeners of the bot's departures to ``app``."""
    app.event("channel_left")(on_left)
    app.event("group_left")(on_left)


def on_left(event: dict[str, Any], context: dict[str, Any]) -> None:
    """Forget the bot's join of the channel it left."""
    channel = event.get("channel")
    if not isinstance(channel, str) or not channel:
        return
    deps = deps_of(context)
    try:
        forget_joined(deps.store.redis, deps.store.keys, channel)
    except STORE_DOWN:
        # The join expires by itself (JOINED_CHANNEL_SECONDS); until then a lost post there
        # is found by joining again on not_in_channel.
        logger.exception("store unavailable while forgetting the join of %s", channel)
        return
    logger.info("the bot left %s: it joins it again before its next post there", channel)
