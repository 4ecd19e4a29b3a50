"""CrewAI's environment has the mcp 1.x CrewAI pins, not the mcp extra's 2.x: the MCP server
counts as not installed there, so `handoff api` (and `handoff dev`, which runs it) starts and
`/mcp` says what to install, instead of failing to import the SDK it was written for."""

from __future__ import annotations

import importlib.metadata

import httpx
from redis import Redis

from bot import mcp as mcp_extra
from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from tests.support.api_server import serve_api
from worker.client import Handoffs


def test_crewais_mcp_1x_is_not_taken_for_the_mcp_extra_and_the_api_still_serves(
    redis: Redis, redis_url: str
) -> None:
    assert importlib.metadata.version("mcp").startswith("1.")  # CrewAI's pin, installed
    assert mcp_extra.installed() is False

    handoffs = Handoffs(redis)
    key = ApiKeys(redis, handoffs.store.keys).create("host").key
    with serve_api(handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        auth = {"Authorization": f"Bearer {key}"}
        answer = httpx.post(f"{url}/mcp", headers=auth, json={"jsonrpc": "2.0"})
        listed = httpx.get(f"{url}/v1/handoffs", headers=auth)
    assert answer.status_code == 501
    assert "mcp >= 2.3" in answer.json()["detail"]
    assert listed.status_code == 200
