"""Who is in a channel, as Slack reports it, cached in Redis: the rule for handoffs that name
no reviewers (``ReviewerPolicy``: only members of the handoff's channel may see or decide
them, and only with ``HANDOFF_ALLOW_ANY_CHANNEL_MEMBER``).

``conversations.members`` pages through a channel's members (up to 1,000 a page); the whole
list is written to one Redis set per channel (``BotKeys.channel_members``) in one
transaction, with a marker member so that an empty channel is cached too, and expires after
``HANDOFF_CHANNEL_MEMBERS_CACHE_SECONDS``. A lookup is one ``SMISMEMBER``.
"""

from __future__ import annotations

import logging

from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot import defaults
from bot.config import Settings
from bot.keys import BotKeys

logger = logging.getLogger(__name__)

MARKER = "*"
"""A member of every cached set (no Slack id is "*"): the set exists, so the list was read."""

PAGE_SIZE = 1000
"""Members per ``conversations.members`` call (Slack's maximum)."""

MAX_PAGES = 100
"""Most pages read for one channel (100,000 members); the rest count as not members."""


class ChannelMembers:
    """The members of channels.

    Example::

        members = ChannelMembers(client, redis, BotKeys(store.keys), cache_seconds=300)
        members.is_member("C0OPS", "U0BOB")   # may Bob decide C0OPS's unassigned handoffs?

    When Slack cannot be asked (an API error such as ``channel_not_found``, or unreachable),
    the answer is None: nobody counts as a member (deny rather than guess), and nothing is
    cached, so the next lookup asks again. With ``cache_seconds=0`` every lookup asks Slack.
    """

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: BotKeys,
        *,
        cache_seconds: int = defaults.CHANNEL_MEMBERS_CACHE_SECONDS,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = keys
        self.cache_seconds = cache_seconds

    @classmethod
    def from_settings(
        cls, settings: Settings, client: WebClient, redis: Redis, keys: BotKeys
    ) -> ChannelMembers:
        """The cache with ``HANDOFF_CHANNEL_MEMBERS_CACHE_SECONDS``."""
        return cls(client, redis, keys, cache_seconds=settings.channel_members_cache_seconds)

    def is_member(self, channel: str, user_id: str) -> bool | None:
        """Is ``user_id`` in ``channel``? None when Slack could not be asked (which counts
        as "no", but is told apart so that a member can be told to try again)."""
        key = self.keys.channel_members(channel)
        if self.cache_seconds:
            cached, member = self.redis.smismember(key, [MARKER, user_id])
            if cached:
                return bool(member)
        members = self._fetch(channel)
        if members is None:
            return None
        if self.cache_seconds:
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(key)
            pipe.sadd(key, MARKER, *members)
            pipe.expire(key, self.cache_seconds)
            pipe.execute()
        return user_id in members

    def forget(self, channel: str) -> None:
        """Drop the cached members of ``channel`` (what its expiry does)."""
        self.redis.delete(self.keys.channel_members(channel))

    def _fetch(self, channel: str) -> set[str] | None:
        """Every member of ``channel``, or None when Slack did not answer."""
        members: set[str] = set()
        cursor = ""
        try:
            for _ in range(MAX_PAGES):
                response = self.client.conversations_members(
                    channel=channel, limit=PAGE_SIZE, **({"cursor": cursor} if cursor else {})
                )
                members.update(str(member) for member in response.get("members") or [])
                cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
                if not cursor:
                    return members
        except SlackApiError as exc:
            logger.warning(
                "cannot list channel members: %s",
                exc.response.get("error"),
                extra={"channel": channel},
            )
            return None
        except (SlackClientError, OSError) as exc:
            logger.warning("cannot list channel members: %s", exc, extra={"channel": channel})
            return None
        logger.warning(
            "channel has more members than are read; the rest cannot decide its handoffs",
            extra={"channel": channel, "read": len(members)},
        )
        return members
