"""Who the handoff admins are: the one place that reads ``HANDOFF_ADMINS``.

Two questions, one policy:

* ``may_decide_anything``: the user ids in ``HANDOFF_ADMINS`` may decide any handoff (but
  their own when self-approval is blocked) and see every pending one in their queue
  (``ReviewerPolicy``, ``Listings``, the App Home). No Slack call.
* ``is_admin``: those, plus the workspace's admins and owners as ``users.info`` reports
  them, may run the admin subcommands of the slash command and see any handoff in full.
  Slack's answer is cached in Redis, so a command costs no Web API call in the common case,
  and a demoted admin loses the right within the cache time.

``ReviewerPolicy`` holds the app's one ``AdminPolicy`` (``ReviewerPolicy.admins``), and the
listeners reach it through it (``HandlerDeps.is_admin``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot import defaults
from bot.config import Settings
from bot.keys import BotKeys

logger = logging.getLogger(__name__)


class AdminPolicy:
    """Answers "may this Slack user decide anything?" and "may they run admin commands?".

    Example::

        admins = AdminPolicy(client, redis, BotKeys(store.keys), admins={"U0OPS"})
        if not admins.is_admin(user_id):
            ...
    """

    def __init__(
        self,
        client: WebClient,
        redis: Redis,
        keys: BotKeys,
        *,
        admins: Iterable[str] = (),
        cache_seconds: int = defaults.ADMIN_CACHE_SECONDS,
    ) -> None:
        self.client = client
        self.redis = redis
        self.keys = keys
        self.admins = frozenset(admins)
        """``HANDOFF_ADMINS``."""
        self.cache_seconds = cache_seconds

    @classmethod
    def from_settings(
        cls, settings: Settings, client: WebClient, redis: Redis, keys: BotKeys
    ) -> AdminPolicy:
        """The policy with ``HANDOFF_ADMINS``."""
        return cls(client, redis, keys, admins=settings.admin_ids)

    def may_decide_anything(self, user_id: str) -> bool:
        """True for ``HANDOFF_ADMINS``: they may decide any handoff (self-approval aside)."""
        return user_id in self.admins

    def is_admin(self, user_id: str) -> bool:
        """True for ``HANDOFF_ADMINS`` and for workspace admins and owners."""
        if self.may_decide_anything(user_id):
            return True
        key = self.keys.admin(user_id)
        cached = self.redis.get(key)
        if cached is not None:
            return cached == b"1"
        try:
            user = self.client.users_info(user=user_id).get("user") or {}
        except SlackApiError as exc:
            # Not cached: the next command asks again rather than locking an admin out.
            logger.warning("users.info failed for %s: %s", user_id, exc.response.get("error"))
            return False
        except (SlackClientError, OSError) as exc:
            # Slack unreachable: not an admin for now (nothing cached), rather than fail.
            logger.warning("users.info failed for %s: %s", user_id, exc)
            return False
        answer = bool(user.get("is_admin") or user.get("is_owner") or user.get("is_primary_owner"))
        if self.cache_seconds:
            self.redis.set(key, "1" if answer else "0", ex=self.cache_seconds)
        return answer
