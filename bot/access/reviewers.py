"""Who may decide a handoff: its reviewers (users and user groups), admins, never the
requester themselves when self-approval is blocked."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.config import Settings
from store.keys import KeySpace
from store.models import Handoff

logger = logging.getLogger(__name__)


class ReviewerPolicy:
    """Answers "may this Slack user decide this handoff?", with user groups resolved
    through ``usergroups.users.list`` and cached in Redis."""

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: KeySpace,
        *,
        admins: Iterable[str] = (),
        default_reviewers: Iterable[str] = (),
        block_self_approval: bool = True,
        cache_seconds: int = 300,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = keys
        self.admins = frozenset(admins)
        self.default_reviewers = list(default_reviewers)
        self.block_self_approval = block_self_approval
        self.cache_seconds = cache_seconds

    @classmethod
    def from_settings(
        cls, settings: Settings, client: WebClient, redis: Redis, keys: KeySpace
    ) -> ReviewerPolicy:
        """The policy the settings describe (admins, default reviewers, self-approval)."""
        return cls(
            client,
            redis,
            keys,
            admins=settings.admin_ids,
            default_reviewers=settings.default_reviewer_ids,
            block_self_approval=settings.block_self_approval,
            cache_seconds=settings.usergroup_cache_seconds,
        )

    def denial(self, user_id: str, handoff: Handoff, *, channel: str | None = None) -> str | None:
        """Why ``user_id`` may not decide ``handoff``, or None when they may.

        ``channel`` is where the user acted: once a handoff is escalated to a channel,
        anyone there may decide it; once escalated to a user group, its members may.
        """
        if self.block_self_approval and handoff.requester and handoff.requester == user_id:
            return "You asked for this, so someone else has to decide it."
        if user_id in self.admins:
            return None
        if handoff.escalated_at and handoff.escalate_to:
            target = handoff.escalate_to
            if target == channel:
                return None
            if _is_usergroup(target) and user_id in self.group_members(target):
                return None
        reviewers = handoff.reviewers or self.default_reviewers
        if not reviewers or user_id in reviewers:
            return None
        for group in (r for r in reviewers if _is_usergroup(r)):
            if user_id in self.group_members(group):
                return None
        names = ", ".join(_mention(r) for r in reviewers[:10])
        return f"Only {names} can decide this request."

    def group_members(self, group_id: str) -> frozenset[str]:
        """Members of a Slack user group, cached for ``cache_seconds``."""
        key = f"{self.keys.prefix}usergroup:{group_id}"
        cached = self.redis.get(key)
        if cached is not None:
            return frozenset(json.loads(cached))
        try:
            response = self.client.usergroups_users_list(usergroup=group_id)
            members = list(response.get("users") or [])
        except SlackApiError as exc:
            logger.warning("cannot list user group %s: %s", group_id, exc.response.get("error"))
            return frozenset()
        except (SlackClientError, OSError) as exc:
            # Slack unreachable: deny for now (nothing cached), rather than fail the click.
            logger.warning("cannot list user group %s: %s", group_id, exc)
            return frozenset()
        if self.cache_seconds:
            self.redis.set(key, json.dumps(members), ex=self.cache_seconds)
        return frozenset(members)


def _is_usergroup(reviewer: str) -> bool:
    return reviewer.startswith("S")


def _mention(reviewer: str) -> str:
    return f"<!subteam^{reviewer}>" if _is_usergroup(reviewer) else f"<@{reviewer}>"
