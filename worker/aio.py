"""``AsyncHandoffs``: the asyncio twin of ``Handoffs`` for async agents.

Each call runs the synchronous client in a thread (a Redis round trip is well under a
millisecond, so this costs little), except ``wait``, which listens for the decision on an
asyncio Redis connection and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Unpack

import redis.asyncio as aioredis

from store.connection import open_async_client
from store.models import AuditEvent, Handoff, Page, RequestType, Status
from worker.client import Handoffs, RequestOptions, check_request_options

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
        """Connect to Redis at ``url``, configured from the environment's HANDOFF_*
        settings as ``Handoffs.from_url`` is; ``options`` are those of ``Handoffs``."""
        handoffs = Handoffs.from_url(url, **options)  # checks the URL first
        return cls(handoffs, open_async_client(url))

    async def request_approval(
        self,
        *,
        run_id: str,
        thread_id: str,
        action: str,
        args: dict[str, Any] | None = None,
        args_schema: dict[str, Any] | None = None,
        description: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """See ``Handoffs.request_approval``."""
        # Checked here too, so the TypeError names this method and is raised in the
        # caller's task before a thread is taken.
        check_request_options(AsyncHandoffs.request_approval, options)
        return await asyncio.to_thread(
            self.sync.request_approval,
            run_id=run_id,
            thread_id=thread_id,
            action=action,
            args=args,
            args_schema=args_schema,
            description=description,
            **options,
        )

    async def ask(
        self,
        *,
        run_id: str,
        thread_id: str,
        question: str,
        choices: Sequence[str] | None = None,
        answer_schema: dict[str, Any] | None = None,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """See ``Handoffs.ask``."""
        check_request_options(AsyncHandoffs.ask, options)
        return await asyncio.to_thread(
            self.sync.ask,
            run_id=run_id,
            thread_id=thread_id,
            question=question,
            choices=choices,
            answer_schema=answer_schema,
            **options,
        )

    async def request_correction(
        self,
        *,
        run_id: str,
        thread_id: str,
        draft: str,
        instructions: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """See ``Handoffs.request_correction``."""
        check_request_options(AsyncHandoffs.request_correction, options)
        return await asyncio.to_thread(
            self.sync.request_correction,
            run_id=run_id,
            thread_id=thread_id,
            draft=draft,
            instructions=instructions,
            **options,
        )

    async def escalate(
        self,
        *,
        run_id: str,
        thread_id: str,
        summary: str,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """See ``Handoffs.escalate``."""
        check_request_options(AsyncHandoffs.escalate, options)
        return await asyncio.to_thread(
            self.sync.escalate, run_id=run_id, thread_id=thread_id, summary=summary, **options
        )

    async def request(
        self,
        request_type: RequestType | str,
        payload: dict[str, Any],
        *,
        run_id: str,
        thread_id: str,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """See ``Handoffs.request``."""
        check_request_options(AsyncHandoffs.request, options)
        return await asyncio.to_thread(
            self.sync.request,
            request_type,
            payload,
            run_id=run_id,
            thread_id=thread_id,
            **options,
        )

    async def get(self, handoff_id: str) -> Handoff:
        """See ``Handoffs.get``."""
        return await asyncio.to_thread(self.sync.get, handoff_id)

    async def decide(
        self,
        handoff_id: str,
        outcome: Status | str,
        *,
        by: str,
        comment: str | None = None,
        answer: str | None = None,
        answer_data: dict[str, Any] | None = None,
        edited_args: dict[str, Any] | None = None,
        corrected_draft: str | None = None,
        via: str = "api",
    ) -> Handoff:
        """See ``Handoffs.decide``."""
        return await asyncio.to_thread(
            self.sync.decide,
            handoff_id,
            outcome,
            by=by,
            comment=comment,
            answer=answer,
            answer_data=answer_data,
            edited_args=edited_args,
            corrected_draft=corrected_draft,
            via=via,
        )

    async def cancel(
        self, handoff_id: str, *, reason: str | None = None, by: str = "agent", resume: bool = True
    ) -> Handoff:
        """See ``Handoffs.cancel``."""
        return await asyncio.to_thread(
            self.sync.cancel, handoff_id, reason=reason, by=by, resume=resume
        )

    async def claim(self, handoff_id: str, *, by: str, take_over: bool = False) -> Handoff:
        """See ``Handoffs.claim``."""
        return await asyncio.to_thread(self.sync.claim, handoff_id, by=by, take_over=take_over)

    async def retry_resume(self, handoff_id: str, *, by: str = "api") -> Handoff:
        """See ``Handoffs.retry_resume``."""
        return await asyncio.to_thread(self.sync.retry_resume, handoff_id, by=by)

    async def list_pending(
        self,
        *,
        channel: str | None = None,
        run_id: str | None = None,
        reviewer: str | None = None,
        request_type: RequestType | str | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> Page:
        """See ``Handoffs.list_pending``."""
        return await asyncio.to_thread(
            self.sync.list_pending,
            channel=channel,
            run_id=run_id,
            reviewer=reviewer,
            request_type=request_type,
            cursor=cursor,
            limit=limit,
        )

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
