"""Deliveries Slack refuses, through real workers and the stand-in: a handoff whose message
cannot be posted ends ``undeliverable`` and its run is told; what can still be posted is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.blockkit import ids
from store.models import Status, TaskState
from tests.support import resume_targets
from tests.support.slack_env import (
    ADMIN,
    ALICE,
    BOT_TOKEN,
    CHANNEL,
    SlackEnv,
    running_slack,
    wait_for,
)

OTHER = "C0OTHERTEAM"


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _posts(slack: SlackEnv, channel: str) -> list:
    return [
        c for c in slack.standin.calls("chat.postMessage") if c.params.get("channel") == channel
    ]


def _buttons(blocks: list[dict]) -> set[str]:
    return {e.get("action_id") for b in blocks if b.get("type") == "actions" for e in b["elements"]}


def _reply(slack: SlackEnv, text: str) -> str:
    reply = slack.command(ADMIN, text)
    return reply.text + json.dumps(reply.blocks)


def test_an_archived_channel_ends_the_handoff_undeliverable_and_the_run_is_told(
    slack: SlackEnv,
) -> None:
    # Every post to the channel is refused, as Slack refuses posts to an archived channel.
    slack.standin.fail_next("chat.postMessage", error="is_archived", times=8)
    handoff_id = slack.refund_approval()

    waited = slack.handoffs.wait(handoff_id, timeout=15)  # a blocking agent is woken too
    resumed = slack.resumed(handoff_id)

    assert waited.status is Status.UNDELIVERABLE
    assert resumed["status"] == "undeliverable"
    assert resumed["resume_data"]["decided_by"] == "system"
    assert "is_archived" in resumed["resume_data"]["comment"]
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.delivery.state is TaskState.FAILED
    assert handoff.delivery.attempt == 1
    assert len(_posts(slack, CHANNEL)) == 1  # refused for good: not tried 8 times
    events = [e.event for e in slack.handoffs.audit(handoff_id)]
    assert events.count("undeliverable") == 1
    assert "delivery_attempt_failed" not in events

    # Admins see it, and are told what a retry or a reassignment can (not) do for it.
    assert "undeliverable" in _reply(slack, f"show {handoff_id}")
    assert "is_archived" in _reply(slack, f"show {handoff_id}")
    slack.command(ADMIN, "stats")  # answered at once; the figures follow
    stats = wait_for(
        lambda: next(
            (
                text
                for e in slack.standin.ephemerals(ADMIN)
                if "Failed deliveries" in (text := e.text + json.dumps(e.blocks))
            ),
            None,
        )
    )
    assert "1 undeliverable" in stats
    assert handoff_id in stats
    listed = _reply(slack, "list failed")
    assert handoff_id in listed
    assert "_undeliverable_" in listed and "is_archived" in listed
    retry = _reply(slack, f"retry {handoff_id}")
    assert "undeliverable" in retry and "redeliver it" in retry
    reassign = _reply(slack, f"reassign {handoff_id} <#{OTHER}|other>")
    assert "could not be delivered" in reassign
    assert f"/handoff redeliver {handoff_id}" in reassign
    assert slack.handoffs.get(handoff_id).status is Status.UNDELIVERABLE
    assert (len(_posts(slack, CHANNEL)), _posts(slack, OTHER)) == (1, [])


def test_a_transient_slack_error_is_still_retried_and_then_delivered(slack: SlackEnv) -> None:
    # Slack's trouble, after which nothing was done (unlike internal_error, after which a
    # post may have landed: that one is looked for before posting again).
    slack.standin.fail_next("chat.postMessage", error="service_unavailable", times=2)
    handoff_id = slack.refund_approval()

    message = slack.posted(handoff_id, timeout=20)

    assert [c.http_status for c in _posts(slack, CHANNEL)][-1] == 200
    assert len(_posts(slack, CHANNEL)) == 3
    # Slack answered each failed post: nothing could have landed, so nothing is looked for
    # (conversations.history allows one call a minute).
    assert slack.standin.calls("conversations.history") == []
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.PENDING
    assert handoff.delivery.state is TaskState.COMPLETED
    assert ids.APPROVE in _buttons(message.blocks)
    slack.standin.click(ALICE, message, ids.APPROVE)
    assert slack.resumed(handoff_id)["status"] == "approved"


def test_a_reassignment_after_the_old_message_was_deleted_links_the_new_one(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval()
    old = slack.posted(handoff_id)
    # Someone deletes the message in Slack; then an admin moves the handoff elsewhere.
    WebClient(token=BOT_TOKEN, base_url=slack.standin.api_url).chat_delete(
        channel=CHANNEL, ts=old.ts
    )
    slack.handoffs.store.reassign(handoff_id, by=ADMIN, channel=OTHER)

    wait_for(lambda: slack.handoffs.get(handoff_id).message_refs.get("channel") == OTHER)
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.delivery.state is TaskState.COMPLETED
    [new] = slack.standin.messages(OTHER)
    assert handoff.message_refs["ts"] == new.ts
    assert ids.APPROVE in _buttons(new.blocks)

    slack.standin.click(ALICE, new, ids.APPROVE)
    assert slack.resumed(handoff_id)["status"] == "approved"
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == ALICE
    # The decision is shown on the new message, though the old one is gone.
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    assert _buttons(slack.standin.message(OTHER, new.ts).blocks) == set()


def test_a_reassignment_while_its_post_is_refused_for_good_is_posted_in_the_new_channel(
    slack: SlackEnv,
) -> None:
    # Slack takes a moment to refuse the post (the channel is archived); meanwhile an admin
    # moves the handoff elsewhere. The reassignment, asked for while the last attempt ran,
    # gets a fresh round: the handoff is posted in the new channel, never undeliverable.
    slack.standin.fail_next("chat.postMessage", error="is_archived", delay=3.0)
    handoff_id = slack.refund_approval()
    wait_for(lambda: "delivery_started" in [e.event for e in slack.handoffs.audit(handoff_id)])
    slack.handoffs.store.reassign(handoff_id, by=ADMIN, channel=OTHER)

    wait_for(lambda: slack.handoffs.get(handoff_id).message_refs.get("channel") == OTHER)
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.PENDING
    assert handoff.delivery.state is TaskState.COMPLETED
    assert [c.http_status for c in _posts(slack, CHANNEL)] == [200]  # refused: ok false
    assert slack.standin.messages(CHANNEL) == []
    events = slack.handoffs.audit(handoff_id)
    [refused] = [e for e in events if e.event == "delivery_attempt_failed"]
    assert refused.detail["requeued"] is True and "is_archived" in refused.detail["error"]
    assert not {"delivery_failed", "undeliverable"} & {e.event for e in events}
    [new] = slack.standin.messages(OTHER)
    assert ids.APPROVE in _buttons(new.blocks)

    slack.standin.click(ALICE, new, ids.APPROVE)
    assert slack.resumed(handoff_id)["status"] == "approved"


def test_an_admin_redelivers_an_undeliverable_handoff_to_another_channel_and_its_run_resumes(
    slack: SlackEnv,
) -> None:
    slack.standin.fail_next("chat.postMessage", error="is_archived")
    old_id = slack.refund_approval()
    assert slack.resumed(old_id)["status"] == "undeliverable"
    still_pending = slack.refund_approval(run_id="run-other")
    slack.posted(still_pending)

    # Only admins redeliver, and only an undeliverable handoff: refusals change nothing.
    refused = slack.command(ALICE, f"redeliver {old_id} {OTHER}")
    assert "Only handoff admins" in refused.text
    assert "not undeliverable" in _reply(slack, f"redeliver {still_pending} {OTHER}")
    assert "redelivered" not in [e.event for e in slack.handoffs.audit(old_id)]
    assert slack.handoffs.list_pending(run_id="run-refund").items == []

    answer = _reply(slack, f"redeliver {old_id} {OTHER}")

    [link] = [e for e in slack.handoffs.audit(old_id) if e.event == "redelivered"]
    new_id = link.detail["handoff_id"]
    assert link.actor == ADMIN and new_id in answer
    message = slack.posted(new_id)
    assert message.channel == OTHER and ids.APPROVE in _buttons(message.blocks)
    again = _reply(slack, f"redeliver {old_id}")
    assert "redelivered already" in again and new_id in again
    slack.standin.click(ALICE, message, ids.APPROVE)

    resumed = slack.resumed(new_id)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["decided_by"] == ALICE
    new = slack.handoffs.get(new_id)
    assert (new.run_id, new.redelivered_from) == ("run-refund", old_id)
    # The old handoff stays undeliverable, resumed once; the run is resumed once per handoff.
    old = slack.handoffs.get(old_id)
    assert old.status is Status.UNDELIVERABLE and old.resume.attempt == 1
    entries = [json.loads(raw) for raw in slack.redis.lrange(resume_targets.COMPLETED, 0, -1)]
    assert sorted((e["handoff_id"], e["status"]) for e in entries) == sorted(
        [(old_id, "undeliverable"), (new_id, "approved")]
    )
    assert [m.ts for m in slack.standin.messages(OTHER) if m.thread_ts is None] == [message.ts]
    assert "not undeliverable" in _reply(slack, f"redeliver {new_id}")  # approved now
