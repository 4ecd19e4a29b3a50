"""Refuse a signed HTTP request that was already accepted once (a replay).

A Slack signature covers the timestamp and the body, and stays valid for five minutes
either side of its timestamp: anyone who captures a request (a proxy log, a leaked
capture) could send it again within that window, and it would verify. So each accepted
signature is remembered in Redis (``SET NX``) until it can no longer verify; a second use
is refused.

Slack's own retries of an event are not replays: they come re-signed with a fresh
timestamp, or, when retried within the same second, with the same signature but a new
``X-Slack-Retry-Num``. The retry number is therefore part of what is remembered for event
callbacks (their ``event_id`` dedupe, ``HandoffStore.first_sighting``, then makes a retry
change nothing). Interactions and commands are never retried by Slack, so for them the
retry header, which is not signed, is ignored.

Socket Mode requests carry no signature and never pass through here.
"""

from __future__ import annotations

import logging
import time

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.http.prefetch import Prefetched, PrefetchRead
from bot.http.signing import MAX_AGE_SECONDS
from bot.keys import BotKeys

logger = logging.getLogger(__name__)

CLOCK_MARGIN_SECONDS = 60
"""Kept this much longer than the signature can verify, for clock drift between machines."""

MAX_RETRY_NUM = 10
"""Highest ``X-Slack-Retry-Num`` taken as a retry (Slack retries an event 3 times)."""


class ReplayGuard:
    """Remembers the signed requests accepted in the last few minutes.

    Example::

        guard = ReplayGuard(redis, BotKeys(store.keys))
        if not guard.first_use(signature, sent_at=ts, retry_num=None):
            ...  # answer 401
    """

    def __init__(self, redis: Redis, keys: BotKeys) -> None:
        self.redis = redis
        self.keys = keys

    def first_use(self, signature: str, *, sent_at: int, retry_num: str | None = None) -> bool:
        """True the first time this signature (and retry number) is seen.

        ``retry_num`` is ``X-Slack-Retry-Num`` of an event callback, None for anything else.
        When Redis cannot be reached the request is let through: it cannot change anything
        then, and the listeners tell the person to try again.
        """
        key, ttl = self._marker(signature, sent_at=sent_at, retry_num=retry_num)
        try:
            return bool(self.redis.set(key, "1", nx=True, ex=ttl))
        except (RedisConnectionError, RedisTimeoutError):
            logger.warning("replay check skipped: Redis is unavailable")
            return True

    def first_use_and_read(
        self, signature: str, *, sent_at: int, read: PrefetchRead
    ) -> tuple[bool, Prefetched | None]:
        """``first_use`` (for a request that is not an event), and ``read`` made in the
        same round trip; no ``Prefetched`` when the read failed or Redis cannot be reached.

        A click on a handoff button reads its handoff first thing: reading it here saves
        the click a round trip to Redis.
        """
        key, ttl = self._marker(signature, sent_at=sent_at, retry_num=None)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, "1", nx=True, ex=ttl)
        read.queue(pipe)
        try:
            first, reply = pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError):
            logger.warning("replay check skipped: Redis is unavailable")
            return True, None
        if isinstance(first, Exception):
            raise first
        if isinstance(reply, Exception):
            # Such as a script the server has not loaded since it restarted: the listener
            # reads for itself, which loads it.
            logger.debug("prefetch of %s failed: %s", read.key, reply)
            return bool(first), None
        return bool(first), Prefetched(read.key, reply)

    def _marker(self, signature: str, *, sent_at: int, retry_num: str | None) -> tuple[str, int]:
        """The key remembering this request, and for how many seconds it must be kept."""
        fingerprint = signature.removeprefix("v0=")
        if retry_num is not None and retry_num.isdigit() and int(retry_num) <= MAX_RETRY_NUM:
            fingerprint += f":retry{int(retry_num)}"
        ttl = int(sent_at + MAX_AGE_SECONDS - time.time()) + CLOCK_MARGIN_SECONDS
        return self.keys.seen_request(fingerprint), max(ttl, 1)
