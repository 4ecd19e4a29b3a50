"""``Handoffs.from_url`` (and ``AsyncHandoffs.from_url``) configure the client as
``from_env`` does, from REDIS_URL's neighbours (HANDOFF_*), with the URL given in place of
REDIS_URL: an agent using it writes where the workers read."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis import Redis

from store import defaults
from store.exceptions import PayloadTooLarge
from store.keys import KeySpace
from store.settings import StoreSettings
from worker.aio import AsyncHandoffs
from worker.client import Handoffs

RUN = {"run_id": "run-from-url", "thread_id": "t-1"}


@pytest.fixture
def agents_namespace(monkeypatch: pytest.MonkeyPatch, redis: Redis) -> str:
    """HANDOFF_NAMESPACE set in the environment, and a REDIS_URL there that points nowhere
    (the URL passed to ``from_url`` must win over it)."""
    monkeypatch.setenv("HANDOFF_NAMESPACE", "agents-ns")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    return "agents-ns"


def test_a_handoff_made_with_from_url_is_where_from_env_looks(
    redis: Redis, redis_url: str, agents_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handoff = Handoffs.from_url(redis_url).ask(question="Which region?", **RUN)

    assert redis.exists(KeySpace(agents_namespace).handoff(handoff.id))
    assert not redis.exists(KeySpace(defaults.NAMESPACE).handoff(handoff.id))
    # What the workers and the bot build from the same environment finds it.
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert StoreSettings.from_env().open_store().get(handoff.id).id == handoff.id
    assert Handoffs.from_env().get(handoff.id).run_id == RUN["run_id"]


def test_from_url_takes_every_handoff_setting_and_options_still_override(
    redis: Redis, redis_url: str, agents_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDOFF_MAX_PAYLOAD_BYTES", "200")
    monkeypatch.setenv("HANDOFF_RESUME_MAX_ATTEMPTS", "7")

    client = Handoffs.from_url(redis_url)
    assert client.store.config.tasks.resume_max_attempts == 7
    with pytest.raises(PayloadTooLarge):
        client.ask(question="x" * 300, **RUN)

    chosen = Handoffs.from_url(redis_url, namespace="chosen-ns", max_payload_bytes=10_000)
    handoff = chosen.ask(question="x" * 300, **RUN)
    assert redis.exists(KeySpace("chosen-ns").handoff(handoff.id))
    assert not redis.exists(KeySpace(agents_namespace).handoff(handoff.id))


def test_async_from_url_uses_the_namespace_of_the_environment(
    redis: Redis, redis_url: str, agents_namespace: str
) -> None:
    async def ask_and_wait() -> str:
        client = AsyncHandoffs.from_url(redis_url)
        try:
            handoff = await client.ask(question="Which customer?", **RUN)
            # Decided through the namespace's store: the async wait hears it on its channel.
            waiting = asyncio.create_task(client.wait(handoff.id, timeout=10))
            await asyncio.sleep(0.1)
            Handoffs(redis, namespace=agents_namespace).decide(
                handoff.id, "answered", by="U0ALICE", answer="Dana"
            )
            decided = await waiting
            assert decided.resume_data is not None
            return decided.resume_data.answer or ""
        finally:
            await client.aclose()

    assert asyncio.run(ask_and_wait()) == "Dana"
    assert redis.keys(f"{{{defaults.NAMESPACE}}}:h:*") == []


def test_a_bad_url_argument_is_named_as_the_argument() -> None:
    import pytest

    from store.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"^from_url: not a Redis URL"):
        Handoffs.from_url("http://example.com")


def test_one_client_holds_more_waits_at_once_than_redis_pys_default_pool(
    redis: Redis, redis_url: str
) -> None:
    """Each wait holds a subscribed connection; redis-py 8 caps a pool at 100 by default,
    so an agent process waiting on more than that at once failed (MaxConnectionsError)."""
    handoffs = Handoffs.from_url(redis_url)
    ids = [handoffs.ask(question=f"Region {n}?", **RUN).id for n in range(150)]
    channels = [handoffs.store.keys.decided_channel(handoff_id) for handoff_id in ids]
    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        waits = [pool.submit(handoffs.wait, handoff_id, timeout=60) for handoff_id in ids]
        deadline = time.monotonic() + 30
        while sum(n for _, n in redis.pubsub_numsub(*channels)) < len(ids):
            assert time.monotonic() < deadline, "not every wait subscribed"
            assert not [w for w in waits if w.done()], [w.exception() for w in waits if w.done()]
            time.sleep(0.05)
        for handoff_id in ids:
            handoffs.decide(handoff_id, "answered", by="U_ALICE", answer="eu")
        assert {w.result(timeout=30).status.value for w in waits} == {"answered"}
