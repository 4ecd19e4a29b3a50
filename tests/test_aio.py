"""AsyncHandoffs: the asyncio client; waiting must not block the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis.asyncio as aioredis

from store.models import Status
from worker.aio import AsyncHandoffs
from worker.client import Handoffs

RUN = {"run_id": "run-1", "thread_id": "t-1"}


def decide_in_thread(handoffs: Handoffs, handoff_id: str, delay: float) -> threading.Thread:
    def decide() -> None:
        time.sleep(delay)
        handoffs.decide(handoff_id, "answered", by="U1", answer="ACME")

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


def test_ask_then_wait_returns_the_answer_decided_in_another_thread(
    handoffs: Handoffs, redis_url: str
) -> None:
    async def scenario() -> tuple[float, int]:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        try:
            handoff = await client.ask(**RUN, question="Which customer?")
            assert (await client.get(handoff.id)).is_pending
            thread = decide_in_thread(handoffs, handoff.id, delay=0.3)
            ticker = asyncio.create_task(tick())
            started = time.monotonic()
            answered = await client.wait(handoff.id, timeout=10)
            waited = time.monotonic() - started
            ticker.cancel()
            thread.join()
            assert answered.status is Status.ANSWERED
            assert answered.resume_data is not None
            assert answered.resume_data.answer == "ACME"
            return waited, ticks
        finally:
            await client.aclose()

    waited, ticks = asyncio.run(scenario())

    assert 0.25 <= waited < 0.4  # woken by the decision, not by a periodic re-read
    assert ticks >= 10  # the event loop kept running while waiting


def test_wait_times_out_on_a_pending_handoff(handoffs: Handoffs, redis_url: str) -> None:
    async def scenario() -> float:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        try:
            handoff = await client.ask(**RUN, question="?")
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=handoff.id):
                await client.wait(handoff.id, timeout=0.3)
            assert (await client.get(handoff.id)).is_pending
            return time.monotonic() - started
        finally:
            await client.aclose()

    elapsed = asyncio.run(scenario())

    assert 0.3 <= elapsed < 0.6


def test_async_methods_reach_the_same_store_as_the_sync_client(
    handoffs: Handoffs, redis_url: str
) -> None:
    async def scenario() -> None:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        try:
            approval = await client.request_approval(**RUN, action="deploy", channel="C1")
            escalation = await client.escalate(**RUN, summary="help")
            correction = await client.request_correction(**RUN, draft="d")
            page = await client.list_pending(channel="C1")
            assert [h.id for h in page.items] == [approval.id]
            await client.claim(escalation.id, by="U1")
            resolved = await client.decide(escalation.id, "answered", by="U1", answer="ok")
            cancelled = await client.cancel(correction.id, by="agent")
            approved = await client.decide(approval.id, "approved", by="U2")
            assert resolved.status is Status.ANSWERED
            assert cancelled.status is Status.CANCELLED
            assert approved.status is Status.APPROVED
            assert [e.event for e in await client.audit(escalation.id)] == [
                "created",
                "claimed",
                "decided",
            ]
            assert (await client.wait(approval.id, timeout=1)).status is Status.APPROVED
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert handoffs.list_pending().items == []
