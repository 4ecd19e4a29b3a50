"""store.lost_attempts: a resume whose last attempt was fenced out (its lease lapsed before
it reported) ends failed, is kept until retried, and a retry says the target may have run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.exceptions import HandoffNotFound
from store.lost_attempts import LOST_ATTEMPT_ERROR, last_attempt_lost, retry_warning
from store.models import Handoff, Status, TaskKind, TaskState
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.conftest import ROOT
from tests.support import slack_env
from worker.client import Handoffs

ONE_QUICK_ATTEMPT = TaskPolicy(
    resume_max_attempts=1, resume_timeout_seconds=0.05, lease_grace_seconds=0.01
)


def _approval(redis: Redis) -> Handoff:
    return Handoffs(redis, tasks=ONE_QUICK_ATTEMPT).request_approval(
        run_id="run-1", thread_id="t", action="ship", resume="tests.support.resume_targets:record"
    )


def _lost_last_attempt(store: HandoffStore) -> str:
    """A decided handoff whose only resume attempt began and never reported in its lease,
    found lapsed by the next job: the state a fenced-out last attempt leaves."""
    handoff = _approval(store.redis)
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1").attempt == 1
    time.sleep(0.1)
    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2").action == "failed"
    return handoff.id


def test_a_fenced_out_last_attempt_fails_the_resume_and_its_late_report_changes_nothing(
    redis: Redis,
) -> None:
    store = HandoffStore(redis, StoreConfig())
    handoff_id = _lost_last_attempt(store)
    resume = store.get(handoff_id).resume
    assert resume.state is TaskState.FAILED
    assert LOST_ATTEMPT_ERROR in (resume.last_error or "")
    assert last_attempt_lost(resume)
    assert (TaskKind.RESUME, handoff_id) in store.failed_tasks()

    # The old attempt's report arrives at last: the target returned, but it is fenced out.
    assert store.finish_task(handoff_id, TaskKind.RESUME, attempt=1) == "stale"
    assert store.get(handoff_id).resume == resume


def test_it_is_kept_until_retried_and_purged_once_the_retry_completes(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=5))
    handoff_id = _lost_last_attempt(store)
    # Past its retention (looked at now), but failed less than the retention period ago.
    redis.zadd(store.keys.retention, {handoff_id: 0})
    assert store.purge_decided() == 0
    assert store.get(handoff_id).resume.state is TaskState.FAILED

    store.retry_task(handoff_id, TaskKind.RESUME, requested_by="U_ADMIN")
    start = store.begin_task(handoff_id, TaskKind.RESUME, run_token="job-3")
    assert (start.action, start.attempt) == ("run", 2)
    assert store.finish_task(handoff_id, TaskKind.RESUME, attempt=2) == "completed"
    redis.zadd(store.keys.retention, {handoff_id: 0})  # looked at again now, not in an hour
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)


def test_a_failure_the_target_reported_gets_no_warning(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig())
    handoff = _approval(redis)
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    store.finish_task(handoff.id, TaskKind.RESUME, attempt=1, error="RuntimeError: down")
    resume = store.get(handoff.id).resume
    assert resume.state is TaskState.FAILED
    assert retry_warning(resume) is None


def test_handoff_retry_says_the_target_may_have_run_already(redis: Redis, redis_url: str) -> None:
    handoff_id = _lost_last_attempt(HandoffStore(redis, StoreConfig()))
    retried = subprocess.run(
        [sys.executable, "-m", "bot.cli", "retry", handoff_id, "--by", "U_ADMIN"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert retried.returncode == 0, retried.stderr
    assert f"resume of {handoff_id} queued again" in retried.stdout
    assert "never reported how it ended" in retried.stderr
    assert "may have run to completion already" in retried.stderr
    assert "same idempotency key" in retried.stderr


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[slack_env.SlackEnv]:
    # No worker: nothing but the test touches the resume.
    yield from slack_env.running_slack(redis, redis_url, tmp_path, workers=0)


def test_slash_handoff_retry_says_the_target_may_have_run_already(
    redis: Redis, slack: slack_env.SlackEnv
) -> None:
    handoff_id = _lost_last_attempt(HandoffStore(redis, StoreConfig()))
    reply = slack.command(slack_env.ADMIN, f"retry {handoff_id}")
    text = reply.text + json.dumps(reply.blocks)
    assert "queued for another round" in text
    assert "may have run to completion already" in text
    assert slack.handoffs.get(handoff_id).resume.state is TaskState.QUEUED


def test_the_clients_retry_warns_that_the_target_may_have_run(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    handoffs = Handoffs(redis, tasks=ONE_QUICK_ATTEMPT)
    lost = _lost_last_attempt(handoffs.store)

    with caplog.at_level("WARNING", logger="worker.client"):
        retried = handoffs.retry_resume(lost, by="U_ADMIN")

    assert retried.resume.state is TaskState.QUEUED
    [warning] = [r for r in caplog.records if r.name == "worker.client"]
    assert lost in warning.getMessage() and "may have run to completion" in warning.getMessage()
