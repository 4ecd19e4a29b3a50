"""The HTTP API end to end with Slack: a handoff created over HTTP is posted by a real
worker to the stand-in, a reviewer clicks Approve (a signed request to `handoff serve`), and
the agent's long-poll answers with the decision; with a callback, the worker POSTs it signed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from bot.blockkit import ids
from store.api_keys import ApiKeys
from store.models import TaskState
from tests.support.api_server import serve_api
from tests.support.slack_env import ALICE, CHANNEL, SlackEnv, running_slack, wait_for
from tests.support.webhook_receiver import webhook_receiver

LOOPBACK = {"HANDOFF_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path, extra_env=LOOPBACK)


@pytest.fixture
def api(slack: SlackEnv, redis_url: str) -> Iterator[str]:
    config = ApiConfig(redis_url=redis_url, webhook_allowed_hosts=frozenset({"127.0.0.1"}))
    with serve_api(slack.handoffs.store, config) as url:
        yield url


def _approval(**extra: object) -> dict[str, object]:
    return {
        "request_type": "approval",
        "run_id": "ts-run-1",
        "thread_id": "order-9",
        "context": "Refund for a double charge.",
        "action": {"name": "issue_refund", "args": {"amount_usd": 30}},
        "channel": CHANNEL,
        "reviewers": [ALICE],
        **extra,
    }


def test_created_over_http_posted_to_slack_clicked_and_the_wait_answers(
    slack: SlackEnv, api: str, redis: Redis
) -> None:
    key = ApiKeys(redis, slack.handoffs.store.keys).create("ts-agent").key
    agent = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=40)
    created = agent.post("/v1/handoffs", json=_approval())
    assert created.status_code == 201, created.text
    handoff_id = created.json()["id"]
    answers: list[httpx.Response] = []
    waiter = threading.Thread(
        target=lambda: answers.append(agent.get(f"/v1/handoffs/{handoff_id}?wait=30"))
    )
    waiter.start()

    message = slack.posted(handoff_id)
    clicked_at = time.monotonic()
    assert slack.standin.click(ALICE, message, ids.APPROVE).status == 200
    waiter.join(timeout=35)

    [answer] = answers
    assert answer.json()["status"] == "approved"
    assert answer.json()["resume_data"]["decided_by"] == ALICE
    assert time.monotonic() - clicked_at < 5
    assert "issue_refund" in str(message.blocks)


def test_a_click_resumes_a_webhook_agent_signed(slack: SlackEnv, api: str, redis: Redis) -> None:
    created_key = ApiKeys(redis, slack.handoffs.store.keys).create("hook-agent")
    headers = {"Authorization": f"Bearer {created_key.key}"}
    with webhook_receiver(created_key.record.webhook_secret) as receiver:
        created = httpx.post(
            f"{api}/v1/handoffs", headers=headers, json=_approval(callback={"url": receiver.url})
        )
        assert created.status_code == 201, created.text
        handoff_id = created.json()["id"]
        slack.standin.click(ALICE, slack.posted(handoff_id), ids.APPROVE)

        wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
        [delivered] = receiver.wait_for(1)

    assert isinstance(delivered.verified, dict), delivered.verified
    assert delivered.verified["id"] == handoff_id
    assert delivered.verified["status"] == "approved"
    assert delivered.headers["webhook-id"] == f"msg_{handoff_id}"
