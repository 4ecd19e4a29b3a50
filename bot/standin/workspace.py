"""The stand-in's workspace state: members, channels, messages, views, trigger ids, response URLs.

One ``Workspace`` holds everything behind one re-entrant lock. The Web API (``webapi``), the HTTP
server and the acting-as-a-person side (``SlackStandIn``) all read and write it through here.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.standin.faults import Fault, RandomFaults
from bot.standin.rate_limits import RateLimits
from bot.standin.records import ApiCall, Ephemeral, Message, StandInUser, View

TRIGGER_TTL_SECONDS = 3.0
"""How long a trigger_id can open a modal (Slack: 3 seconds)."""
RESPONSE_URL_USES = 5
"""How many times a response_url can be posted to (Slack: 5)."""
RESPONSE_URL_TTL_SECONDS = 30 * 60
"""How long a response_url works (Slack: 30 minutes)."""
MAX_VIEW_STACK = 3
"""How many modals one person can have stacked (Slack: 3)."""


class ApiError(Exception):
    """A Web API error: answered as HTTP 200 ``{"ok": false, "error": error, **extra}``."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


@dataclass
class Trigger:
    """A trigger_id the stand-in issued with an interaction."""

    user: str
    issued_at: float
    used: bool = False


@dataclass
class ResponseUrl:
    """A response_url the stand-in issued with an interaction or a slash command."""

    user: str
    channel: str
    message_ts: str | None
    """The message the interaction came from (None for slash commands)."""
    is_ephemeral: bool
    issued_at: float
    uses: int = 0


