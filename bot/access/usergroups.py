"""The workspace's user groups, as Slack reports them, cached in Redis: the one source of
"who is in group G" (``ReviewerPolicy``: may this person decide?) and "which groups is U
in" (``Listings``: this person's queue, hence also their App Home).

Both directions come from one snapshot. ``usergroups.list`` with ``include_users=true``
answers, in one call, every group with its members; the snapshot of that answer is written
to one Redis hash (``BotKeys.usergroups``) in one transaction and expires as a whole after
``HANDOFF_USERGROUP_CACHE_SECONDS``. So the permission check and the queue always read the
same version of a group: both the old members until the snapshot expires, then both the new
ones. (``usergroups.users.list`` answers only "members of G": a user's groups would take a
call per group, and per-group cache entries would expire at different times.)

The hash holds, per group, its members and, per member, their groups (both JSON lists), so a
lookup is one ``HMGET`` of two small fields, however large the workspace. Disabled groups are
not listed by Slack, so they have no members here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

from redis import Redis
from redis.typing import EncodableT, FieldT
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot import defaults
from bot.config import Settings
from bot.keys import BotKeys

logger = logging.getLogger(__name__)

_FETCHED_AT = "fetched_at"
"""The snapshot's field holding when it was taken (ms): present whenever the snapshot is."""


def _group_field(group_id: str) -> str:
    return f"group:{group_id}"


def _user_field(user_id: str) -> str:
    return f"user:{user_id}"


class UserGroups:
    """Members of the workspace's user groups, and the groups of each member.

    Example::

        groups = UserGroups(client, redis, BotKeys(store.keys), cache_seconds=300)
        "U0BOB" in groups.members("S0FINANCE")   # may Bob decide for S0FINANCE?
        groups.groups_of("U0BOB")                # ["S0FINANCE"]: whose queues Bob sees

    When Slack cannot be asked (an API error, or unreachable), a lookup answers "no
    members" / "no groups" (deny rather than fail a click) and nothing is cached, so the
    next lookup asks again. With ``cache_seconds=0`` every lookup asks Slack.
    """

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: BotKeys,
        *,
        cache_seconds: int = defaults.USERGROUP_CACHE_SECONDS,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = keys
        self.cache_seconds = cache_seconds

    @classmethod
    def from_settings(
        cls, settings: Settings, client: WebClient, redis: Redis, keys: BotKeys
    ) -> UserGroups:
        """The cache with ``HANDOFF_USERGROUP_CACHE_SECONDS``."""
        return cls(client, redis, keys, cache_seconds=settings.usergroup_cache_seconds)

    def members(self, group_id: str) -> frozenset[str]:
        """The members of the user group ``group_id`` (none for an unknown group)."""
        return frozenset(self._lookup(_group_field(group_id)))

    def groups_of(self, user_id: str) -> list[str]:
        """The user groups ``user_id`` belongs to, sorted."""
        return sorted(self._lookup(_user_field(user_id)))

    def forget(self) -> None:
        """Drop the snapshot (what its expiry does): the next lookup asks Slack."""
        self.redis.delete(self.keys.usergroups)

    def _lookup(self, field: str) -> list[str]:
        if self.cache_seconds:
            fetched_at, value = self.redis.hmget(self.keys.usergroups, [_FETCHED_AT, field])
            if fetched_at is not None:
                return list(json.loads(value)) if value is not None else []
        snapshot = self._fetch()
        if snapshot is None:
            return []
        if self.cache_seconds:
            pipe = self.redis.pipeline(transaction=True)
            pipe.delete(self.keys.usergroups)
            pipe.hset(self.keys.usergroups, mapping=cast("Mapping[FieldT, EncodableT]", snapshot))
            pipe.expire(self.keys.usergroups, self.cache_seconds)
            pipe.execute()
        value = snapshot.get(field)
        return list(json.loads(value)) if value is not None else []

    def _fetch(self) -> dict[str, str] | None:
        """The snapshot's fields from ``usergroups.list``, or None when Slack did not answer."""
        try:
            response = self.client.usergroups_list(include_users=True)
        except SlackApiError as exc:
            logger.warning("cannot list user groups: %s", exc.response.get("error"))
            return None
        except (SlackClientError, OSError) as exc:
            logger.warning("cannot list user groups: %s", exc)
            return None
        groups: dict[str, list[str]] = {}
        users: dict[str, list[str]] = {}
        listed: list[dict[str, Any]] = list(response.get("usergroups") or [])
        for group in listed:
            group_id = str(group["id"])
            members = [str(member) for member in group.get("users") or []]
            groups[group_id] = members
            for member in members:
                users.setdefault(member, []).append(group_id)
        snapshot = {_FETCHED_AT: str(int(time.time() * 1000))}
        snapshot.update({_group_field(g): json.dumps(m) for g, m in groups.items()})
        snapshot.update({_user_field(u): json.dumps(sorted(g)) for u, g in users.items()})
        return snapshot
