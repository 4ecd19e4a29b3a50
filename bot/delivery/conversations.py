"""Where the bot posts: the conversation id Slack wants, with the bot in it.

Slack takes a user id (a DM) or a public channel the bot is not in only in
``chat.postMessage``. Everything after the post needs more: ``chat.update`` and the
history methods take only conversation ids (``D…`` for a DM, not the person's ``U…``), and
Slack sends message events (thread answers) and answers ``conversations.history`` /
``conversations.replies`` only for conversations the bot is a member of, while
``chat:write.public`` lets it post in public channels it never joined. So before a handoff
is posted, its routing id becomes a conversation: a person's DM is opened
(``conversations.open``, scope ``im:write``) and a public channel is joined
(``conversations.join``, scope ``channels:join``). A private channel cannot be joined: the
bot must be invited, and a post there without that is refused for good with what to do.

Both answers are kept in Redis (``bot.keys``), shared by every worker and work horse: a DM's
id for ``DM_SECONDS``, a join for ``bot.defaults.JOINED_CHANNEL_SECONDS`` (it costs one
tier-3 call, 50 a minute). A join is forgotten at once when the bot leaves or is removed
(the ``channel_left`` / ``group_left`` events, ``handlers.membership``) or when Slack says
the bot is not in the channel (``forget``): the next post there joins again.
"""

from __future__ import annotations

import logging

from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import defaults
from bot.delivery.slack_errors import error_code
from bot.keys import BotKeys
from store.decoding import as_text
from store.keys import KeySpace

logger = logging.getLogger(__name__)

NOT_JOINABLE = "method_not_supported_for_channel_type"
"""``conversations.join``'s answer for a private channel (or a DM): only an invitation
puts the bot there."""

NOT_A_MEMBER_ERRORS = frozenset({"channel_not_found", "not_in_channel"})
"""What ``chat.postMessage`` answers in a private channel the bot is not in."""

DM_SECONDS = 30 * 86400
"""How long a person's DM id is kept (it never changes while they are in the workspace)."""


def is_user(routing_id: str) -> bool:
    """Is ``routing_id`` a person (``U…``/``W…``), to be reached in a DM?"""
    return routing_id[:1] in ("U", "W")


class Conversations:
    """Turns routing ids into conversations the bot is in (see the module's docstring).

    Example::

        conversations = Conversations(client, redis, keys)
        channel = conversations.ready_to_post("U0ALICE")  # "D0ALICE", Alice's DM
    """

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: KeySpace,
        *,
        joined_for_seconds: float = defaults.JOINED_CHANNEL_SECONDS,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = BotKeys(keys)
        self.joined_for_seconds = joined_for_seconds

    def conversation_of(self, routing_id: str) -> str:
        """The conversation id of a routing id: a person's DM with the bot for a user id,
        else the id itself. Raises ``SlackApiError`` when Slack cannot open the DM."""
        if not is_user(routing_id):
            return routing_id
        key = self.keys.dm(routing_id)
        known = self.redis.get(key)
        if known is not None:
            return as_text(known)
        try:
            answer = self.client.conversations_open(users=routing_id)
        except SlackApiError as exc:
            if error_code(exc) != "missing_scope":
                raise
            # Installed before the bot opened DMs (no im:write): chat.postMessage takes the
            # user id as before; a lost post there cannot be looked for.
            _warn_missing_scope(exc, "open a DM with", routing_id)
            return routing_id
        channel = str(answer["channel"]["id"])
        self.redis.set(key, channel, ex=DM_SECONDS)
        return channel

    def ready_to_post(self, routing_id: str) -> str:
        """The conversation to post in for ``routing_id``, with the bot joined to it when
        it is a public channel. A private channel is returned as it is (the post says
        whether the bot was invited). Raises ``SlackApiError`` for Slack's refusals (an
        archived channel, a missing scope, a rate limit)."""
        channel = self.conversation_of(routing_id)
        if not channel.startswith("C"):
            return channel
        key = self.keys.joined(channel)
        if self.redis.exists(key):
            return channel
        try:
            self.client.conversations_join(channel=channel)
        except SlackApiError as exc:
            if error_code(exc) == "missing_scope":
                # Installed before the bot joined channels (no channels:join): it posts with
                # chat:write.public as before; thread answers there do not reach it.
                _warn_missing_scope(exc, "join", channel)
                return channel
            if error_code(exc) != NOT_JOINABLE:
                raise
        self.redis.set(key, "1", ex=max(1, int(self.joined_for_seconds)))
        return channel

    def forget(self, channel: str) -> None:
        """Join ``channel`` again before the next post there (the bot left or was removed)."""
        forget_joined(self.redis, self.keys.keys, channel)


def forget_joined(redis: Redis, keys: KeySpace, channel: str) -> None:
    """Forget that the bot joined ``channel``: the next post there joins it first. For the
    bot's own departure from a channel (``channel_left``) as much as for Slack's
    ``not_in_channel``."""
    redis.delete(BotKeys(keys).joined(channel))


def _warn_missing_scope(exc: SlackApiError, what: str, target: str) -> None:
    logger.warning(
        "cannot %s %s (the bot token lacks %s; reinstall the app from manifest.yml): "
        "posting there as it is",
        what,
        target,
        exc.response.get("needed") or "a scope",
    )
