"""`/handoff stats`: pending by type and channel from the indexes; decisions, time to
decision, expiry rate and failed resumes from the audit stream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis import Redis

from bot.queries.stats import compute_stats, percentile
from store.models import TaskKind
from tests.support.slack_env import ADMIN, ALICE, SlackEnv, running_slack, wait_for
from worker.client import Handoffs


def _approval(handoffs: Handoffs, **options) -> str:
    return handoffs.request_approval(run_id="run-stats", thread_id="t", action="ship", **options).id


def _audit(redis: Redis, handoffs: Handoffs, event: str, handoff_id: str, at: datetime) -> None:
    """Append an event to the audit stream as the store's scripts write it."""
    entry = {
        "event": event,
        "handoff_id": handoff_id,
        "actor": "U0TEST",
        "at": int(at.timestamp() * 1000),
        "detail": {},
    }
    redis.xadd(handoffs.store.keys.global_audit, {"e": json.dumps(entry)})


def test_pending_is_counted_by_type_and_channel(redis: Redis, handoffs: Handoffs) -> None:
    for _ in range(3):
        _approval(handoffs, channel="C0ONE")
    handoffs.ask(run_id="r", thread_id="t", question="Which?", channel="C0TWO")
    _approval(handoffs)  # to the default channel: no channel index
    decided = _approval(handoffs, channel="C0TWO")
    handoffs.decide(decided, "approved", by=ALICE)

    stats = compute_stats(handoffs.store)
    assert stats.pending == 5
    assert stats.pending_by_type == {"approval": 4, "question": 1}
    assert stats.pending_by_channel == {"C0ONE": 3, "C0TWO": 1}
    assert stats.decided == 1


def test_time_to_decision_expiry_rate_and_failed_resumes(redis: Redis, handoffs: Handoffs) -> None:
    for minutes in [1, 2, 3, 4, 30]:
        handoff = handoffs.store.get(_approval(handoffs))
        decided = handoff.created_at + timedelta(minutes=minutes)
        _audit(redis, handoffs, "decided", handoff.id, decided)
    _audit(redis, handoffs, "expired", "ho_X", datetime.now(UTC))
    _audit(redis, handoffs, "cancelled", "ho_C", datetime.now(UTC))
    _audit(redis, handoffs, "resume_failed", "ho_T1", datetime.now(UTC))
    redis.zadd(handoffs.store.keys.failed, {f"{TaskKind.RESUME.value}:ho_T1": 1})

    stats = compute_stats(handoffs.store, window=timedelta(days=1))
    assert stats.decided == 5
    assert stats.median_decision_seconds == pytest.approx(180, abs=1)
    assert stats.p90_decision_seconds == pytest.approx(30 * 60, abs=1)
    assert stats.expired == 1 and stats.cancelled == 1
    assert stats.expiry_rate == pytest.approx(1 / 7)
    assert stats.failed_resumes == 1
    assert stats.failing_resumes == 1


def test_time_to_decision_of_a_handoff_created_before_the_window(handoffs: Handoffs) -> None:
    handoff_id = _approval(handoffs)
    time.sleep(0.2)
    cutoff = datetime.now(UTC)
    handoffs.decide(handoff_id, "approved", by=ALICE)
    stats = compute_stats(handoffs.store, window=datetime.now(UTC) - cutoff)
    assert stats.decided == 1
    assert stats.median_decision_seconds is not None
    assert 0.2 <= stats.median_decision_seconds < 5


def test_no_decisions_give_no_figures(handoffs: Handoffs) -> None:
    stats = compute_stats(handoffs.store)
    assert stats.median_decision_seconds is None
    assert stats.expiry_rate is None
    assert stats.pending == 0


def test_percentile_is_nearest_rank() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2
    assert percentile([1, 2, 3, 4], 90) == 4
    assert percentile([7], 90) == 7
    assert percentile([], 50) is None


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def test_stats_subcommand_replies_with_the_figures(slack: SlackEnv) -> None:
    _approval(slack.handoffs, channel="C0ONE")
    decided = _approval(slack.handoffs)
    slack.handoffs.decide(decided, "approved", by=ALICE)
    slack.command(ADMIN, f"expire {_approval(slack.handoffs)}")

    # The stats read the whole window's audit: the ack says so, the figures follow.
    assert "Working out the stats" in slack.command(ADMIN, "stats 2w").text
    [answer] = wait_for(
        lambda: [e for e in slack.standin.ephemerals(ADMIN) if e.source == "response_url"]
    )
    reply = json.dumps(answer.blocks)
    assert "last 14 days" in reply
    assert "*Pending now*\\n1 (1 approval)" in reply
    assert "<#C0ONE>: 1" in reply
    assert "1 by people, 1 expired, 0 cancelled" in reply
    assert "50% of 2 closed" in reply
    assert "Only handoff admins" in slack.command(ALICE, "stats").text
