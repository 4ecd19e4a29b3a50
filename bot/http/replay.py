"""Refuse a signed HTTP request that was already accepted once (a replay); run an event once.

A Slack signature covers the timestamp and the body, and stays valid for five minutes
either side of its timestamp: anyone who captures a request (a proxy log, a leaked
capture) could send it again within that window, and it would verify. So what was accepted
is remembered in Redis (``SET NX``), keyed only by what the signature covers. Headers it
does not cover, ``X-Slack-Retry-Num`` among them, never make a request new:

- an interaction or a command is remembered by its signature (the HMAC of its timestamp
  and body) until the signature can no longer verify; a second use is refused;
- an event is remembered by its ``event_id``, which is inside the signed body. Slack sends
  an event again when it got no 2xx within 3 seconds (at once, after a minute, after five
  minutes): the same body, re-signed, or with the very same signature when it retries
  within the same second. Those deliveries, and replays of any of them, are all the same
  event, and it runs once, whatever its type (``app_home_opened`` as much as a thread
  reply, which ``HandoffStore.first_sighting`` also dedupes for Socket Mode).

The guard fails closed: when Redis cannot be asked, the answer is ``Seen.UNKNOWN``, the
request does not go on, and nothing is recorded, so Slack's next delivery of an event (once
Redis is back) is still its first and runs. A write that reached Redis before the
connection failed stays recorded: that request counts as seen, never as run twice.

Socket Mode requests carry no signature and never pass through here.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass

from redis import Redis
from redis.exceptions import RedisError

from bot.http.prefetch import Prefetched, PrefetchRead
from bot.http.signing import MAX_AGE_SECONDS
from bot.keys import BotKeys
from store.decoding import as_text

logger = logging.getLogger(__name__)

CLOCK_MARGIN_SECONDS = 60
"""Kept this much longer than the signature can verify, for clock drift between machines."""

EVENT_MEMORY_SECONDS = 3600
"""How long an event id is remembered: well past Slack's last retry of an event (about
five minutes after the first delivery) plus the five minutes its signature verifies."""

MAX_EVENT_ID_CHARS = 64
"""Longer event ids (Slack's are about a dozen characters) are remembered by a digest."""


class Seen(enum.Enum):
    """What the guard knows of a request."""

    FIRST = "first"
    """Not accepted before: it goes on, and is remembered from now on."""
    AGAIN = "again"
    """Accepted before: a replay, or another delivery of an event."""
    UNKNOWN = "unknown"
    """Redis could not be asked: it may be a replay, so it does not go on."""


@dataclass(frozen=True)
class Checked:
    """The guard's answer for a request, and what was read for it in the same round trip
    (nothing when the read failed, or the request does not go on)."""

    seen: Seen
    prefetched: Prefetched | None = None


class ReplayGuard:
    """Remembers the signed requests accepted in the last few minutes, and the events.

    Example::

        guard = ReplayGuard(redis, BotKeys(store.keys))
        if guard.check_request(signature, sent_at=ts).seen is not Seen.FIRST:
            ...  # refuse it
        if guard.check_event(body["event_id"]) is Seen.AGAIN:
            ...  # acknowledge it, without running it again
    """

    def __init__(self, redis: Redis, keys: BotKeys) -> None:
        self.redis = redis
        self.keys = keys

    def check_request(
        self, signature: str, *, sent_at: int, read: PrefetchRead | None = None
    ) -> Checked:
        """``Seen.FIRST`` the first time this signature is seen, with ``read`` made in the
        same round trip (a click on a handoff button reads its handoff first thing: reading
        it here saves the click a round trip to Redis).

        ``signature`` has been verified: it is the HMAC of the timestamp and the body, and
        so names exactly one signed request.
        """
        fingerprint = signature.removeprefix("v0=")
        ttl = int(sent_at + MAX_AGE_SECONDS - time.time()) + CLOCK_MARGIN_SECONDS
        return self._set_once(self.keys.seen_request(fingerprint), max(ttl, 1), read)

    def check_event(self, event_id: str) -> Seen:
        """``Seen.FIRST`` the first time an Events API ``event_id`` is seen (within
        ``EVENT_MEMORY_SECONDS``), whichever delivery of it this is."""
        key = self.keys.seen_request(f"event:{_event_fingerprint(event_id)}")
        return self._set_once(key, EVENT_MEMORY_SECONDS, None).seen

    def _set_once(self, key: str, ttl: int, read: PrefetchRead | None) -> Checked:
        # The marker holds a token of this call, read back in the same round trip: when the
        # client resends both after a lost reply (store.settings.redis_retry), the marker it
        # finds is its own, so the request is still a first use. (SET NX alone would answer
        # "already there" to its own resend, and a new event would be dropped as seen.)
        token = secrets.token_hex(8)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, token, nx=True, ex=ttl)
        pipe.get(key)
        try:
            if read is not None:
                read.queue(pipe)  # may load its script first: a round trip of its own
            replies = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            logger.warning("replay check impossible, request refused: %s", type(exc).__name__)
            return Checked(Seen.UNKNOWN)
        failed = next((r for r in replies[:2] if isinstance(r, Exception)), None)
        if failed is not None:
            # Such as a full or read-only server: not known to be new, so not let through.
            logger.warning("replay check failed, request refused: %s", failed)
            return Checked(Seen.UNKNOWN)
        if replies[1] is None or as_text(replies[1]) != token:
            return Checked(Seen.AGAIN)
        return Checked(Seen.FIRST, _prefetched(read, replies[2]) if read is not None else None)


def _prefetched(read: PrefetchRead, reply: object) -> Prefetched | None:
    if isinstance(reply, Exception):
        # Such as a script the server has not loaded since it restarted: the listener
        # reads for itself, which loads it.
        logger.debug("prefetch of %s failed: %s", read.key, reply)
        return None
    return Prefetched(read.key, reply)


def _event_fingerprint(event_id: str) -> str:
    """The event id as it goes into a key: itself when short and plain, else a digest."""
    if len(event_id) <= MAX_EVENT_ID_CHARS and event_id.isascii() and event_id.isalnum():
        return event_id
    return hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
