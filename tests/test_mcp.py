"""`handoff mcp` driven by the official MCP client over stdio, as an agent host launches it,
against a real `handoff api` (uvicorn) on the test Redis: each tool's loop (a person decides
while the call waits, with progress notifications), the timeout path and get_handoff, a retried
call creating no second handoff, permission_prompt's two answers, bad input and a bad key."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from redis import Redis

from bot.api.app import ApiConfig
from bot.blockkit import ids
from store.api_keys import ApiKeys
from tests.conftest import ROOT
from tests.support.api_server import serve_api
from tests.support.slack_env import ALICE, CHANNEL, SlackEnv, running_slack
from worker.client import Handoffs


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[tuple[str, str, Handoffs]]:
    handoffs = Handoffs(redis)
    key = ApiKeys(redis, handoffs.store.keys).create("host").key
    with serve_api(handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        yield url, key, handoffs


def _session(url: str, key: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot.cli", "mcp", "--run-id", "host-run"],
        env={
            "PYTHONPATH": str(ROOT),
            "HANDOFF_API_URL": url,
            "HANDOFF_API_KEY": key,
            "PATH": os.environ.get("PATH", ""),
        },
        cwd=str(ROOT),
    )


def _decide_when_asked(
    handoffs: Handoffs,
    decide: Callable[[str], Any],
    *,
    after: float = 0.5,
    run_id: str = "host-run",
) -> threading.Thread:
    """Decide the first pending handoff of the run once it appears (a person in Slack)."""

    def run() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pending = handoffs.list_pending(run_id=run_id).items
            if pending:
                time.sleep(after)
                decide(pending[0].id)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
    progress: list[Any] = []

    async def go() -> Any:
        async with stdio_client(_session(url, key)) as streams, ClientSession(*streams) as session:
            await session.initialize()

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append((done, total, message))

            return await session.call_tool(tool, arguments, progress_callback=on_progress)

    return anyio.run(go), progress


def test_the_tools_and_their_output_schemas_are_listed(api: tuple[str, str, Handoffs]) -> None:
    url, key, _ = api

    async def go() -> Any:
        async with stdio_client(_session(url, key)) as streams, ClientSession(*streams) as session:
            await session.initialize()
            return await session.list_tools()

    tools = {tool.name: tool for tool in anyio.run(go).tools}

    assert set(tools) == {
        "request_approval", "ask_human", "request_correction", "escalate", "get_handoff",
        "permission_prompt",
    }  # fmt: skip
    assert tools["request_approval"].output_schema is not None
    assert "status" in tools["ask_human"].output_schema["properties"]


def test_a_question_waits_for_the_answer_with_progress(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "answered", by="U0ANA", answer="eu-west"), after=1.5
    )

    result, progress = _call(
        url, key, "ask_human", {"question": "Which region?", "choices": ["eu-west", "us-east"]}
    )
    decider.join()

    assert not result.is_error, result.content
    assert result.structured_content["status"] == "answered"
    assert result.structured_content["answer"] == "eu-west"
    assert result.structured_content["decided_by"] == "U0ANA"
    assert progress and "waiting for a person" in progress[0][2]
    [handoff] = [handoffs.get(result.structured_content["id"])]
    assert handoff.api_key == "host" and handoff.run_id == "host-run"


def test_the_timeout_returns_pending_and_get_handoff_the_decision(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api

    pending, _ = _call(url, key, "request_approval", {"action": "deploy", "timeout_seconds": 1})
    handoff_id = pending.structured_content["id"]
    handoffs.decide(handoff_id, "rejected", by="U0ANA", comment="not today")
    later, _ = _call(url, key, "get_handoff", {"id": handoff_id})

    assert pending.structured_content["status"] == "pending"
    assert later.structured_content["status"] == "rejected"
    assert later.structured_content["comment"] == "not today"


def test_a_retried_call_with_the_same_key_asks_once(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    arguments = {"draft": "Dear customer", "idempotency_key": "draft-7", "timeout_seconds": 1}

    first, _ = _call(url, key, "request_correction", arguments)
    second, _ = _call(url, key, "request_correction", arguments)

    assert first.structured_content["id"] == second.structured_content["id"]
    assert len(handoffs.list_pending(run_id="host-run").items) == 1


def test_permission_prompt_allows_with_the_edited_input(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs,
        lambda i: handoffs.decide(i, "approved", by="U0ANA", edited_args={"command": "ls -l"}),
    )

    result, _ = _call(
        url,
        key,
        "permission_prompt",
        {"tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_1"},
    )
    decider.join()

    [text] = result.content
    assert json.loads(text.text) == {"behavior": "allow", "updatedInput": {"command": "ls -l"}}


def test_permission_prompt_denies_with_the_reason(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "rejected", by="U0ANA", comment="never rm")
    )

    result, _ = _call(
        url, key, "permission_prompt", {"tool_name": "Bash", "input": {"command": "rm -rf /"}}
    )
    decider.join()

    [text] = result.content
    answer = json.loads(text.text)
    assert answer["behavior"] == "deny" and "never rm" in answer["message"]
    assert set(answer) == {"behavior", "message"}


def test_bad_input_and_a_bad_key_are_tool_errors_that_change_nothing(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api

    missing, _ = _call(url, key, "ask_human", {"choices": ["a"]})
    bad_channel, _ = _call(url, key, "ask_human", {"question": "?", "channel": "#general"})
    bad_key, _ = _call(url, "hk_wrong", "ask_human", {"question": "?"})

    assert missing.is_error and "question" in missing.content[0].text
    assert bad_channel.is_error and "channel" in bad_channel.content[0].text
    assert bad_key.is_error and "401" in bad_key.content[0].text
    assert handoffs.list_pending().items == []
    assert httpx.get(f"{url}/healthz").status_code == 200


def _call_http(url: str, key: str, tool: str, arguments: dict[str, Any]) -> tuple[Any, list[Any]]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    progress: list[Any] = []

    async def go() -> Any:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with (
            client,
            streamable_http_client(f"{url}/mcp", http_client=client) as streams,
            ClientSession(*streams[:2]) as session,
        ):
            await session.initialize()

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append((done, total, message))

            return await session.call_tool(tool, arguments, progress_callback=on_progress)

    return anyio.run(go), progress


def test_the_same_tools_over_streamable_http_on_the_api(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "approved", by="U0ANA"), run_id="mcp"
    )

    result, _ = _call_http(url, key, "request_approval", {"action": "deploy", "args": {"v": 2}})
    decider.join()

    assert not result.is_error, result.content
    assert result.structured_content["status"] == "approved"
    # Created with the caller's key, so scoped to it as over /v1.
    assert handoffs.get(result.structured_content["id"]).api_key == "host"


def test_streamable_http_refuses_a_missing_or_bad_key(api: tuple[str, str, Handoffs]) -> None:
    url, _, _ = api

    anonymous = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    wrong = httpx.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Authorization": "Bearer hk_nope"},
    )

    for answer in (anonymous, wrong):
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Bearer")


def test_permission_prompt_denies_after_expiry(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.store.expire_now(i, expired_by="U0ADMIN")
    )

    result, _ = _call(url, key, "permission_prompt", {"tool_name": "Deploy", "input": {}})
    decider.join()

    answer = json.loads(result.content[0].text)
    assert answer == {"behavior": "deny", "message": "expired: the request expired"}


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def test_a_tool_call_is_answered_from_slack(slack: SlackEnv, redis: Redis, redis_url: str) -> None:
    key = ApiKeys(redis, slack.handoffs.store.keys).create("host").key

    def click_when_posted() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pending = slack.handoffs.list_pending(run_id="host-run").items
            if pending and pending[0].message_refs.get("ts"):
                slack.standin.click(ALICE, slack.posted(pending[0].id), ids.APPROVE)
                return
            time.sleep(0.05)

    with serve_api(slack.handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        clicker = threading.Thread(target=click_when_posted, daemon=True)
        clicker.start()
        arguments = {"action": "restart", "args": {"service": "api"}, "channel": CHANNEL}
        result, _ = _call(url, key, "request_approval", {**arguments, "reviewers": [ALICE]})
        clicker.join()

    assert result.structured_content["status"] == "approved"
    assert result.structured_content["decided_by"] == ALICE


def test_bad_ids_and_keys_are_tool_errors(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api

    bad_id, _ = _call(url, key, "get_handoff", {"id": "../../v1/audit"})
    bad_key, _ = _call(url, key, "ask_human", {"question": "?", "idempotency_key": "k\r\nX: 1"})

    assert bad_id.is_error and bad_key.is_error
    assert handoffs.list_pending().items == []


def test_a_streamable_http_call_answers_and_one_key_is_required(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "answered", by="U0ANA", answer="yes"), run_id="mcp"
    )

    result, _ = _call_http(url, key, "ask_human", {"question": "Ship it?"})
    decider.join()
    doubled = httpx.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers=[("Authorization", f"Bearer {key}"), ("Authorization", "Bearer hk_other")],
    )

    assert result.structured_content["answer"] == "yes"
    assert doubled.status_code == 401
