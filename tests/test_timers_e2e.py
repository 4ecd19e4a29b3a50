"""Reminders, escalation, reassignment and expiry through real workers and the stand-in."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from bot.standin import ElementNotFound
from store.models import Status, TaskState
from tests.support import resume_targets
from tests.support.slack_env import ADMIN, ALICE, CAROL, CHANNEL, SlackEnv, running_slack, wait_for

ONCALL = "C0ONCALL"
OTHER = "C0OTHERTEAM"


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _bot_replies(slack: SlackEnv, channel: str, ts: str) -> list[str]:
    return [m.text for m in slack.standin.thread(channel, ts) if m.bot_id]


def _buttons(blocks: list[dict]) -> set[str]:
    return {e.get("action_id") for b in blocks if b.get("type") == "actions" for e in b["elements"]}


def test_reminders_then_escalation_then_one_decision_from_the_escalation_copy(
    slack: SlackEnv,
) -> None:
    handoff = slack.handoffs.request_approval(
        run_id="run-t",
        thread_id="t",
        action="rotate_keys",
        args={"service": "billing"},
        reviewers=[ALICE],
        resume="tests.support.resume_targets:record",
        remind_after=0.6,
        max_reminders=2,
        escalate_after=2.0,
        escalate_to=ONCALL,
    )
    primary = slack.posted(handoff.id)

    wait_for(lambda: len(_bot_replies(slack, CHANNEL, primary.ts)) == 2, timeout=20)
    reminders = _bot_replies(slack, CHANNEL, primary.ts)
    assert all(f"<@{ALICE}>" in text and "waiting" in text for text in reminders)

    wait_for(lambda: slack.standin.messages(ONCALL), timeout=20)
    [copy] = slack.standin.messages(ONCALL)
    assert "Escalated here" in json.dumps(copy.blocks)
    time.sleep(1.0)
    assert len(_bot_replies(slack, CHANNEL, primary.ts)) == 2  # at most max_reminders

    # Carol is not a reviewer, but the escalation channel's members may now decide.
    slack.standin.click(CAROL, copy, ids.APPROVE)
    assert slack.handoffs.get(handoff.id).resume_data.decided_by == CAROL
    slack.standin.click(ALICE, primary, ids.APPROVE)  # too late: told who decided
    assert "Already approved" in slack.standin.ephemerals(ALICE)[0].text

    wait_for(lambda: slack.handoffs.get(handoff.id).notify.state is TaskState.COMPLETED)
    for channel, ts in [(CHANNEL, primary.ts), (ONCALL, copy.ts)]:
        updated = slack.standin.message(channel, ts)
        assert _buttons(updated.blocks) == set()
        assert f"Approved* by <@{CAROL}>" in json.dumps(updated.blocks)
    wait_for(lambda: slack.handoffs.get(handoff.id).resume.state is TaskState.COMPLETED)
    events = [e.event for e in slack.handoffs.audit(handoff.id)]
    assert events.count("reminded") == 2
    assert events.count("escalated") == 1
    assert events.count("decided") == 1
    assert events.count("resumed") == 1


def test_reminder_scheduled_before_a_worker_restart_fires_once(slack: SlackEnv) -> None:
    handoff = slack.handoffs.ask(
        run_id="run-r", thread_id="t", question="Which region?", remind_after=2.0, max_reminders=1
    )
    primary = slack.posted(handoff.id)
    [worker] = [p for p in slack.processes if p.args[3] == "worker"]
    slack.kill(worker)  # SIGKILL: worker and dispatcher (no job is running now)
    time.sleep(2.5)  # the reminder falls due while no worker runs
    assert _bot_replies(slack, CHANNEL, primary.ts) == []

    slack.start_worker()
    slack.start_worker()  # two workers: still one reminder
    wait_for(lambda: len(_bot_replies(slack, CHANNEL, primary.ts)) == 1, timeout=20)
    time.sleep(1.0)
    assert len(_bot_replies(slack, CHANNEL, primary.ts)) == 1
    assert slack.handoffs.get(handoff.id).reminders_sent == 1


def test_reassigned_handoff_is_reposted_and_the_old_message_points_there(slack: SlackEnv) -> None:
    handoff_id = slack.handoffs.request_approval(
        run_id="run-m",
        thread_id="t",
        action="deploy",
        args={"env": "prod"},
        resume="tests.support.resume_targets:record",
    ).id
    old = slack.posted(handoff_id)

    slack.handoffs.store.reassign(handoff_id, by=ADMIN, channel=OTHER)

    wait_for(lambda: slack.standin.messages(OTHER), timeout=20)
    [new] = slack.standin.messages(OTHER)
    assert ids.APPROVE in _buttons(new.blocks)
    moved = wait_for(lambda: (m := slack.standin.message(CHANNEL, old.ts)).updates and m)
    assert f"<#{OTHER}>" in json.dumps(moved.blocks)
    assert _buttons(moved.blocks) == set()
    with pytest.raises(ElementNotFound):
        slack.standin.click(ALICE, moved, ids.APPROVE)
    assert slack.handoffs.list_pending(channel=OTHER).items[0].id == handoff_id
    assert slack.handoffs.list_pending(channel=CHANNEL).items == []

    slack.standin.click(ALICE, new, ids.APPROVE)
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    assert "reassigned" in [e.event for e in slack.handoffs.audit(handoff_id)]


def test_expire_now_resumes_with_expired_and_updates_the_message(slack: SlackEnv) -> None:
    handoff_id = slack.handoffs.request_approval(
        run_id="run-e",
        thread_id="t",
        action="deploy",
        args={},
        resume="tests.support.resume_targets:record",
    ).id
    message = slack.posted(handoff_id)

    expired = slack.handoffs.store.expire_now(handoff_id, expired_by=ADMIN)

    assert expired.status is Status.EXPIRED
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    [entry] = [json.loads(r) for r in slack.redis.lrange(resume_targets.COMPLETED, 0, -1)]
    assert entry["status"] == "expired"
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    assert _buttons(slack.standin.message(CHANNEL, message.ts).blocks) == set()
    expired_event = [e for e in slack.handoffs.audit(handoff_id) if e.event == "expired"]
    assert expired_event[0].actor == ADMIN
