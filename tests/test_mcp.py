"""`handoff mcp` driven by the official MCP client over stdio, as an agent host launches it,
against a real `handoff api` (uvicorn) on the test Redis: each tool's loop (a person decides
while the call waits, with progress notifications), the timeout path and get_handoff, a retried
call creating no second handoff, permission_prompt's two answers, bad input and a bad key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client
from redis import Redis

from bot.api.app import ApiConfig, build_app
from store.api_keys import ApiKeys
from store.defaults import MAX_PAYLOAD_BYTES
from tests.conftest import ROOT
from tests.support.api_server import serve_api, serve_app
from tests.support.mcp_hosts import HTTP_RUN, STDIO_RUN, call_http, call_stdio, stdio_params
from worker.client import Handoffs


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[tuple[str, str, Handoffs]]:
    handoffs = Handoffs(redis)
    key = ApiKeys(redis, handoffs.store.keys).create("host").key
    with serve_api(handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        yield url, key, handoffs


def _decide_when_asked(
    handoffs: Handoffs,
    decide: Callable[[str], Any],
    *,
    after: float = 0.5,
    run_id: str = STDIO_RUN,
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


def test_the_tools_and_their_output_schemas_are_listed(api: tuple[str, str, Handoffs]) -> None:
    url, key, _ = api

    async def go() -> Any:
        async with (
            stdio_client(stdio_params(url, key)) as streams,
            ClientSession(*streams) as session,
        ):
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

    result, progress = call_stdio(
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


def test_a_typed_question_returns_the_typed_answer(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    schema = {
        "type": "object",
        "required": ["region"],
        "properties": {
            "region": {"enum": ["eu-west", "us-east"]},
            "replicas": {"type": "integer", "minimum": 1},
        },
    }
    typed = {"region": "eu-west", "replicas": 3}
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "answered", by="U0ANA", answer_data=typed)
    )

    result, _ = call_stdio(
        url, key, "ask_human", {"question": "Where to?", "answer_schema": schema}
    )
    decider.join()

    assert not result.is_error, result.content
    assert result.structured_content["answer_data"] == typed
    assert result.structured_content["answer"] == "region: eu-west\nreplicas: 3"
    assert handoffs.get(result.structured_content["id"]).payload.answer_schema == schema
    refused, _ = call_stdio(
        url, key, "ask_human", {"question": "?", "answer_schema": {"type": "string"}}
    )
    assert refused.is_error and "answer_schema" in refused.content[0].text


def test_the_timeout_returns_pending_and_get_handoff_the_decision(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api

    pending, _ = call_stdio(
        url, key, "request_approval", {"action": "deploy", "timeout_seconds": 1}
    )
    handoff_id = pending.structured_content["id"]
    handoffs.decide(handoff_id, "rejected", by="U0ANA", comment="not today")
    later, _ = call_stdio(url, key, "get_handoff", {"id": handoff_id})

    assert pending.structured_content["status"] == "pending"
    assert later.structured_content["status"] == "rejected"
    assert later.structured_content["comment"] == "not today"


def test_an_approval_needing_two_returns_once_both_approved_with_the_approvers(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api

    def two_approve(handoff_id: str) -> None:
        handoffs.decide(handoff_id, "approved", by="U0ANA")
        handoffs.decide(handoff_id, "approved", by="U0BEN")

    decider = _decide_when_asked(handoffs, two_approve)
    result, _ = call_stdio(
        url, key, "request_approval", {"action": "deploy", "approvals_required": 2}
    )
    decider.join()

    assert result.structured_content["status"] == "approved"
    assert result.structured_content["approvers"] == ["U0ANA", "U0BEN"]
    assert handoffs.get(result.structured_content["id"]).quorum == (2, 1)


def test_a_retried_call_with_the_same_key_asks_once(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    arguments = {"draft": "Dear customer", "idempotency_key": "draft-7", "timeout_seconds": 1}

    first, _ = call_stdio(url, key, "request_correction", arguments)
    second, _ = call_stdio(url, key, "request_correction", arguments)

    assert first.structured_content["id"] == second.structured_content["id"]
    assert len(handoffs.list_pending(run_id=STDIO_RUN).items) == 1


def test_permission_prompt_allows_with_the_edited_input(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs,
        lambda i: handoffs.decide(i, "approved", by="U0ANA", edited_args={"command": "ls -l"}),
    )

    result, _ = call_stdio(
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

    result, _ = call_stdio(
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

    missing, _ = call_stdio(url, key, "ask_human", {"choices": ["a"]})
    bad_channel, _ = call_stdio(url, key, "ask_human", {"question": "?", "channel": "#general"})
    bad_key, _ = call_stdio(url, "hk_wrong", "ask_human", {"question": "?"})

    assert missing.is_error and "question" in missing.content[0].text
    assert bad_channel.is_error and "channel" in bad_channel.content[0].text
    assert bad_key.is_error and "401" in bad_key.content[0].text
    assert handoffs.list_pending().items == []
    assert httpx.get(f"{url}/healthz").status_code == 200


def test_the_same_tools_over_streamable_http_on_the_api(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs, lambda i: handoffs.decide(i, "approved", by="U0ANA"), run_id=HTTP_RUN
    )

    result, progress = call_http(
        url, key, "request_approval", {"action": "deploy", "args": {"v": 2}}
    )
    decider.join()

    assert not result.is_error, result.content
    assert result.structured_content["status"] == "approved"
    # Streamed (SSE), so the host hears progress while the person decides.
    assert progress and "waiting for a person" in progress[0][2]
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

    result, _ = call_stdio(url, key, "permission_prompt", {"tool_name": "Deploy", "input": {}})
    decider.join()

    answer = json.loads(result.content[0].text)
    assert answer == {"behavior": "deny", "message": "expired: the request expired"}


def test_bad_ids_and_keys_are_tool_errors(api: tuple[str, str, Handoffs]) -> None:
    url, key, handoffs = api

    bad_id, _ = call_stdio(url, key, "get_handoff", {"id": "../../v1/audit"})
    bad_key, _ = call_stdio(
        url, key, "ask_human", {"question": "?", "idempotency_key": "k\r\nX: 1"}
    )

    assert bad_id.is_error and bad_key.is_error
    assert handoffs.list_pending().items == []


def test_a_streamable_http_call_answers_and_one_key_is_required(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api
    decider = _decide_when_asked(
        handoffs,
        lambda i: handoffs.decide(i, "answered", by="U0ANA", answer="yes"),
        run_id=HTTP_RUN,
    )

    result, _ = call_http(url, key, "ask_human", {"question": "Ship it?"})
    decider.join()
    doubled = httpx.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers=[("Authorization", f"Bearer {key}"), ("Authorization", "Bearer hk_other")],
    )

    assert result.structured_content["answer"] == "yes"
    assert doubled.status_code == 401


def test_a_host_that_goes_away_ends_its_wait_over_streamable_http(
    redis: Redis, redis_url: str
) -> None:
    handoffs = Handoffs(redis)
    key = ApiKeys(redis, handoffs.store.keys).create("host").key
    app = build_app(handoffs.store, ApiConfig(redis_url=redis_url))
    with serve_app(app) as url:
        # The host is a process of its own, killed mid-call: no goodbye on the connection.
        host = subprocess.Popen(
            [sys.executable, "-c", _HOST.format(url=url, key=key)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.DEVNULL,
        )
        try:
            held = _eventually(lambda: app.state.hub.waiting == 1)
        finally:
            host.kill()
            host.wait()
        ended = _eventually(lambda: app.state.hub.waiting == 0)

    assert held and ended
    # The handoff itself stays, for get_handoff or a later call with the same key.
    assert len(handoffs.list_pending(run_id=HTTP_RUN).items) == 1


_HOST = """
import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

