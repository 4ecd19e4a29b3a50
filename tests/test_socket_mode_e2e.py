"""`handoff serve --socket-mode` end to end: the stand-in sends clicks, modal submissions,
thread replies and slash commands in Socket Mode envelopes over the WebSocket the bot opened;
a real worker delivers, updates and resumes. The same loop as tests/test_slack_e2e.py over
HTTP, plus what only Socket Mode has: connections Slack refreshes or that break, and
acknowledgements that are lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from store.models import Status, TaskState
from tests.support import resume_targets, slack_env
from tests.support.slack_env import ADMIN, ALICE, BOB, CHANNEL, SlackEnv, wait_for


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from slack_env.running_slack(redis, redis_url, tmp_path, socket_mode=True)


def _resumed_once(slack: SlackEnv, handoff_id: str) -> dict:
    """What the run was resumed with, once its resume completed; it was resumed only once."""
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    entries = resume_targets.recorded(slack.redis, resume_targets.STARTED)
    [entry] = [e for e in entries if e["handoff_id"] == handoff_id]
    return entry


def _question(slack: SlackEnv, run_id: str) -> str:
    return slack.region_question(run_id=run_id, resume="tests.support.resume_targets:record").id


def test_a_click_and_a_modal_decide_over_the_socket(slack: SlackEnv) -> None:
    approved = slack.refund_approval(run_id="run-click")
    response = slack.standin.click(ALICE, slack.posted(approved), ids.APPROVE)
    assert (response.status, response.timed_out) == (200, False)
    resumed = _resumed_once(slack, approved)
    assert (resumed["status"], resumed["resume_data"]["via"]) == ("approved", "slack_button")

    rejected = slack.refund_approval(run_id="run-modal")
    slack.standin.click(BOB, slack.posted(rejected), ids.REJECT)
    [modal] = slack.standin.views(BOB)
    answer = slack.standin.submit_view(BOB, modal, {ids.REASON_BLOCK: {ids.VALUE: "90 days"}})
    assert answer.status == 200 and slack.standin.view(modal.id).closed
    resumed = _resumed_once(slack, rejected)
    assert resumed["resume_data"]["comment"] == "90 days"
    assert resumed["resume_data"]["via"] == "slack_modal"

    # The messages were updated by the worker, as over HTTP.
    wait_for(lambda: slack.handoffs.get(rejected).notify.state is TaskState.COMPLETED)
    assert "90 days" in str(slack.posted(rejected).blocks)
    kinds = {(e.type, e.payload.get("type")) for e in slack.standin.envelopes()}
    assert kinds == {("interactive", "block_actions"), ("interactive", "view_submission")}
    assert all(e.ack is not None for e in slack.standin.envelopes())


def test_a_thread_reply_and_slash_commands_over_the_socket(slack: SlackEnv) -> None:
    answered = _question(slack, "run-thread")
    message = slack.posted(answered)
    _, response = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)
    assert response is not None and response.status == 200
    resumed = _resumed_once(slack, answered)
    assert resumed["resume_data"]["answer"] == "eu-west-1"
    assert resumed["resume_data"]["via"] == "slack_thread"

    cancelled = slack.refund_approval(run_id="run-command")
    slack.posted(cancelled)
    assert cancelled in str(slack.command(ADMIN, "list").blocks)
    slack.command(ADMIN, f"cancel {cancelled} duplicate")
    assert _resumed_once(slack, cancelled)["status"] == "cancelled"
    envelope = next(e for e in slack.standin.envelopes() if e.type == "slash_commands")
    assert envelope.accepts_response_payload and envelope.payload["command"] == "/handoff"


def test_the_bot_connects_again_after_a_refresh_and_after_a_dropped_socket(
    slack: SlackEnv,
) -> None:
    opened = len(slack.standin.calls("apps.connections.open"))
    assert slack.standin.disconnect_socket_mode("refresh_requested") == 1
    slack.wait_connected()
    first = slack.refund_approval(run_id="run-refreshed")
    assert slack.standin.click(ALICE, slack.posted(first), ids.APPROVE).status == 200
    assert _resumed_once(slack, first)["status"] == "approved"

    # A connection that breaks with no goodbye (a TCP reset) is noticed and replaced.
    assert slack.standin.drop_socket_mode() == 1
    assert slack.standin.socket_mode_connections() == 0
    slack.wait_connected()
    second = slack.refund_approval(run_id="run-dropped")
    assert slack.standin.click(ALICE, slack.posted(second), ids.APPROVE).status == 200
    assert _resumed_once(slack, second)["status"] == "approved"
    # A new URL each time: refreshed, then dropped.
    assert len(slack.standin.calls("apps.connections.open")) == opened + 2


def test_an_event_whose_ack_is_lost_is_sent_again_and_decided_once(slack: SlackEnv) -> None:
    handoff_id = _question(slack, "run-lost-ack")
    message = slack.posted(handoff_id)
    slack.standin.ack_timeout = 1.0  # Slack waits 3 s; the envelope is the same either way
    slack.standin.lose_acks(1)

    _, response = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)

    assert response is not None and response.status == 200
    first, again = [e for e in slack.standin.envelopes() if e.type == "events_api"]
    assert (first.ack_lost, first.retry_attempt) == (True, 0)
    assert (again.retry_attempt, again.retry_reason) == (1, "timeout")
    assert again.payload["event_id"] == first.payload["event_id"]
    assert again.ack is not None
    assert _resumed_once(slack, handoff_id)["resume_data"]["answer"] == "eu-west-1"
    assert [e.event for e in slack.handoffs.audit(handoff_id)].count("decided") == 1
    assert slack.handoffs.get(handoff_id).status is Status.ANSWERED
    # The bot confirmed in the thread once, not once per delivery.
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    replies = [m for m in slack.standin.thread(CHANNEL, message.ts) if m.bot_id]
    assert len(replies) == 1
