"""Long-poll waits (``GET /v1/handoffs/{id}?wait=...``) woken by the store's push.

One process holds one pattern subscription (``PSUBSCRIBE {ns}:decided:*``) on one Redis
connection for all its waiters, rather than a connection or a subscription per waiter: a
waiter is then an ``asyncio.Event`` in a dict, so thousands of them cost memory, not
connections or polling. A waiter registers before it reads the handoff, so a decision
between its read and its wait still wakes it. If the subscription drops, every waiter is
woken to read again, and the hub subscribes again with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

from store import scripts
from store.api_keys import REVOKED
from store.decoding import as_text
from store.keys import KeySpace
from store.models import Handoff
from store.repository import HandoffStore

logger = logging.getLogger(__name__)

_RECONNECT_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)


class DecisionHub:
    """Wakes the waiters of a handoff when its decision is published."""

    def __init__(self, redis: AsyncRedis, keys: KeySpace) -> None:
        self._redis = redis
        self._pattern = keys.decided_channel("*")
        self._prefix = keys.decided_channel("")
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    @property
    def waiting(self) -> int:
        """How many waits are held now."""
        return sum(len(events) for events in self._waiters.values())

    async def start(self) -> None:
        """Subscribe, and return once the subscription is in place."""
        self._task = asyncio.create_task(self._listen(), name="decision-hub")
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._wake_all()

    def register(self, handoff_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters[handoff_id].add(event)
        return event

    def unregister(self, handoff_id: str, event: asyncio.Event) -> None:
        events = self._waiters.get(handoff_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiters[handoff_id]

    def _wake(self, handoff_id: str) -> None:
        for event in self._waiters.get(handoff_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()

    async def _listen(self) -> None:
        failures = 0
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(self._pattern)
                self._subscribed.set()
                if failures:
                    # Decisions made while the subscription was down were not heard.
                    self._wake_all()
                failures = 0
                while True:
                    message = await pubsub.get_message(timeout=30)
                    if message is None:
                        continue
                    channel = message.get("channel")
                    if isinstance(channel, bytes):
                        channel = channel.decode()
                    if isinstance(channel, str) and channel.startswith(self._prefix):
                        self._wake(channel[len(self._prefix) :])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self._subscribed.clear()
                self._wake_all()
                delay = _RECONNECT_SECONDS[min(failures, len(_RECONNECT_SECONDS) - 1)]
                failures += 1
                logger.warning("decision subscription lost (%s); again in %.1f s", exc, delay)
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()


class AsyncReads:
    """Reads of a handoff on the event loop (the store's own READ script, over an asyncio
    client), for the waits: a thousand waiters woken together then read without a thread
    each from the pool (the sync store's reads queue there, ~10 ms apart)."""

    def __init__(self, redis: AsyncRedis, store: HandoffStore) -> None:
        self._store = store
        self._redis = redis
        self._read = redis.register_script(scripts.READ)

    async def key_is_live(self, name: str) -> bool:
        """The key named ``name`` was not revoked (a wait re-checks its key once it ends: a
        revoke while it waited must not hand the decision to the revoked caller)."""
        hashed = await self._redis.hget(self._store.keys.api_key_names, name)
        return hashed is not None and as_text(hashed) != REVOKED

    async def confirm_replicated(self, handoff_id: str) -> None:
        """Return once ``HANDOFF_MIN_REPLICA_ACKS`` replicas have what the master holds (the
        handoff's decision, as just read, among it), else ``ReplicasNotConfirmed`` (a 503
        with ``Retry-After``): a decision its reviewer was told to retry must not be handed
        to the caller, whose run would act on what a failover may undo."""
        acks = self._store.config.replica_acks
        if not acks.replicas:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            # WAIT after a command on the same connection (the API is never on a cluster).
            pipe.exists(self._store.keys.handoff(handoff_id))
            pipe.execute_command(*acks.wait_args())
            _, confirmed = await pipe.execute()
        acks.check(int(confirmed))

    async def get(self, handoff_id: str) -> Handoff:
        """The handoff as stored; ``HandoffNotFound`` for none."""
        keys = self._store.keys
        document = await self._read(keys=[keys.handoff(handoff_id)], args=[keys.prefix, handoff_id])
        return self._store.from_document(handoff_id, document)

    async def get_with_key(self, handoff_id: str, key_name: str) -> tuple[Handoff, bool]:
        """The handoff as stored (``HandoffNotFound`` for none) and whether the key named
        ``key_name`` is live (``key_is_live``), in one round trip: what a woken wait reads
        before it answers, the decision's latency to the agent."""
        keys = self._store.keys
        async with self._redis.pipeline(transaction=False) as pipe:
            await self._read(
                keys=[keys.handoff(handoff_id)], args=[keys.prefix, handoff_id], client=pipe
            )
            pipe.hget(keys.api_key_names, key_name)
            document, hashed = await pipe.execute()
        live = hashed is not None and as_text(hashed) != REVOKED
        return self._store.from_document(handoff_id, document), live
