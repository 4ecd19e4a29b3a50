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

Both answers are kept per process: a DM's id never changes, and a join is repeated after
``bot.defaults.JOINED_CHANNEL_SECONDS`` (it costs one tier-3 call, 50 a minute).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import defaults
from bot.delivery.slack_errors import error_code

NOT_JOINABLE = "method_not_supported_for_channel_type"
"""``conversations.join``'s answer for a private channel (or a DM): only an invitation
puts the bot there."""

NOT_A_MEMBER_ERRORS = frozenset({"channel_not_found", "not_in_channel"})
"""What ``chat.postMessage`` answers in a private channel the bot is not in."""


def is_user(routing_id: str) -> bool:
    """Is ``routing_id`` a person (``U…``/``W…``), to be reached in a DM?"""
    return routing_id[:1] in ("U", "W")


class Conversations:
    """Turns routing ids into conversations the bot is in (see the module's docstring).

    Example::

        conversations = Conversations(client)
        channel = conversations.ready_to_post("U0ALICE")  # "D0ALICE", Alice's DM
    """

    def __init__(
        self,
        client: WebClient,
        *,
        joined_for_seconds: float = defaults.JOINED_CHANNEL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.joined_for_seconds = joined_for_seconds
        self.clock = clock
        self._dms: dict[str, str] = {}
        self._joined: dict[str, float] = {}
        self._lock = threading.Lock()

    def conversation_of(self, routing_id: str) -> str:
        """The conversation id of a routing id: a person's DM with the bot for a user id,
        else the id itself. Raises ``SlackApiError`` when Slack cannot open the DM."""
        if not is_user(routing_id):
            return routing_id
        with self._lock:
            known = self._dms.get(routing_id)
        if known is not None:
            return known
        answer = self.client.conversations_open(users=routing_id)
        channel = str(answer["channel"]["id"])
        with self._lock:
            self._dms[routing_id] = channel
        return channel

    def ready_to_post(self, routing_id: str) -> str:
        """The conversation to post in for ``routing_id``, with the bot joined to it when
        it is a public channel. A private channel is returned as it is (the post says
        whether the bot was invited). Raises ``SlackApiError`` for Slack's refusals (an
        archived channel, a missing scope, a rate limit)."""
        channel = self.conversation_of(routing_id)
        if not channel.startswith("C") or self._recently_joined(channel):
            return channel
        try:
            self.client.conversations_join(channel=channel)
        except SlackApiError as exc:
            if error_code(exc) != NOT_JOINABLE:
                raise
        with self._lock:
            self._joined[channel] = self.clock()
        return channel

    def forget(self, channel: str) -> None:
        """Join ``channel`` again before the next post there (the bot may have been removed)."""
        with self._lock:
            self._joined.pop(channel, None)

    def _recently_joined(self, channel: str) -> bool:
        with self._lock:
            joined_at = self._joined.get(channel)
        return joined_at is not None and self.clock() - joined_at < self.joined_for_seconds
