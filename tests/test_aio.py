"""AsyncHandoffs: the asyncio client; waiting must not block the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis import Redis

from store.models import Handoff, RequestType, Status
from tests.support.creating import CREATING_METHODS, creating_call
from tests.support.loop_ticks import LoopTicks
from tests.support.redis_state import snapshot
from worker.aio import AsyncHandoffs
from worker.client import REQUEST_OPTIONS, Handoffs

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
        ticks = LoopTicks()
        try:
            handoff = await client.ask(**RUN, question="Which customer?")
            assert (await client.get(handoff.id)).is_pending
            thread = decide_in_thread(handoffs, handoff.id, delay=0.3)
            ticks.start()
            started = time.monotonic()
            answered = await client.wait(handoff.id, timeout=10)
            waited = time.monotonic() - started
            ticked = ticks.stop()
            thread.join()
            assert answered.status is Status.ANSWERED
            assert answered.resume_data is not None
            assert answered.resume_data.answer == "ACME"
            return waited, ticked
        finally:
            await client.aclose()

    waited, ticks = asyncio.run(scenario())

    # Woken by the decision, not by the periodic re-read (every 5 s); the upper bound leaves
    # room for a loaded machine.
    assert 0.25 <= waited < 2.0
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

    assert 0.3 <= elapsed < 2


def test_async_methods_reach_the_same_store_as_the_sync_client(
    handoffs: Handoffs, redis_url: str
) -> None:
    async def scenario() -> None:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        try:
            approval = await client.request_approval(**RUN, action="deploy", channel="C01")
            escalation = await client.escalate(**RUN, summary="help")
            correction = await client.request_correction(**RUN, draft="d")
            page = await client.list_pending(channel="C01")
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


def _creating_call(client: AsyncHandoffs, method: str) -> Callable[..., Awaitable[Handoff]]:
    """``method`` of ``client`` with its required arguments bound; takes the options."""
    return creating_call(client, method, RUN)


@pytest.mark.parametrize("method", CREATING_METHODS)
@pytest.mark.parametrize(
    ("unknown", "named"),
    [
        ({"reviewer": ["U1"]}, "argument 'reviewer' (did you mean 'reviewers'?);"),
        ({"totally_bogus": 5}, "argument 'totally_bogus';"),
    ],
)
def test_an_unknown_option_is_a_type_error_naming_it_and_writes_nothing(
    redis: Redis,
    handoffs: Handoffs,
    redis_url: str,
    method: str,
    unknown: dict[str, Any],
    named: str,
) -> None:
    handoffs.ask(**RUN, question="an unrelated handoff already stored")
    before = snapshot(redis)

    async def scenario() -> tuple[str, Handoff]:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        try:
            create = _creating_call(client, method)
            with pytest.raises(TypeError) as caught:
                await create(**unknown)
            assert snapshot(redis) == before
            return str(caught.value), await create()  # fine without the unknown option
        finally:
            await client.aclose()

    message, created = asyncio.run(scenario())

    assert message.startswith(f"AsyncHandoffs.{method}() got unexpected keyword {named}")
    accepted = set(message.split("; it accepts ")[1].split(", "))
    assert accepted >= REQUEST_OPTIONS | {"run_id", "thread_id"}
    assert created.is_pending


def test_generic_request_creates_a_handoff_of_any_type(handoffs: Handoffs, redis_url: str) -> None:
    async def scenario() -> Handoff:
        client = AsyncHandoffs(handoffs, aioredis.Redis.from_url(redis_url))
        try:
            return await client.request(
                "escalation", {"kind": "escalation", "summary": "help"}, **RUN, channel="C09"
            )
        finally:
            await client.aclose()

    created = asyncio.run(scenario())

    stored = handoffs.get(created.id)
    assert (stored.request_type, stored.channel) == (RequestType.ESCALATION, "C09")
