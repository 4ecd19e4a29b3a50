"""`handoff audit export`, run as a user would, against what people did through Slack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from store.models import TaskState
from tests.conftest import ROOT
from tests.support.slack_env import ADMIN, ALICE, CAROL, SlackEnv, running_slack, wait_for


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _export(redis_url: str, *args: str) -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "audit", "export", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def _settled(slack: SlackEnv, handoff_id: str) -> None:
    """Wait until the worker has finished with the handoff (message updated, run resumed)."""

    def done() -> bool:
        handoff = slack.handoffs.get(handoff_id)
        return (
            handoff.notify.state is TaskState.COMPLETED
            and handoff.resume.state is TaskState.COMPLETED
        )

    wait_for(done)


def _of(lines: list[dict], handoff_id: str) -> list[tuple[str, str]]:
    return [(line["event"], line["actor"]) for line in lines if line["handoff_id"] == handoff_id]


def _in_order(expected: list[tuple[str, str]], actual: list[tuple[str, str]]) -> bool:
    remaining = iter(actual)
    return all(item in remaining for item in expected)


def test_export_has_every_event_of_what_people_did_in_slack(
    slack: SlackEnv, redis_url: str, tmp_path: Path
) -> None:
    approved = slack.refund_approval(run_id="run-export-1", reviewers=[ALICE])
    message = slack.posted(approved)
    slack.standin.click(CAROL, message, ids.APPROVE)  # not a reviewer: denied
    slack.standin.click(ALICE, message, ids.APPROVE)
    cancelled = slack.refund_approval(run_id="run-export-1")
    slack.posted(cancelled)
    slack.command(ADMIN, f"cancel {cancelled} duplicate")
    expired = slack.refund_approval(run_id="run-export-2")
    slack.posted(expired)
    slack.command(ADMIN, f"reassign {expired} <#C0OTHER|other>")
    slack.command(ADMIN, f"expire {expired}")
    for handoff_id in (approved, cancelled, expired):
        _settled(slack, handoff_id)

    lines = _export(redis_url)
    for line in lines:
        assert set(line) == {"time", "event", "actor", "handoff_id", "detail", "id"}
        assert datetime.fromisoformat(line["time"]).tzinfo is not None
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    assert len({line["id"] for line in lines}) == len(lines)
    # The file says exactly what the store recorded, nothing more or less.
    recorded = slack.handoffs.store.global_audit()
    assert [(line["event"], line["handoff_id"]) for line in lines] == [
        (e.event, e.handoff_id) for e in recorded
    ]

    assert _in_order(
        [
            ("created", "agent"),
            ("delivered", "worker"),
            ("denied", CAROL),
            ("decided", ALICE),
            ("resumed", "worker"),
        ],
        _of(lines, approved),
    )
    assert _in_order(
        [("created", "agent"), ("cancelled", ADMIN), ("resumed", "worker")],
        _of(lines, cancelled),
    )
    assert _in_order(
        [("created", "agent"), ("reassigned", ADMIN), ("expired", ADMIN), ("resumed", "worker")],
        _of(lines, expired),
    )
    [decided] = [x for x in lines if x["handoff_id"] == approved and x["event"] == "decided"]
    assert decided["detail"] == {"status": "approved"}
    [created] = [x for x in lines if x["handoff_id"] == approved and x["event"] == "created"]
    assert created["detail"]["run_id"] == "run-export-1"

    only_run_1 = _export(redis_url, "--run", "run-export-1")
    assert {line["handoff_id"] for line in only_run_1} == {approved, cancelled}
    assert only_run_1 == [line for line in lines if line["handoff_id"] in (approved, cancelled)]

    output = tmp_path / "audit.jsonl"
    assert _export(redis_url, "--since", "1h", "--output", str(output)) == []
    assert [json.loads(x) for x in output.read_text().splitlines()] == lines
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert _export(redis_url, "--since", tomorrow) == []


def test_run_filter_finds_handoffs_created_before_since(slack: SlackEnv, redis_url: str) -> None:
    handoff_id = slack.refund_approval(run_id="run-old")
    slack.refund_approval(run_id="run-other")
    slack.posted(handoff_id)
    cutoff = datetime.now(UTC)
    slack.handoffs.decide(handoff_id, "approved", by=ALICE)
    _settled(slack, handoff_id)
    lines = _export(redis_url, "--since", cutoff.isoformat(), "--run", "run-old")
    assert lines and {line["handoff_id"] for line in lines} == {handoff_id}
    assert "created" not in [line["event"] for line in lines]
    assert ("decided", ALICE) in _of(lines, handoff_id)
