"""Routing policies end to end, through the Slack stand-in: `handoff serve` and
`handoff worker` started with HANDOFF_POLICY_FILE, the agent's client from the same
environment; and over the HTTP API (a condition out of budget, a rule on the API key)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from store.models import Status, TaskState
from store.policies import parse_policy
from store.repository import HandoffStore, StoreConfig
from tests.conftest import ROOT
from tests.support.api_server import serve_api
from tests.support.slack_env import CHANNEL, SlackEnv, running_slack, wait_for
from worker.client import Handoffs

POLICIES = Path(__file__).parent / "fixtures" / "policies"
REFUNDS = POLICIES / "refunds.yaml"


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(
        redis, redis_url, tmp_path, extra_env={"HANDOFF_POLICY_FILE": str(REFUNDS)}
    )


@pytest.fixture
def agent(slack: SlackEnv, monkeypatch: pytest.MonkeyPatch) -> Handoffs:
    """The agent's client, configured from the environment the bot runs with."""
    monkeypatch.setenv("HANDOFF_POLICY_FILE", str(REFUNDS))
    return Handoffs.from_url(slack.redis_url)


def _refund(agent: Handoffs, amount: int, run_id: str) -> str:
    return agent.request_approval(
        run_id=run_id,
        thread_id="t",
        action="issue_refund",
        args={"order_id": "A-1", "amount": amount},
        resume="tests.support.resume_targets:record",
    ).id


def test_a_large_refund_goes_to_the_finance_group_with_two_approvals(
    slack: SlackEnv, agent: Handoffs
) -> None:
    handoff_id = _refund(agent, 900, "run-large")
    message = slack.posted(handoff_id)
    assert message.channel == "C0FINANCE"
    stored = agent.get(handoff_id)
    assert stored.is_pending and stored.reviewers == ["S0FINANCE"]
    assert stored.payload.approvals_required == 2  # type: ignore[union-attr]


def test_a_small_refund_is_approved_by_its_rule_resumed_once_and_never_posted(
    slack: SlackEnv, agent: Handoffs
) -> None:
    handoff_id = _refund(agent, 20, "run-small")
    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == Status.APPROVED.value
    assert resumed["resume_data"]["decided_by"] == "policy:small-refunds"
    wait_for(lambda: agent.get(handoff_id).delivery.state is TaskState.COMPLETED)
    wait_for(lambda: agent.get(handoff_id).notify.state is TaskState.COMPLETED)
    assert agent.get(handoff_id).message_refs == {}
    posted = [m for m in slack.standin.messages() if handoff_id in str(m)]
    assert posted == []


def test_a_refund_no_rule_matches_falls_through_to_the_defaults(
    slack: SlackEnv, agent: Handoffs
) -> None:
    handoff_id = _refund(agent, 200, "run-default")
    message = slack.posted(handoff_id)
    assert message.channel == CHANNEL
    stored = agent.get(handoff_id)
    assert stored.reviewers == [] and stored.payload.approvals_required == 1  # type: ignore[union-attr]


def _started_with_policy(
    redis_url: str, command: list[str], policy: Path
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": redis_url,
        "SLACK_BOT_TOKEN": "xoxb-x",
        "SLACK_SIGNING_SECRET": "s" * 32,
        "HANDOFF_POLICY_FILE": str(policy),
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", [["worker", "--burst"], ["serve"], ["api"]])
def test_a_process_started_with_an_invalid_policy_file_stops_naming_the_rule(
    redis_url: str, command: list[str]
) -> None:
    done = _started_with_policy(redis_url, command, POLICIES / "invalid.toml")
    assert done.returncode == 2, done.stderr
    assert "rule 'large-refunds' (rules[0]): match.when" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("name", "text"), [("p.yaml", "rules: "), ("p.toml", "rules = ")])
def test_the_api_started_with_a_deeply_nested_policy_file_stops_without_a_traceback(
    redis_url: str, tmp_path: Path, name: str, text: str
) -> None:
    policy = tmp_path / name
    policy.write_text(text + "[" * 5000)
    done = _started_with_policy(redis_url, ["api"], policy)
    assert done.returncode == 2, done.stderr
    assert "nested too deeply to read" in done.stderr
    assert "Traceback" not in done.stderr


# -- over the HTTP API ---------------------------------------------------------------------

_API_POLICY = """
rules:
  - name: bulk-deletes
    match: {action: "delete_*", when: "args.ids.exists(i, i < 0)"}
    auto: reject
  - name: billing-bot-small-refunds
    match: {api_key: billing-bot, action: refund, when: "args.amount <= 50"}
    auto: approve
"""


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[tuple[str, ApiKeys]]:
    policy = parse_policy(_API_POLICY, source="policy.yaml")
    store = HandoffStore(redis, StoreConfig(policy=policy))
    with serve_api(store, ApiConfig(redis_url=redis_url, creates_per_minute=1000)) as url:
        yield url, ApiKeys(redis, store.keys)


def _agent(url: str, keys: ApiKeys, name: str) -> httpx.Client:
    key = keys.create(name).key
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _action(name: str, args: dict[str, object]) -> dict[str, object]:
    return {
        "request_type": "approval",
        "run_id": "run-1",
        "thread_id": "t-1",
        "action": {"name": name, "args": args},
    }


def test_over_the_api_a_condition_out_of_budget_is_422_naming_the_rule_and_stores_nothing(
    api: tuple[str, ApiKeys], redis: Redis
) -> None:
    url, keys = api
    agent = _agent(url, keys, "agent")
    before = {k for k in redis.keys("*") if b"apicreates" not in k}
    refused = agent.post("/v1/handoffs", json=_action("delete_rows", {"ids": [1] * 21_000}))
    assert refused.status_code == 422, refused.text
    assert "routing condition of rule 'bulk-deletes'" in refused.json()["detail"]
    assert "too costly for these arguments" in refused.json()["detail"]
    assert {k for k in redis.keys("*") if b"apicreates" not in k} == before


def test_a_rule_on_the_api_key_trusts_the_key_that_created_it_not_the_body(
    api: tuple[str, ApiKeys],
) -> None:
    url, keys = api
    billing, other = _agent(url, keys, "billing-bot"), _agent(url, keys, "other-bot")
    approved = billing.post("/v1/handoffs", json=_action("refund", {"amount": 20}))
    assert approved.status_code == 201, approved.text
    assert approved.json()["status"] == "approved"
    assert approved.json()["resume_data"]["decided_by"] == "policy:billing-bot-small-refunds"
    pending = other.post("/v1/handoffs", json=_action("refund", {"amount": 20}))
    assert pending.json()["status"] == "pending"
    claimed = other.post(
        "/v1/handoffs", json={**_action("refund", {"amount": 20}), "api_key": "billing-bot"}
    )
    assert claimed.status_code == 422  # a body cannot name the key
