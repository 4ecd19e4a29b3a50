"""``AsyncHandoffs``: the asyncio twin of ``Handoffs`` for async agents.

Each call runs the synchronous client in a thread (a Redis round trip is well under a
millisecond, so this costs little), except ``wait``, which listens for the decision on an
asyncio Redis connection and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from store.models import AuditEvent, Handoff, Page
from worker.client import Handoffs

_WAIT_RECHECK_SECONDS = 5.0


class AsyncHandoffs:
    """Async twin of ``Handoffs``; each method takes the same arguments.

    Example::

        handoffs = AsyncHandoffs.from_url("redis://localhost:6379")
        h = await handoffs.ask(run_id="r1", thread_id="t1", question="Which customer?")
        answered = await handoffs.wait(h.id, timeout=60)
    """

    def __init__(self, handoffs: Handoffs, redis: aioredis.Redis) -> None:
        self.sync = handoffs
        self.redis = redis

    @classmethod
    def from_url(cls, url: str, **options: Any) -> AsyncHandoffs:
        """Connect to Redis at ``url``; ``options`` are those of ``Handoffs``."""
        return cls(Handoffs.from_url(url, **options), aioredis.Redis.from_url(url))

    async def request_approval(self, **kwargs: Any) -> Handoff:
        """See ``Handoffs.request_approval``."""
        return await asyncio.to_thread(self.sync.request_approval, **kwargs)

    async def ask(self, **kwargs: Any) -> Handoff:
        """See ``Handoffs.ask``."""
        return await asyncio.to_thread(self.sync.ask, **kwargs)

    async def request_correction(self, **kwargs: Any) -> Handoff:
        """See ``Handoffs.request_correction``."""
        return await asyncio.to_thread(self.sync.request_correction, **kwargs)

    async def escalate(self, **kwargs: Any) -> Handoff:
        """See ``Handoffs.escalate``."""
        return await asyncio.to_thread(self.sync.escalate, **kwargs)

    async def get(self, handoff_id: str) -> Handoff:
        """See ``Handoffs.get``."""
        return await asyncio.to_thread(self.sync.get, handoff_id)

    async def decide(self, handoff_id: str, outcome: str, **kwargs: Any) -> Handoff:
        """See ``Handoffs.decide``."""
        return await asyncio.to_thread(self.sync.decide, handoff_id, outcome, **kwargs)

    async def cancel(self, handoff_id: str, **kwargs: Any) -> Handoff:
        """See ``Handoffs.cancel``."""
        return await asyncio.to_thread(self.sync.cancel, handoff_id, **kwargs)

    async def claim(self, handoff_id: str, **kwargs: Any) -> Handoff:
        """See ``Handoffs.claim``."""
        return await asyncio.to_thread(self.sync.claim, handoff_id, **kwargs)

    async def retry_resume(self, handoff_id: str, **kwargs: Any) -> Handoff:
        """See ``Handoffs.retry_resume``."""
        return await asyncio.to_thread(self.sync.retry_resume, handoff_id, **kwargs)

    async def list_pending(self, **kwargs: Any) -> Page:
        """See ``Handoffs.list_pending``."""
        return await asyncio.to_thread(self.sync.list_pending, **kwargs)

    async def audit(self, handoff_id: str) -> list[AuditEvent]:
        """See ``Handoffs.audit``."""
        return await asyncio.to_thread(self.sync.audit, handoff_id)

    async def wait(self, handoff_id: str, timeout: float | None = None) -> Handoff:
        """Wait for the decision without blocking the event loop; see ``Handoffs.wait``."""
        channel = self.sync.store.keys.decided_channel(handoff_id)
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        try:
            handoff = await self.get(handoff_id)
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            while handoff.is_pending:
                remaining = _WAIT_RECHECK_SECONDS
                if deadline is not None:
                    remaining = min(remaining, deadline - loop.time())
                    if remaining <= 0:
                        raise TimeoutError(f"handoff {handoff_id} still pending after {timeout} s")
                await pubsub.get_message(timeout=remaining)
                handoff = await self.get(handoff_id)
            return handoff
        finally:
            await pubsub.aclose()

    async def aclose(self) -> None:
        """Close the asyncio Redis connection."""
        await self.redis.aclose()
