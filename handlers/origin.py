"""Where a click came from, and whether that place shows the handoff the button names.

A button's value names a handoff, but what Slack vouches for is where the click happened:
the message (channel and ts) or the view in the payload's ``container``. A click counts only
from a place where slack-handoff showed that handoff: its message, a copy of it (posted to
the escalation channel, or left behind by a reassignment), or the clicker's own App Home.
A button copied into another message, or a payload that pairs one handoff's id with some
other message, is refused (``handlers.decisions``).

This also decides which channel counts for the escalation rule "anyone in the escalation
channel may decide": only the channel of a checked message, never one a payload names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from bot.keys import BotKeys
from handlers.deps import HandlerDeps
from store.models import Handoff

Surface = Literal["message", "ephemeral", "home", "modal", "unknown"]


@dataclass(frozen=True)
class Origin:
    """Where a ``block_actions`` payload says the click happened."""

    surface: Surface
    channel: str | None = None
    ts: str | None = None

    @property
    def decision_channel(self) -> str | None:
        """The channel that counts for who may decide: a message's channel, or none."""
        return self.channel if self.surface == "message" else None


def origin_of(body: dict[str, Any]) -> Origin:
    """The place of a click, from its payload's ``container`` (and ``view`` for views)."""
    container = body.get("container") or {}
    kind = container.get("type")
    if kind == "message":
        channel, ts = container.get("channel_id"), container.get("message_ts")
        surface: Surface = "ephemeral" if container.get("is_ephemeral") else "message"
        return Origin(surface, str(channel) if channel else None, str(ts) if ts else None)
    if kind == "view":
        view = body.get("view") or {}
        return Origin("home" if view.get("type") == "home" else "modal")
    return Origin("unknown")


def shows_handoff(deps: HandlerDeps, handoff: Handoff, origin: Origin, user_id: str) -> bool:
    """Did slack-handoff show ``handoff`` (with its buttons) where ``origin`` says?

    Costs nothing for a click on the handoff's message (its references are loaded with it);
    one Redis read for a Home click, for a click in an ephemeral reply (``/handoff show``),
    or for a message posted so recently that its reference is not on the handoff yet (the
    message link is written first).
    """
    if origin.surface == "message":
        if not origin.channel or not origin.ts:
            return False
        if (origin.channel, origin.ts) in message_places(handoff):
            return True
        return deps.store.handoff_for_message(origin.channel, origin.ts) == handoff.id
    if origin.surface == "home":
        shown = BotKeys(deps.store.keys).home_shown(user_id)
        return bool(deps.store.redis.sismember(shown, handoff.id))
    if origin.surface == "ephemeral":
        shown = BotKeys(deps.store.keys).ephemeral_shown(user_id)
        at = deps.store.redis.zscore(shown, handoff.id)
        return at is not None and at >= _ms_now() - EPHEMERAL_SHOWN_SECONDS * 1000
    return False


EPHEMERAL_SHOWN_SECONDS = 24 * 3600
"""How long the buttons of an ephemeral reply (which Slack never expires) keep working."""


def remember_ephemeral(deps: HandlerDeps, user_id: str, handoff_id: str) -> None:
    """Record that an ephemeral reply to ``user_id`` shows ``handoff_id`` with its buttons,
    so that clicks there count (``shows_handoff``)."""
    key = BotKeys(deps.store.keys).ephemeral_shown(user_id)
    now = _ms_now()
    with deps.store.redis.pipeline(transaction=False) as pipe:
        pipe.zadd(key, {handoff_id: now})
        # Each reply's buttons work for a day: older entries go, so the key holds at most
        # a day's worth of shown handoffs however long the person keeps using it.
        pipe.zremrangebyscore(key, "-inf", now - EPHEMERAL_SHOWN_SECONDS * 1000)
        pipe.expire(key, EPHEMERAL_SHOWN_SECONDS)
        pipe.execute()


def _ms_now() -> int:
    return int(time.time() * 1000)


def message_places(handoff: Handoff) -> set[tuple[str, str]]:
    """(channel, ts) of every message that shows ``handoff``: the primary and its copies."""
    refs = handoff.message_refs
    places = {(refs.get("channel"), refs.get("ts"))}
    for copy in refs.get("copies") or []:
        if isinstance(copy, dict):
            places.add((copy.get("channel"), copy.get("ts")))
    return {(str(c), str(t)) for c, t in places if c and t}
