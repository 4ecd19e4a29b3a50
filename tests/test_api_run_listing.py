"""GET /v1/handoffs?run_id=...: a run's pending handoffs, a page at a time, whether the run
keeps its one handoff in its bucket or a set, for run ids with odd characters; a decided
one is gone from it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from tests.support.api_server import serve_api
from worker.client import Handoffs


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[str]:
    store = Handoffs(redis).store
    config = ApiConfig(redis_url=redis_url, creates_per_minute=1000)
    with serve_api(store, config) as url:
        yield url


def _pages(client: httpx.Client, run: str, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"run_id": run, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        answer = client.get("/v1/handoffs", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        ids.extend(h["id"] for h in page["handoffs"])
        assert all(h["status"] == "pending" and h["run_id"] == run for h in page["handoffs"])
        cursor = page["next_cursor"]
        if not cursor:
            return ids


@pytest.mark.parametrize("run", ["run 1", "a+b&c=d", "*", "ü😀/?#", "x" * 256])
def test_a_runs_pending_handoffs_are_listed_over_http(redis: Redis, api: str, run: str) -> None:
    keys = ApiKeys(redis, Handoffs(redis).store.keys)
    agent = httpx.Client(
        base_url=api, headers={"Authorization": f"Bearer {keys.create('agent').key}"}, timeout=30
    )
    admin = httpx.Client(
        base_url=api,
        headers={"Authorization": f"Bearer {keys.create('ops', admin=True).key}"},
        timeout=30,
    )
    body = {
        "request_type": "approval",
        "run_id": run,
        "thread_id": "t",
        "action": {"name": "refund", "args": {"amount": 30}},
    }
    made = []
    for _ in range(3):
        created = agent.post("/v1/handoffs", json=body)
        assert created.status_code == 201, created.text
        made.append(created.json()["id"])
        for client in (agent, admin):
            for limit in (1, 2):
                assert _pages(client, run, limit) == made
    for handoff_id in made[:-1]:
        decided = admin.post(
            f"/v1/handoffs/{handoff_id}/decision", json={"outcome": "rejected", "by": "U0X"}
        )
        assert decided.status_code == 200, decided.text
    for client in (agent, admin):
        assert _pages(client, run, 1) == made[-1:]
