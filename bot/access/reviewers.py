"""Who may decide a handoff: its reviewers (users and user groups), admins, never the
requester themselves when self-approval is blocked.

A handoff that names no reviewers (and ``HANDOFF_DEFAULT_REVIEWERS`` is unset) is the
admins' alone, unless ``HANDOFF_ALLOW_ANY_CHANNEL_MEMBER`` opens it to the members of its
channel: never to everyone in the workspace, since the channel may be private, and a click
on the App Home or ``/handoff show`` does not prove that someone can read the channel.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis import Redis
from slack_sdk import WebClient

from bot import defaults
from bot.access.admins import AdminPolicy
from bot.access.channel_members import ChannelMembers
from bot.access.usergroups import UserGroups
from bot.config import Settings
from bot.keys import BotKeys
from bot.mrkdwn import channel_mention, is_usergroup, reviewer_mention
from store.keys import KeySpace
from store.models import Handoff


class ReviewerPolicy:
    """Answers "may this Slack user decide this handoff?".

    User groups are resolved through ``usergroups`` (``bot.access.usergroups``, the cache the
    listings use too), channel members through ``channel_members``
    (``bot.access.channel_members``), admins through ``admins`` (``bot.access.admins``, the
    app's one admin policy). ``admins`` may be given as user ids (``HANDOFF_ADMINS``);
    ``cache_seconds`` is the cache time of the caches not given; ``from_settings`` builds
    them all from the settings.
    """

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: KeySpace,
        *,
        admins: AdminPolicy | Iterable[str] = (),
        default_reviewers: Iterable[str] = (),
        block_self_approval: bool = True,
        cache_seconds: int = defaults.USERGROUP_CACHE_SECONDS,
        usergroups: UserGroups | None = None,
        allow_any_channel_member: bool = False,
        channel_members: ChannelMembers | None = None,
        default_channel: str | None = None,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = keys
        bot_keys = BotKeys(keys)
        self.admins = (
            admins
            if isinstance(admins, AdminPolicy)
            else AdminPolicy(client, redis, bot_keys, admins=admins)
        )
        """Who the admins are (one policy for deciding, listing and admin commands)."""
        self.usergroups = usergroups or UserGroups(
            client, redis, bot_keys, cache_seconds=cache_seconds
        )
        """The members of user groups (one cache for deciding and listing)."""
        self.default_reviewers = list(default_reviewers)
        self.block_self_approval = block_self_approval
        self.allow_any_channel_member = allow_any_channel_member
        """May the members of its channel decide a handoff that names no reviewers?"""
        self.default_channel = default_channel
        """Where handoffs naming no channel are posted (``HANDOFF_CHANNEL``)."""
        self.channel_members = channel_members or ChannelMembers(
            client, redis, bot_keys, cache_seconds=cache_seconds
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, client: WebClient, redis: Redis, keys: KeySpace
    ) -> ReviewerPolicy:
        """The policy the settings describe (admins, default reviewers, self-approval, how
        long user groups are cached)."""
        bot_keys = BotKeys(keys)
        return cls(
            client,
            redis,
            keys,
            admins=AdminPolicy.from_settings(settings, client, redis, bot_keys),
            default_reviewers=settings.default_reviewer_ids,
            block_self_approval=settings.block_self_approval,
            usergroups=UserGroups.from_settings(settings, client, redis, bot_keys),
            allow_any_channel_member=settings.allow_any_channel_member,
            channel_members=ChannelMembers.from_settings(settings, client, redis, bot_keys),
            default_channel=settings.channel,
        )

    def _self_approval_blocked(self, handoff: Handoff) -> bool:
        # A routing policy's rule may decide it per handoff (requester_may_approve); the
        # bot's HANDOFF_BLOCK_SELF_APPROVAL decides the rest.
        if not handoff.requester:
            return False
        if handoff.requester_may_approve is not None:
            return not handoff.requester_may_approve
        return self.block_self_approval

    def denial(self, user_id: str, handoff: Handoff, *, channel: str | None = None) -> str | None:
        """Why ``user_id`` may not decide ``handoff``, or None when they may.

        ``channel`` is where the user acted: once a handoff is escalated to a channel, its
        members may decide it there; once escalated to a user group, its members may.
        """
        if self._self_approval_blocked(handoff) and handoff.requester == user_id:
            return "You asked for this, so someone else has to decide it."
        if self.admins.may_decide_anything(user_id):
            return None
        if handoff.escalated_at and handoff.escalate_to:
            target = handoff.escalate_to
            if target == channel and self.channel_members.is_member(target, user_id) is True:
                return None
            if is_usergroup(target) and user_id in self.usergroups.members(target):
                return None
        reviewers = handoff.reviewers or self.default_reviewers
        if not reviewers:
            return self._unassigned_denial(user_id, handoff)
        if user_id in reviewers:
            return None
        for group in (r for r in reviewers if is_usergroup(r)):
            if user_id in self.usergroups.members(group):
                return None
        names = ", ".join(reviewer_mention(r) for r in reviewers[:10])
        return f"Only {names} can decide this request."

    def _unassigned_denial(self, user_id: str, handoff: Handoff) -> str | None:
        if not self.allow_any_channel_member:
            return (
                "This request names no reviewers, so only a handoff admin can decide it "
                "(or reassign it to reviewers)."
            )
        channel = self.home_channel(handoff)
        if not channel:
            return "This request names no reviewers and no channel, so only an admin can decide it."
        member = self.channel_members.is_member(channel, user_id)
        if member is None:
            return (
                f"slack-handoff cannot ask Slack who is in {channel_mention(channel)} right "
                "now, so nothing was done. Please try again in a minute."
            )
        if member:
            return None
        return f"Only members of {channel_mention(channel)} can decide this request."

    def home_channel(self, handoff: Handoff) -> str | None:
        """The channel a handoff is posted in (its primary message's), else the one it will
        be posted in."""
        posted = handoff.message_refs.get("channel")
        return str(posted) if posted else handoff.channel or self.default_channel