async def go():
    client = create_mcp_http_client(headers={{"Authorization": "Bearer {key}"}})
    async with client, streamable_http_client("{url}/mcp", http_client=client) as streams:
        async with ClientSession(*streams[:2]) as session:
            await session.initialize()
            await session.call_tool("ask_human", {{"question": "q", "timeout_seconds": 600}})

anyio.run(go)
"""


def _eventually(check: Callable[[], bool], within: float = 15) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_oversized_tool_call_over_streamable_http_is_a_tool_error(
    api: tuple[str, str, Handoffs],
) -> None:
    url, key, handoffs = api
    # Over the create's limit with its envelope (so over /v1's limit on the wire too).
    too_big = "x" * (MAX_PAYLOAD_BYTES + 20 * 1024)

    result, _ = call_http(url, key, "ask_human", {"question": "?", "context": too_big})

    assert result.is_error and "413" in result.content[0].text
    assert "summary" in result.content[0].text  # says what to do
    assert handoffs.list_pending().items == []


def test_without_the_mcp_extra_both_ways_in_say_how_to_install_it(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK is the mcp extra: without it, `handoff mcp` is a usage error naming the install
    and `/mcp` answers 501 saying the same, while the rest of the API works."""
    from click.testing import CliRunner

    from bot import mcp as mcp_extra
    from bot.cli import main

    monkeypatch.setattr(mcp_extra, "installed", lambda: False)
    result = CliRunner().invoke(
        main, ["mcp", "--api-url", "http://127.0.0.1:9", "--api-key", "hk_x"]
    )
    assert result.exit_code == 2
    assert "pip install 'slack-handoff[mcp]'" in result.output
    assert "Traceback" not in result.output

    handoffs = Handoffs(redis)
    key = ApiKeys(redis, handoffs.store.keys).create("host").key
    with serve_api(handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        auth = {"Authorization": f"Bearer {key}"}
        answer = httpx.post(f"{url}/mcp", headers=auth, json={"jsonrpc": "2.0"})
        listed = httpx.get(f"{url}/v1/handoffs", headers=auth)
    assert answer.status_code == 501
    assert "pip install 'slack-handoff[mcp]'" in answer.json()["detail"]
    assert listed.status_code == 200