class Workspace:
    """Everything the stand-in knows, guarded by ``lock`` (take it around every read or write)."""

    def __init__(
        self,
        *,
        team_id: str,
        team_domain: str,
        bot_user_id: str,
        bot_id: str,
        app_id: str,
        bot_name: str,
        users: Iterable[StandInUser],
        usergroups: Mapping[str, Sequence[str]],
        channels: Mapping[str, str],
        trigger_ttl: float,
    ) -> None:
        self.lock = threading.RLock()
        self.team_id = team_id
        self.team_domain = team_domain
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.trigger_ttl = trigger_ttl
        self.users: dict[str, StandInUser] = {user.id: user for user in users}
        self.users.setdefault(bot_user_id, StandInUser(bot_user_id, bot_name, is_bot=True))
        self.usergroups = {group: list(members) for group, members in usergroups.items()}
        self.channel_names: dict[str, str] = dict(channels)
        self.channel_members: dict[str, list[str]] = {}
        """Members of the channels given some (``SlackStandIn.set_channel_members``); any
        other channel has every person of the workspace (and the bot once it joined), a DM
        its person and the bot."""
        self.bot_channels: set[str] = set()
        """Channels the bot is in (it joined, was invited, or a test set it among the
        members); as in Slack, it is in no channel at first but its DMs."""
        self.private_channels: set[str] = set()
        """``C…`` channels that are private (every ``G…`` channel is): the bot cannot join
        them and sees nothing of them until it is invited."""
        self.scopes: frozenset[str] | None = None
        """The bot token's scopes (``SlackStandIn(scopes=...)``): a method needing one it
        lacks answers ``missing_scope``. None grants every scope."""
        self.messages: list[Message] = []
        self._message_at: dict[tuple[str, str], Message] = {}
        self.ephemerals: list[Ephemeral] = []
        self.views: dict[str, View] = {}
        self.stacks: dict[str, list[str]] = {}
        """Per person, the ids of their open modals, root first."""
        self.homes: dict[str, str] = {}
        """Per person, the id of their published App Home view."""
        self.triggers: dict[str, Trigger] = {}
        self.response_urls: dict[str, ResponseUrl] = {}
        self.calls: list[ApiCall] = []
        self.faults: dict[str, deque[Fault | None]] = {}
        self.random_faults: RandomFaults | None = None
        """Set by ``fail_randomly``: consulted when no queued fault applies."""
        self.rate_limits = RateLimits()
        """Set by ``limit`` and ``limit_like_slack``: calls over them are answered 429."""
        self.events: dict[str, bytes] = {}
        """Event bodies sent to the bot, by event_id, for ``resend_event``."""
        self._last_ts_micros = 0
        self._serial = 0
        self._run_tag = secrets.token_hex(3).upper()
        """Part of every event id: unique per stand-in, as Slack's are for all time (a bot
        keeping event ids to drop Slack's retries, across runs of `handoff dev` on one
        Redis, must never take a new event for an old one)."""

    # Ids and timestamps

    def next_ts(self) -> str:
        """A new message ts, like "1732900000.000100": time-based and strictly increasing."""
        with self.lock:
            now = int(time.time()) * 1_000_000 + 100
            self._last_ts_micros = max(now, self._last_ts_micros + 100)
            seconds, micros = divmod(self._last_ts_micros, 1_000_000)
            return f"{seconds}.{micros:06d}"

    def next_id(self, prefix: str) -> str:
        """A new Slack-looking id such as "V0000000007" or "Ev0000000008"."""
        with self.lock:
            self._serial += 1
            return f"{prefix}{self._serial:010d}"

    def next_event_id(self) -> str:
        """A new event id such as "Ev3FA9C10000000008", never one an earlier stand-in gave."""
        with self.lock:
            self._serial += 1
            return f"Ev{self._run_tag}{self._serial:08d}"

    def issue_trigger(self, user: str) -> str:
        """A fresh trigger_id for ``user``, usable once within ``trigger_ttl`` seconds."""
        with self.lock:
            self._serial += 1
            trigger_id = f"{7_700_000_000_000 + self._serial}.1111111111.{secrets.token_hex(16)}"
            self.triggers[trigger_id] = Trigger(user=user, issued_at=time.monotonic())
            return trigger_id

    def take_trigger(self, trigger_id: Any) -> str:
        """Use a trigger_id and return its person, or raise the ``ApiError`` Slack would answer."""
        with self.lock:
            trigger = self.triggers.get(str(trigger_id)) if trigger_id else None
            if trigger is None:
                raise ApiError("invalid_trigger_id")
            if trigger.used:
                raise ApiError("exchanged_trigger_id")
            if time.monotonic() - trigger.issued_at > self.trigger_ttl:
                raise ApiError("expired_trigger_id")
            trigger.used = True
            return trigger.user

    def issue_response_url(
        self, *, user: str, channel: str, message_ts: str | None, is_ephemeral: bool = False
    ) -> str:
        """A fresh response_url token (the stand-in serves it at ``/response/<token>``)."""
        with self.lock:
            token = secrets.token_urlsafe(12)
            self.response_urls[token] = ResponseUrl(
                user=user,
                channel=channel,
                message_ts=message_ts,
                is_ephemeral=is_ephemeral,
                issued_at=time.monotonic(),
            )
            return token

    # Channels and people

    def resolve_channel(self, channel: Any, *, ids_only: bool = True) -> str:
        """The conversation id of a "C…"/"G…"/"D…" id; with ``ids_only=False`` (only
        ``chat.postMessage`` takes more, as in Slack) also of a "#name" or a member's id
        (their DM with the bot).

        Raises ``ApiError("channel_not_found")`` otherwise.
        """
        name = str(channel or "")
        with self.lock:
            if ids_only:
                if re.fullmatch(r"[CGD][A-Z0-9]+", name):
                    return name
                raise ApiError("channel_not_found")
            if name.startswith("#") and len(name) > 1:
                for channel_id, known in self.channel_names.items():
                    if known == name[1:]:
                        return channel_id
                channel_id = "C" + (re.sub(r"[^A-Z0-9]", "", name[1:].upper()) or "X")[:10]
                self.channel_names.setdefault(channel_id, name[1:])
                return channel_id
            if re.fullmatch(r"[CGD][A-Z0-9]+", name):
                return name
            if name in self.users:
                return self.dm_channel(name)
        raise ApiError("channel_not_found")

    def dm_channel(self, user: str) -> str:
        """The id of the bot's direct-message channel with ``user``."""
        return "D" + user[1:]

    def members_of(self, channel: str) -> list[str]:
        """Who is in ``channel`` (see ``channel_members`` and ``bot_channels``), sorted."""
        with self.lock:
            if channel in self.channel_members:
                members = set(self.channel_members[channel])
            elif channel.startswith("D"):
                person = next((u for u in self.users if self.dm_channel(u) == channel), None)
                return sorted({self.bot_user_id, *([person] if person else [])})
            else:
                members = set(self.users) - {self.bot_user_id}
            members.discard(self.bot_user_id)
            if channel in self.bot_channels:
                members.add(self.bot_user_id)
            return sorted(members)

    def is_private(self, channel: str) -> bool:
        """Is ``channel`` a private channel (or a DM)?"""
        with self.lock:
            return channel[:1] in ("G", "D") or channel in self.private_channels

    def bot_is_member(self, channel: str) -> bool:
        """Is the bot in ``channel``? (Always in its DMs with the workspace's people; never
        in a DM between others.)"""
        with self.lock:
            if channel.startswith("D"):
                return any(self.dm_channel(user) == channel for user in self.users)
            return channel in self.bot_channels

    def is_member(self, channel: str, user: str) -> bool:
        """Is ``user`` (a person or the bot) in ``channel``?"""
        with self.lock:
            if user == self.bot_user_id:
                return self.bot_is_member(channel)
            return user in self.members_of(channel)

    def require_bot_in(self, channel: str) -> None:
        """Raise what Slack answers the bot for a conversation it is not in: a private one
        is ``channel_not_found`` (the bot cannot see it), a public one ``not_in_channel``."""
        with self.lock:
            if self.bot_is_member(channel):
                return
            raise ApiError("channel_not_found" if self.is_private(channel) else "not_in_channel")

    def channel_name(self, channel: str) -> str:
        """A channel's name: the configured one, or the id lower-cased."""
        with self.lock:
            return self.channel_names.get(channel, channel.lower())

    def user(self, user_id: str) -> StandInUser:
        """A member, or ``KeyError`` naming the configured ones."""
        with self.lock:
            if user_id not in self.users:
                raise KeyError(
                    f"no user {user_id!r} in the stand-in workspace; pass it in users= "
                    f"(known: {sorted(self.users)})"
                )
            return self.users[user_id]

    def user_object(self, user_id: str) -> dict[str, str]:
        """A person as interaction payloads name them."""
        user = self.user(user_id)
        return {"id": user.id, "username": user.name, "name": user.name, "team_id": self.team_id}

    # Messages

    def add_message(self, message: Message) -> None:
        """Record a posted message (kept in post order, and found by channel and ts)."""
        with self.lock:
            self.messages.append(message)
            self._message_at[(message.channel, message.ts)] = message

    def find_message(self, channel: str, ts: str) -> Message | None:
        """The message at (channel, ts), deleted or not."""
        with self.lock:
            return self._message_at.get((channel, ts))

    def permalink(self, channel: str, ts: str, thread_ts: str | None = None) -> str:
        """The message's permalink, in Slack's format."""
        link = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if thread_ts and thread_ts != ts:
            link += f"?thread_ts={thread_ts}&cid={channel}"
        return link

    def replies(self, channel: str, thread_ts: str) -> list[Message]:
        """The (not deleted) replies in a thread, oldest first."""
        with self.lock:
            return [
                message
                for message in self.messages
                if message.channel == channel
                and message.thread_ts == thread_ts
                and message.ts != thread_ts
                and not message.deleted
            ]

    # Faults

    def take_queued_fault(self, method: str) -> Fault | None:
        """The next fault queued for exactly ``method`` (never "*" nor a random one), used."""
        with self.lock:
            queue = self.faults.get(method)
            return queue.popleft() if queue else None

    def take_fault(self, method: str) -> Fault | None:
        """The next injected fault for ``method`` (or for "*"), consumed; else a random one
        if ``fail_randomly`` is on."""
        with self.lock:
            for key in (method, "*"):
                queue = self.faults.get(key)
                if queue:
                    return queue.popleft()  # None: a call let through (``after``)
            random_faults = self.random_faults
        return random_faults.draw(method) if random_faults is not None else None
