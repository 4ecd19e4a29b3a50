"""Redis keys the Slack side owns: caches of Slack answers and App Home bookkeeping.

They live in the store's namespace (same ``{ns}:`` hash tag, see ``store.keys``) under
``{ns}:bot:``, so deleting a namespace deletes them too, and they never collide with the
store's own keys.

=====================================  ======  ===============================================
key                                    type    contents
=====================================  ======  ===============================================
``{ns}:bot:admin:<user>``              string  "1"/"0": is the user a workspace admin or owner
                                               (``users.info``); expires
``{ns}:bot:usergroups``                hash    the workspace's user groups, one snapshot
                                               of ``usergroups.list`` (``include_users``):
                                               ``group:<id>`` -> JSON [member ids],
                                               ``user:<id>`` -> JSON [group ids],
                                               ``fetched_at`` -> ms; expires as a whole
                                               (``bot.access.usergroups``)
``{ns}:bot:channel:<id>:members``      set     the channel's members (``conversations.members``)
                                               and the marker "*"; expires
                                               (``bot.access.channel_members``)
``{ns}:bot:joined:<channel>``          string  "1": the bot joined that public channel
                                               (``conversations.join``); expires, and is
                                               deleted when the bot leaves or is removed
``{ns}:bot:dm:<user>``                 string  the id of the bot's DM with the user
                                               (``conversations.open``); expires
``{ns}:bot:unassigned``                zset    pending ids with no reviewers (score 0), kept
                                               up to date by ``bot.queries.unassigned``
``{ns}:bot:unassigned:walk``           string  last pending id walked while building it, or
                                               "done"
``{ns}:bot:unassigned:read``           string  last audit stream id applied to it; expires
``{ns}:bot:home:viewers``              zset    user -> when they last opened the App Home (ms)
``{ns}:bot:home:shown:<user>``         set     handoff ids on the user's published Home
``{ns}:bot:home:end:<user>``           string  last id of that Home's queue, when it is full
``{ns}:bot:home:hash:<user>``          string  the ``hash`` Slack gave that Home when it was
                                               last published (``views.publish``); expires
``{ns}:bot:home:decided:<user>``       zset    handoff id -> when the user decided it (ms)
``{ns}:bot:home:read:<user>``          string  newest audit stream id read for that zset
``{ns}:bot:ephemeral:seen:<user>``     zset    handoff id -> when it was shown with its
                                               buttons in the user's ephemeral replies (ms);
                                               entries older than a day are dropped, and
                                               the key expires a day after the last one
``{ns}:bot:request:<signature>``       string  a signed HTTP request already accepted (replay
                                               guard, ``bot.http.replay``); expires with the
                                               signature's freshness window
``{ns}:bot:request:event:<event_id>``  string  an event already let through (by its signed
                                               ``event_id``); expires after an hour
=====================================  ======  ===============================================
"""

from __future__ import annotations

from dataclasses import dataclass

from store.keys import KeySpace


@dataclass(frozen=True)
class BotKeys:
    """Names of the bot's own keys in one namespace."""

    keys: KeySpace

    @property
    def prefix(self) -> str:
        """The common prefix of the bot's keys."""
        return f"{self.keys.prefix}bot:"

    def admin(self, user_id: str) -> str:
        """Cached answer to "is this user a workspace admin or owner?"."""
        return f"{self.prefix}admin:{user_id}"

    @property
    def usergroups(self) -> str:
        """The cached snapshot of the workspace's user groups: each group's members and each
        member's groups (``bot.access.usergroups``)."""
        return f"{self.prefix}usergroups"

    def channel_members(self, channel: str) -> str:
        """The cached members of ``channel`` (``bot.access.channel_members``)."""
        return f"{self.prefix}channel:{channel}:members"

    def joined(self, channel: str) -> str:
        """Marker that the bot joined ``channel`` (``bot.delivery.conversations``)."""
        return f"{self.prefix}joined:{channel}"

    def dm(self, user_id: str) -> str:
        """The id of the bot's DM with ``user_id`` (``bot.delivery.conversations``)."""
        return f"{self.prefix}dm:{user_id}"

    @property
    def unassigned(self) -> str:
        """Pending handoffs that name no reviewers."""
        return f"{self.prefix}unassigned"

    @property
    def unassigned_walk(self) -> str:
        """How far the pending index was walked to build ``unassigned``."""
        return f"{self.prefix}unassigned:walk"

    @property
    def unassigned_read(self) -> str:
        """How far the audit stream was applied to ``unassigned``."""
        return f"{self.prefix}unassigned:read"

    @property
    def home_viewers(self) -> str:
        """Who opened the App Home, and when."""
        return f"{self.prefix}home:viewers"

    def home_shown(self, user_id: str) -> str:
        """The handoffs the user's published Home shows."""
        return f"{self.prefix}home:shown:{user_id}"

    def ephemeral_shown(self, user_id: str) -> str:
        """The handoffs shown with their buttons in ephemeral replies to the user (the
        details of ``/handoff show``), each with when, for a day. (A sorted set; the set
        once kept under ``ephemeral:shown:<user>`` grew as long as it was used.)"""
        return f"{self.prefix}ephemeral:seen:{user_id}"

    def home_queue_end(self, user_id: str) -> str:
        """The last handoff of the user's Home queue, when the queue is full."""
        return f"{self.prefix}home:end:{user_id}"

    def home_hash(self, user_id: str) -> str:
        """The hash of the user's published Home, passed to the next ``views.publish``."""
        return f"{self.prefix}home:hash:{user_id}"

    def home_decided(self, user_id: str) -> str:
        """What the user decided recently, for their Home."""
        return f"{self.prefix}home:decided:{user_id}"

    def home_read(self, user_id: str) -> str:
        """How far the audit stream was read for the user's recent decisions."""
        return f"{self.prefix}home:read:{user_id}"

    def seen_request(self, fingerprint: str) -> str:
        """Marker of a signed request already accepted (so a replay of it is refused)."""
        return f"{self.prefix}request:{fingerprint}"
