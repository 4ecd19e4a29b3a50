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


@pytest.fixture
def short_retention(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    """Decided handoffs may be purged 0.9 s after their decision."""
    yield from running_slack(
        redis, redis_url, tmp_path, extra_env={"HANDOFF_RETENTION_DAYS": "0.00001"}
    )


def test_a_reply_in_the_escalation_copy_of_a_purged_handoff_is_ignored(
    short_retention: SlackEnv,
) -> None:
    slack = short_retention
    handoff = slack.region_question(
        run_id="run-p",
        resume="tests.support.resume_targets:record",
        escalate_after=0.3,
        escalate_to=ONCALL,
    )
    primary = slack.posted(handoff.id)
    wait_for(lambda: slack.standin.messages(ONCALL), timeout=20)
    [copy] = slack.standin.messages(ONCALL)
    wait_for(lambda: slack.handoffs.get(handoff.id).escalated_at)
    _, answered = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=primary.ts)
    assert answered.status == 200
    wait_for(lambda: slack.handoffs.get(handoff.id).resume.state is TaskState.COMPLETED)
    wait_for(lambda: slack.handoffs.get(handoff.id).notify.state is TaskState.COMPLETED)
    store = slack.handoffs.store
    # Past retention (0.9 s): the sweep the dispatcher runs, run here rather than waited for.
    wait_for(
        lambda: store.purge_decided() or not slack.redis.exists(store.keys.handoff(handoff.id)),
        timeout=10,
    )

    def links_left() -> list[str]:
        links = [
            key.decode()
            for key in slack.redis.scan_iter(match=store.keys.prefix + "msg:*")
            if slack.redis.get(key) == handoff.id.encode()
        ]
        return links

    seen_events = set(slack.redis.scan_iter(match=store.keys.prefix + "event:*"))
    bot_replies = _bot_replies(slack, ONCALL, copy.ts)

    _, late = slack.standin.post_message(CAROL, ONCALL, "us-east-1", thread_ts=copy.ts)

    assert late.status == 200, late.text
    served = "".join(p.read_text() for p in slack.log_dir.glob("serve-*.log"))
    assert " ERROR " not in served and "Traceback" not in served, served
    assert slack.standin.ephemerals(CAROL) == []
    assert _bot_replies(slack, ONCALL, copy.ts) == bot_replies
    assert set(slack.redis.scan_iter(match=store.keys.prefix + "event:*")) == seen_events
    assert links_left() == []  # the copy's link too, not only the primary's
