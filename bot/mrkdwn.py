"""Text in Block Kit: escaping agent text for mrkdwn, mentions, dates, and cutting to a limit.

Every surface (channel messages, modals, command replies, the App Home, reviewers' notices)
uses these, so agent text is escaped alike everywhere and people and groups are named alike.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from store import slack_ids


def escape(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped: agent text must not ping channels or
    users, or inject links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def shorten(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters (ending in "…" when cut), and whether
    it was cut."""
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "…" when cut."""
    return shorten(text, limit)[0]


def quote(text: str) -> str:
    """``text`` as a mrkdwn block quote, line by line."""
    return "\n".join(f">{line}" for line in text.splitlines() or [""])


def agent_text(text: str, limit: int, *, quoted: bool = False) -> tuple[str, bool]:
    """Text from an agent or a person, escaped for mrkdwn (optionally as a quote) and
    shortened to ``limit`` characters; and whether it was shortened."""
    escaped = escape(text)
    return shorten(quote(escaped) if quoted else escaped, limit)


def compact_json(value: Any) -> str:
    """``value`` as one line of JSON, readable in a message."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def split_text(text: str, size: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``size`` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


_NAME_SHOWN = 80  # of a stored name that is no id, shown as text in place of a mention


def is_usergroup(reviewer: str) -> bool:
    """Whether a reviewer id names a user group (``S…``) rather than a person."""
    return slack_ids.is_usergroup_id(reviewer)


def is_conversation_id(channel: str) -> bool:
    """Whether ``channel`` looks like a Slack conversation id (``C…``, ``G…``, ``D…``)."""
    return slack_ids.is_channel_id(channel)


# The mentions below are the only ones the bot writes. Each emits one only for a value of
# the shape of an id (store.slack_ids, the test the request model makes); anything else (a
# record stored before requests were checked, a name) is shown as escaped, shortened text,
# so it can never become a mention, a channel ping or a link.


def mention(user_id: str) -> str:
    """A person as a Slack mention, or a name that is not a user id as text."""
    if slack_ids.is_user_id(user_id):
        return f"<@{user_id}>"
    return _as_text(user_id)


def channel_mention(channel: str) -> str:
    """A conversation as a Slack channel link, a person (a handoff posted in their DM) as
    "DM with <@U…>", or anything else as ``#text``."""
    if slack_ids.is_channel_id(channel):
        return f"<#{channel}>"
    if slack_ids.is_user_id(channel):
        return f"DM with <@{channel}>"
    return f"#{_as_text(channel)}"


def reviewer_mention(reviewer: str) -> str:
    """A reviewer (a person or a user group) as a Slack mention, or anything else as text."""
    if slack_ids.is_usergroup_id(reviewer):
        return f"<!subteam^{reviewer}>"
    return mention(reviewer)


def _as_text(name: str) -> str:
    return escape(clip(name, _NAME_SHOWN))


def slack_date(moment: datetime) -> str:
    """A time that Slack shows in each reader's own time zone (with a UTC fallback)."""
    epoch = int(moment.timestamp())
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{epoch}^{{date_short_pretty}} at {{time}}|{fallback}>"


def ago(moment: datetime, now: datetime | None = None) -> str:
    """How long ago ``moment`` was, in words: "just now", "3 minutes ago", "2 days ago"."""
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 60:
        return "just now" if seconds < 5 else f"{seconds} seconds ago"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"


def duration(seconds: float) -> str:
    """A duration in at most two units: "45s", "3m 20s", "2d 4h"."""
    remaining = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if remaining >= size or (unit == "s" and not parts):
            parts.append(f"{remaining // size}{unit}")
            remaining %= size
    return " ".join(parts[:2])
