"""Where the bot posts, against a stand-in as strict as Slack about it (real `handoff serve`
and `handoff worker` processes): the bot joins a public channel before posting there (Slack
sends thread answers and lets it read only where it is a member), a private channel it was
not invited to ends the handoff undeliverable with what to do, and a handoff routed to a
person is posted, looked up, updated and reassigned in their DM by its conversation id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from store.models import Status, TaskState
from tests.support.slack_env import ADMIN, ALICE, BOB, CHANNEL, SlackEnv, running_slack, wait_for

OTHER = "C0OTHERTEAM"
PRIVATE = "G0FINANCE"


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _live_posts(slack: SlackEnv, channel: str, handoff_id: str) -> list:
    """Top-level messages of the handoff in ``channel`` that still carry buttons."""
    return [
        m
        for m in slack.standin.messages(channel)
        if m.thread_ts is None
        and (m.metadata or {}).get("event_payload", {}).get("handoff_id") == handoff_id
        and any(b.get("type") == "actions" for b in m.blocks)
    ]


def test_an_answer_in_a_public_channel_the_bot_had_not_joined_arrives(slack: SlackEnv) -> None:
    assert CHANNEL not in slack.standin.bot_channels()
    question = slack.region_question(
        run_id="run-join", resume="tests.support.resume_targets:record"
    )
    message = slack.posted(question.id)

    assert CHANNEL in slack.standin.bot_channels()  # it joined before posting
    _, heard = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)

    assert heard is not None and heard.status == 200
    assert slack.resumed(question.id)["resume_data"]["answer"] == "eu-west-1"


def test_a_reassignment_to_a_channel_the_bot_is_not_in_posts_once_and_links_the_new_message(
    slack: SlackEnv,
) -> None:
    question = slack.region_question(
        run_id="run-move", resume="tests.support.resume_targets:record"
    )
    old = slack.posted(question.id)

    reply = slack.command(ADMIN, f"reassign {question.id} <#{OTHER}|other>")
    assert "Reassigned" in reply.text
    wait_for(lambda: slack.handoffs.get(question.id).message_refs.get("channel") == OTHER)

    refs = slack.handoffs.get(question.id).message_refs
    [new] = _live_posts(slack, OTHER, question.id)
    assert refs["ts"] == new.ts
    assert _live_posts(slack, CHANNEL, question.id) == []  # the old one points to the new one
    assert old.ts in [c["ts"] for c in refs["copies"]]
    # It is a conversation the bot is in now: an answer in the new thread is heard.
    _, heard = slack.standin.post_message(BOB, OTHER, "us-east-1", thread_ts=new.ts)
    assert heard is not None
    assert slack.resumed(question.id)["resume_data"]["answer"] == "us-east-1"


def test_a_post_whose_answer_was_lost_in_a_channel_not_joined_before_is_found_not_repeated(
    slack: SlackEnv,
) -> None:
    # Slack posts, then the answer is lost: the worker must read the channel to find it.
    slack.standin.fail_next("chat.postMessage", reset_connection=True, carried_out=True)
    handoff_id = slack.refund_approval()

    wait_for(lambda: slack.handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED)
    [only] = _live_posts(slack, CHANNEL, handoff_id)
    assert slack.handoffs.get(handoff_id).message_refs["ts"] == only.ts


def test_a_resolved_escalation_in_a_channel_the_bot_had_not_joined_keeps_its_thread_record(
    slack: SlackEnv,
) -> None:
    escalation = slack.handoffs.escalate(
        run_id="run-legal",
        thread_id="t",
        summary="Customer threatens legal action",
        channel=OTHER,
        resume="tests.support.resume_targets:record",
    )
    posted = slack.posted(escalation.id)
    slack.standin.click(ALICE, posted, ids.CLAIM)
    wait_for(lambda: "Claimed by" in str(slack.posted(escalation.id).blocks))
    slack.standin.click(ALICE, slack.posted(escalation.id), ids.RESOLVE)
    [modal] = slack.standin.views(ALICE)
    slack.standin.submit_view(ALICE, modal, {ids.RESOLUTION_BLOCK: {ids.VALUE: "Settled."}})

    wait_for(lambda: slack.handoffs.get(escalation.id).message_refs.get("record_ts"))
    [record] = slack.standin.thread(OTHER, posted.ts)
    assert "Resolved" in record.text and "Settled." in record.text
    # Nothing was lost, so nothing was looked for (a look-up there once failed not_in_channel).
    assert slack.standin.calls("conversations.replies") == []
    assert slack.standin.calls("conversations.history") == []


def test_a_private_channel_the_bot_was_not_invited_to_ends_undeliverable_saying_so(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval(channel=PRIVATE)

    waited = slack.handoffs.wait(handoff_id, timeout=15)

    assert waited.status is Status.UNDELIVERABLE
    comment = waited.resume_data.comment if waited.resume_data else ""
    assert "channel_not_found" in comment
    assert f"invite the bot to it (/invite @{slack.standin.bot_name}" in comment
    # Once invited, the same request is delivered.
    slack.standin.invite_bot(PRIVATE)
    again = slack.refund_approval(channel=PRIVATE, run_id="run-again")
    assert slack.posted(again).channel == PRIVATE


def test_a_handoff_routed_to_a_person_is_posted_updated_and_reassigned_in_their_dm(
    slack: SlackEnv,
) -> None:
    dm = "D" + ALICE[1:]
    # The first post lands but its answer is lost: found again by reading the DM (by its
    # conversation id: Slack's history takes no user id).
    slack.standin.fail_next("chat.postMessage", reset_connection=True, carried_out=True)
    decided = slack.refund_approval(channel=ALICE, reviewers=[ALICE])
    wait_for(lambda: slack.handoffs.get(decided).delivery.state is TaskState.COMPLETED)
    refs = slack.handoffs.get(decided).message_refs
    [posted] = _live_posts(slack, dm, decided)
    assert (refs["channel"], refs["ts"]) == (dm, posted.ts)

    # Decided there, its message is updated (chat.update takes the DM's id only).
    slack.standin.click(ALICE, posted, ids.APPROVE)
    assert slack.resumed(decided)["status"] == "approved"
    wait_for(lambda: not _live_posts(slack, dm, decided))
    # Another one, reassigned elsewhere: the DM's message then points there.
    moved = slack.refund_approval(channel=ALICE, reviewers=[ALICE], run_id="run-moved")
    slack.posted(moved)
    slack.command(ADMIN, f"reassign {moved} <#{OTHER}|other>")
    wait_for(lambda: slack.handoffs.get(moved).message_refs.get("channel") == OTHER)
    wait_for(lambda: not _live_posts(slack, dm, moved))
    assert len(_live_posts(slack, OTHER, moved)) == 1
    updates = slack.standin.calls("chat.update")
    assert updates and all(c.params.get("channel") != ALICE for c in updates)
    assert [c.response.get("error") for c in updates if not c.response.get("ok")] == []


def test_after_the_bot_is_removed_from_a_channel_its_next_post_there_joins_again(
    slack: SlackEnv,
) -> None:
    # Found by the break-it review: the join was trusted for ten minutes after a removal.
    first = slack.region_question(run_id="run-1")
    slack.posted(first.id)
    left = slack.standin.remove_bot(CHANNEL, by=ADMIN)  # Slack tells the bot: channel_left
    assert left is not None and left.status == 200

    question = slack.region_question(run_id="run-2", resume="tests.support.resume_targets:record")
    message = slack.posted(question.id)

    assert CHANNEL in slack.standin.bot_channels()
    _, heard = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)
    assert heard is not None
    assert slack.resumed(question.id)["resume_data"]["answer"] == "eu-west-1"


def test_a_lost_post_in_a_channel_the_bot_was_removed_from_unannounced_is_found_not_repeated(
    slack: SlackEnv,
) -> None:
    slack.posted(slack.refund_approval(run_id="run-first"))
    slack.standin.remove_bot(CHANNEL, announce=False)  # no event: only Slack's answers say so
    slack.standin.fail_next("chat.postMessage", reset_connection=True, carried_out=True)

    handoff_id = slack.refund_approval(run_id="run-lost")

    wait_for(lambda: slack.handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED)
    [only] = _live_posts(slack, CHANNEL, handoff_id)
    assert slack.handoffs.get(handoff_id).message_refs["ts"] == only.ts
    assert CHANNEL in slack.standin.bot_channels()


def test_a_handoff_in_a_persons_dm_reassigned_to_another_person_goes_to_their_dm(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval(channel=ALICE, reviewers=[ALICE])
    slack.posted(handoff_id)

    reply = slack.command(ADMIN, f"reassign {handoff_id} <@{BOB}>")

    assert f"DM with <@{BOB}>" in reply.text
    bob_dm = "D" + BOB[1:]
    wait_for(lambda: slack.handoffs.get(handoff_id).message_refs.get("channel") == bob_dm)
    assert len(_live_posts(slack, bob_dm, handoff_id)) == 1
    assert _live_posts(slack, "D" + ALICE[1:], handoff_id) == []
    assert slack.handoffs.get(handoff_id).reviewers == [BOB]


def test_an_escalation_to_a_private_channel_the_bot_is_not_in_fails_at_once_saying_so(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval(escalate_to=PRIVATE, escalate_after=0.05)
    slack.posted(handoff_id)

    def failed() -> str | None:
        events = slack.handoffs.audit(handoff_id)
        return next((e.detail.get("error") for e in events if e.event == "escalation_failed"), None)

    error = wait_for(failed, timeout=15)
    assert "invite the bot to it" in str(error)
    posts = [c for c in slack.standin.calls("chat.postMessage") if c.params["channel"] == PRIVATE]
    assert len(posts) == 1, "refused for good: not retried"
