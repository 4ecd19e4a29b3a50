"""Code written for the HumanLayer SDK (the real `humanlayer` 0.7 package, unchanged) runs
against `handoff api`'s /humanlayer/v1: a `@require_approval()` function runs after an
approval in Slack and is denied with the reviewer's comment after a rejection; a
`human_as_tool()` question is answered in the message's thread."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from humanlayer import ContactChannel, HumanLayer, SlackContactChannel
from redis import Redis

from bot.api.app import ApiConfig
from bot.blockkit import ids
from store.api_keys import ApiKeys
from tests.support.api_server import serve_api
from tests.support.slack_env import ALICE, CHANNEL, SlackEnv, running_slack

# A tenth of the SDK's 3 s between polls (its own `sleep` option), to keep the tests short.
FAST_POLL = 0.1


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


@pytest.fixture
def hl(slack: SlackEnv, redis: Redis, redis_url: str) -> Iterator[HumanLayer]:
    key = ApiKeys(redis, slack.handoffs.store.keys).create("legacy-agent").key
    with serve_api(slack.handoffs.store, ApiConfig(redis_url=redis_url)) as url:
        yield HumanLayer(
            api_key=key,
            api_base_url=f"{url}/humanlayer/v1",
            run_id="hl-run",
            sleep=lambda _: time.sleep(FAST_POLL),
            contact_channel=ContactChannel(
                slack=SlackContactChannel(channel_or_user_id=CHANNEL, allowed_responder_ids=[ALICE])
            ),
        )


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    return thread, results


def _posted(slack: SlackEnv) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pending = slack.handoffs.list_pending(run_id="hl-run").items
        if pending and pending[0].message_refs.get("ts"):
            return pending[0], slack.posted(pending[0].id)
        time.sleep(0.05)
    raise AssertionError("nothing was posted")


def test_require_approval_runs_the_function_after_an_approval_in_slack(
    slack: SlackEnv, hl: HumanLayer
) -> None:
    ran: list[dict[str, Any]] = []

    @hl.require_approval()
    def issue_refund(order_id: str, amount_usd: int) -> str:
        ran.append({"order_id": order_id, "amount_usd": amount_usd})
        return "refunded"

    thread, results = _in_thread(lambda: issue_refund(order_id="A-1001", amount_usd=30))
    handoff, message = _posted(slack)
    assert handoff.payload.action.name == "issue_refund"
    assert handoff.payload.action.args == {"order_id": "A-1001", "amount_usd": 30}
    assert handoff.reviewers == [ALICE] and handoff.channel == CHANNEL
    slack.standin.click(ALICE, message, ids.APPROVE)
    thread.join(timeout=30)

    assert results == ["refunded"]
    assert ran == [{"order_id": "A-1001", "amount_usd": 30}]


def test_require_approval_is_denied_with_the_reviewers_comment(
    slack: SlackEnv, hl: HumanLayer
) -> None:
    @hl.require_approval()
    def drop_table(name: str) -> str:
        raise AssertionError("a rejected call must not run")

    thread, results = _in_thread(lambda: drop_table(name="users"))
    handoff, _ = _posted(slack)
    slack.handoffs.decide(handoff.id, "rejected", by=ALICE, comment="never in production")
    thread.join(timeout=30)

    assert results == ["User denied drop_table with message: never in production"]


def test_human_as_tool_is_answered_in_the_thread(slack: SlackEnv, hl: HumanLayer) -> None:
    ask = hl.human_as_tool()

    thread, results = _in_thread(lambda: ask("Which region should I deploy to?"))
    handoff, message = _posted(slack)
    assert handoff.payload.question == "Which region should I deploy to?"
    slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)
    thread.join(timeout=30)

    assert results == ["eu-west-1"]


def _handoff_keys(redis: Redis) -> list[bytes]:
    """The keys a created handoff writes (not the worker's and bot's own, which tick)."""
    written = re.compile(rb"(^|:)(h|idem|pending|audit|outbox|deadlines)(:|$)")
    return sorted(k for k in redis.keys("*") if written.search(k))


def test_bad_bodies_and_keys_are_refused_and_change_nothing(
    slack: SlackEnv, hl: HumanLayer, redis: Redis
) -> None:
    base = hl.backend.connection.api_base_url  # type: ignore[union-attr]
    key = hl.backend.connection.api_key  # type: ignore[union-attr]
    headers = {"Authorization": f"Bearer {key}"}
    before = _handoff_keys(redis)

    no_spec = httpx.post(
        f"{base}/function_calls", json={"run_id": "r", "call_id": "c"}, headers=headers
    )
    bad_channel = httpx.post(
        f"{base}/function_calls",
        json={
            "run_id": "r",
            "call_id": "c",
            "spec": {
                "fn": "f",
                "kwargs": {},
                "channel": {"slack": {"channel_or_user_id": "#general"}},
            },
        },
        headers=headers,
    )
    unknown = httpx.get(f"{base}/function_calls/nope", headers=headers)
    anonymous = httpx.get(f"{base}/contact_requests/nope")

    assert no_spec.status_code == 422 and "spec" in no_spec.text
    assert bad_channel.status_code == 422 and "channel" in bad_channel.text
    assert unknown.status_code == 404
    assert anonymous.status_code == 401
    assert _handoff_keys(redis) == before


def test_an_approval_with_edited_arguments_does_not_run_the_original_call(
    slack: SlackEnv, hl: HumanLayer
) -> None:
    ran: list[int] = []

    @hl.require_approval()
    def issue_refund(amount_usd: int) -> str:
        ran.append(amount_usd)
        return "refunded"

    thread, results = _in_thread(lambda: issue_refund(amount_usd=5000))
    handoff, _ = _posted(slack)
    slack.handoffs.decide(handoff.id, "approved", by=ALICE, edited_args={"amount_usd": 5})
    thread.join(timeout=30)

    # The SDK would call the function with its own kwargs: an edit must not turn into them.
    assert ran == []
    [answer] = results
    assert answer.startswith("User denied issue_refund with message: approved only with other")
    assert '{"amount_usd": 5}' in answer


def test_a_v1_handoff_is_not_read_as_a_humanlayer_call(slack: SlackEnv, hl: HumanLayer) -> None:
    base = hl.backend.connection.api_base_url  # type: ignore[union-attr]
    key = hl.backend.connection.api_key  # type: ignore[union-attr]
    headers = {"Authorization": f"Bearer {key}"}
    v1 = base.removesuffix("/humanlayer/v1")
    made = httpx.post(
        f"{v1}/v1/handoffs",
        json={"request_type": "question", "run_id": "r", "thread_id": "t", "question": "?"},
        headers={**headers, "Idempotency-Key": "function-call:X"},
    )
    assert made.status_code == 201

    looked_up = httpx.get(f"{base}/function_calls/X", headers=headers)
    slashed = httpx.post(
        f"{base}/function_calls",
        json={"run_id": "r", "call_id": "a/b", "spec": {"fn": "f", "kwargs": {}}},
        headers=headers,
    )

    assert looked_up.status_code == 404
    assert slashed.status_code == 422
