"""SlackNotifier against the stand-in: a post whose answer is lost never leaves a second
message with live buttons, and every message follows the handoff's state."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from redis import Redis

from bot.delivery.conversations import Conversations
from bot.delivery.slack_notifier import DUPLICATE_EVENT_TYPE, METADATA_EVENT_TYPE, SlackNotifier
from bot.standin import Message, SlackStandIn
from store.keys import KeySpace
from store.models import Handoff, TaskKind
from tests.support.impatient_slack import (
    LATE,
    impatient_client,
    looking_back,
    running_standin,
    settling_poster,
)
from worker.client import Handoffs
from worker.notifier import Attempt, DeliveryFailed, Undeliverable

CHANNEL = "C0APPROVALS"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    yield from running_standin()


@pytest.fixture
def notifier(slack: SlackStandIn, redis: Redis) -> SlackNotifier:
    client = impatient_client(slack)
    conversations = Conversations(client, redis, KeySpace())
    return SlackNotifier(
        client, conversations, default_channel=CHANNEL, poster=settling_poster(client)
    )


def _approval(handoffs: Handoffs) -> Handoff:
    return handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", args={"amount": 30}
    )


def _posts_of(slack: SlackStandIn, handoff_id: str) -> list[Message]:
    """Top-level messages that belong to the handoff, by their metadata."""
    return [
        m
        for m in slack.messages(CHANNEL)
        if not m.thread_ts
        and (m.metadata or {}).get("event_payload", {}).get("handoff_id") == handoff_id
    ]


def _has_buttons(message: Message) -> bool:
    return any(block.get("type") == "actions" for block in message.blocks)


def test_a_delivery_whose_answer_came_too_late_leaves_one_live_message(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    slack.fail_next("chat.postMessage", status=200, delay=LATE)

    refs = notifier.deliver(handoffs.get(handoff.id))

    [posted] = _posts_of(slack, handoff.id)
    assert (refs["channel"], refs["ts"]) == (CHANNEL, posted.ts)
    assert _has_buttons(posted)


def test_a_second_attempt_adopts_the_first_post_and_turns_extras_into_pointers(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = handoffs.get(_approval(handoffs).id)
    # Two earlier attempts posted; their outcome was never recorded (worker lost).
    first = notifier.deliver(handoff)["ts"]
    second = notifier.deliver(handoff)["ts"]

    refs = notifier.deliver(handoff, attempt=looking_back(number=3))

    assert refs["ts"] == first
    kept, extra = _posts_of(slack, handoff.id)[0], slack.message(CHANNEL, second)
    assert _has_buttons(kept)
    assert not _has_buttons(extra)
    assert "Duplicate" in json.dumps(extra.blocks)
    assert kept.permalink in json.dumps(extra.blocks)
    assert extra.metadata["event_type"] == DUPLICATE_EVENT_TYPE
    assert kept.metadata["event_type"] == METADATA_EVENT_TYPE


def test_the_decision_record_is_posted_once_when_its_answer_is_lost(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    refs = notifier.deliver(handoffs.get(handoff.id))
    decided = handoffs.decide(handoff.id, "approved", by="U0ALICE")
    decided = decided.model_copy(update={"message_refs": refs})
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)

    new_refs = notifier.update(decided)

    [record] = slack.thread(CHANNEL, refs["ts"])
    assert new_refs is not None and new_refs["record_ts"] == record.ts
    assert not _has_buttons(slack.message(CHANNEL, refs["ts"]))


@pytest.mark.parametrize("error", ["is_archived", "not_in_channel", "channel_not_found"])
def test_a_post_slack_refuses_for_good_is_undeliverable(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs, error: str
) -> None:
    handoff = _approval(handoffs)
    slack.fail_next("chat.postMessage", error=error)

    with pytest.raises(Undeliverable, match=f"{CHANNEL}: {error}") as refused:
        notifier.deliver(handoffs.get(handoff.id))

    assert refused.value.code == error
    assert len(slack.calls("chat.postMessage")) == 1


def test_a_look_up_slack_refuses_for_good_posts_anyway_and_is_never_undeliverable(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    """A conversation the bot cannot read for good (channel_not_found to a look-up) says
    nothing of the post, and no later attempt could read more, so the message is posted (a
    copy may show twice) rather than the handoff left to fail. not_in_channel (the bot was
    removed) makes it join again and look again."""
    handoff = _approval(handoffs)
    slack.fail_next("conversations.history", error="channel_not_found")

    refs = notifier.deliver(handoffs.get(handoff.id), attempt=looking_back())

    [posted] = _posts_of(slack, handoff.id)
    assert refs["ts"] == posted.ts
    assert len(slack.calls("conversations.history")) == 1

    again = _approval(handoffs)
    slack.fail_next("conversations.history", error="not_in_channel")
    refs = notifier.deliver(handoffs.get(again.id), attempt=looking_back())
    [posted] = _posts_of(slack, again.id)
    assert refs["ts"] == posted.ts
    assert len(slack.calls("conversations.history")) == 3, "looked again once joined"
    assert len(slack.calls("conversations.join")) == 2


def test_a_look_up_that_fails_for_now_is_retried_with_its_window_kept(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    slack.fail_next("conversations.history", error="internal_error")
    attempt = looking_back()

    with pytest.raises(DeliveryFailed) as failed:
        notifier.deliver(handoffs.get(handoff.id), attempt=attempt)

    assert not isinstance(failed.value, Undeliverable)
    left, asked = failed.value.unanswered, attempt.unanswered
    assert left is not None and asked is not None and asked.end is not None
    assert left.start <= asked.start and left.end == pytest.approx(asked.end, abs=1e-5), (
        "the next attempt still looks at the whole window"
    )
    assert slack.calls("chat.postMessage") == []


def test_a_transient_slack_error_is_raised_to_be_retried(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    # Slack is busy, and did nothing (unlike internal_error, after which part of the call
    # may have been done: that post is looked for, as after a lost answer).
    slack.fail_next("chat.postMessage", error="service_unavailable")

    with pytest.raises(DeliveryFailed) as failed:
        notifier.deliver(handoffs.get(handoff.id))

    assert not isinstance(failed.value, Undeliverable)
    assert failed.value.retry_after is None
    assert failed.value.unanswered is None, "Slack answered: nothing was posted"


def test_a_rate_limited_update_is_put_off_for_retry_after(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    refs = notifier.deliver(handoffs.get(handoff.id))
    decided = handoffs.decide(handoff.id, "approved", by="U0ALICE")
    slack.fail_next("chat.update", status=429, retry_after=30)

    with pytest.raises(DeliveryFailed) as limited:
        notifier.update(decided.model_copy(update={"message_refs": refs}))

    assert limited.value.retry_after == 30
    assert "chat.update" in str(limited.value)


def test_a_reassignment_whose_old_message_was_deleted_still_returns_the_new_one(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    first = notifier.deliver(handoffs.get(handoff.id))
    handoffs.store.link_message(handoff.id, first["channel"], first["ts"])
    handoffs.store.redis.hset(
        handoffs.store.keys.handoff(handoff.id), "message_refs", json.dumps(first)
    )
    notifier.client.chat_delete(channel=CHANNEL, ts=first["ts"])
    moved = handoffs.store.reassign(handoff.id, by="U0ADMIN", channel="C0OTHER")

    refs = notifier.deliver(moved)
    assert refs["channel"] == "C0OTHER"
    assert refs["copies"] == [{"channel": CHANNEL, "ts": first["ts"], "moved_to": "C0OTHER"}]
    # Later updates skip the message that is gone too.
    with_refs = handoffs.get(handoff.id).model_copy(update={"message_refs": refs})
    notifier.update(with_refs)


def _attempt(handoffs: Handoffs, handoff_id: str, kind: TaskKind, token: str) -> Attempt:
    """Begin an attempt at a task in the store, as a job does."""
    start = handoffs.store.begin_task(handoff_id, kind, run_token=token)
    assert start.action == "run", start
    return Attempt(start.attempt, start.started_at, start.unanswered)


def test_a_post_lost_before_a_reassignment_is_cleared_from_the_old_channel(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    first = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-1")
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)
    slack.fail_next("conversations.history", status=500)
    with pytest.raises(DeliveryFailed) as lost:
        notifier.deliver(handoffs.get(handoff.id), attempt=first)
    handoffs.store.finish_task(
        handoff.id, TaskKind.DELIVER, attempt=1, error="lost", unanswered=lost.value.unanswered
    )
    moved = handoffs.store.reassign(handoff.id, by="U0ADMIN", channel="C0OTHER")

    second = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-2")
    refs = notifier.deliver(moved, attempt=second)

    assert second.unanswered is not None and second.unanswered.route == ""
    [stray] = _posts_of(slack, handoff.id)
    assert not _has_buttons(slack.message(CHANNEL, stray.ts)), "the stray lost its buttons"
    assert refs["channel"] == "C0OTHER" and _has_buttons(slack.message("C0OTHER", refs["ts"]))


def test_a_post_lost_in_a_persons_dm_before_a_reassignment_is_cleared_from_that_dm(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    # Where the lost post went is what the attempt was routed to (here a person, so their
    # DM's id), not the default channel.
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", channel="U0ALICE"
    )
    first = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-1")
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)
    slack.fail_next("conversations.history", status=500)
    with pytest.raises(DeliveryFailed) as lost:
        notifier.deliver(handoffs.get(handoff.id), attempt=first)
    handoffs.store.finish_task(
        handoff.id, TaskKind.DELIVER, attempt=1, error="lost", unanswered=lost.value.unanswered
    )
    moved = handoffs.store.reassign(handoff.id, by="U0ADMIN", channel="C0OTHER")

    second = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-2")
    refs = notifier.deliver(moved, attempt=second)

    assert second.unanswered is not None and second.unanswered.route == "U0ALICE"
    [stray] = [m for m in slack.messages("D0ALICE") if not m.thread_ts]
    assert not _has_buttons(stray), "the stray in the DM lost its buttons"
    assert refs["channel"] == "C0OTHER" and _has_buttons(slack.message("C0OTHER", refs["ts"]))
    assert _posts_of(slack, handoff.id) == [], "nothing was cleared or posted in the default"


def test_an_escalation_copy_lost_before_the_decision_is_found_and_kept(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = handoffs.request_approval(
        run_id="run-1",
        thread_id="t-1",
        action="refund",
        escalate_to="C0ESCALATE",
        escalate_after=0.01,
    )
    refs = notifier.deliver(handoffs.get(handoff.id))
    handoffs.store.link_message(handoff.id, refs["channel"], refs["ts"])
    handoffs.store.redis.hset(
        handoffs.store.keys.handoff(handoff.id), "message_refs", json.dumps(refs)
    )
    time.sleep(0.02)
    first = _attempt(handoffs, handoff.id, TaskKind.ESCALATE, "job-1")
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)
    slack.fail_next("conversations.history", status=500)
    with pytest.raises(DeliveryFailed) as lost:
        notifier.escalate(handoffs.get(handoff.id), attempt=first)
    handoffs.store.finish_task(
        handoff.id, TaskKind.ESCALATE, attempt=1, error="lost", unanswered=lost.value.unanswered
    )
    decided = handoffs.decide(handoff.id, "approved", by="U0ALICE")

    second = _attempt(handoffs, handoff.id, TaskKind.ESCALATE, "job-2")
    found = notifier.escalate(decided, attempt=second)

    assert found is not None
    [copy] = found["copies"]
    assert copy["channel"] == "C0ESCALATE"
    assert len(slack.calls("chat.postMessage")) == 2, "found, not posted again"
    outcome = handoffs.store.finish_task(
        handoff.id, TaskKind.ESCALATE, attempt=second.number, message_refs=found
    )
    assert outcome == "completed"
    notifier.update(handoffs.get(handoff.id))
    assert not _has_buttons(slack.message("C0ESCALATE", copy["ts"])), "it shows the outcome"


def test_a_reminder_whose_answer_was_lost_is_not_posted_twice(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff = _approval(handoffs)
    refs = notifier.deliver(handoffs.get(handoff.id))
    posted = handoffs.get(handoff.id).model_copy(update={"message_refs": refs})
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)

    notifier.remind(posted)

    assert len(slack.thread(CHANNEL, refs["ts"])) == 1


def _escalated(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> tuple[Handoff, dict]:
    """An approval posted to CHANNEL with a copy in C0ESCALATE, its refs in the store."""
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="refund", escalate_to="C0ESCALATE"
    )
    delivered = notifier.deliver(handoffs.get(handoff.id))
    added = notifier.escalate(
        handoffs.get(handoff.id).model_copy(update={"message_refs": delivered})
    )
    assert added is not None
    # The escalation returns only its copy: the store adds it to the refs.
    refs = {**delivered, "copies": [*delivered.get("copies", []), *added["copies"]]}
    handoffs.store.redis.hset(
        handoffs.store.keys.handoff(handoff.id), "message_refs", json.dumps(refs)
    )
    return handoff, refs


@pytest.mark.parametrize(
    "fault",
    [{"error": "internal_error"}, {"reset_connection": True, "times": 2}],
    ids=["slack-error", "connection-reset"],
)
def test_a_failing_copy_spares_the_others_and_a_retry_never_posts_the_record_twice(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs, fault: dict
) -> None:
    handoff, refs = _escalated(slack, notifier, handoffs)
    [copy] = refs["copies"]
    handoffs.decide(handoff.id, "approved", by="U0ALICE")
    changed: list[str] = []
    notifier.on_change = lambda h: changed.append(h.id)
    # The primary message's update goes through; the escalation copy's fails.
    slack.fail_next("chat.update", after=1, **fault)

    first = _attempt(handoffs, handoff.id, TaskKind.NOTIFY, "job-1")
    with pytest.raises(DeliveryFailed) as failed:
        notifier.update(handoffs.get(handoff.id), attempt=first)
    # What run_notify does with the failure.
    outcome = handoffs.store.finish_task(
        handoff.id,
        TaskKind.NOTIFY,
        attempt=first.number,
        error=str(failed.value),
        unanswered=failed.value.unanswered,
        message_refs=failed.value.message_refs,
    )

    assert outcome == "retrying", "a copy still showing buttons is worth another attempt"
    assert "C0ESCALATE" in str(failed.value)
    assert not _has_buttons(slack.message(CHANNEL, refs["ts"])), "the primary shows the outcome"
    [record] = slack.thread(CHANNEL, refs["ts"])
    assert changed == [handoff.id], "the Home was refreshed all the same"
    assert handoffs.get(handoff.id).message_refs["record_ts"] == record.ts
    assert _has_buttons(slack.message("C0ESCALATE", copy["ts"]))

    second = _attempt(handoffs, handoff.id, TaskKind.NOTIFY, "job-2")
    notifier.update(handoffs.get(handoff.id), attempt=second)

    assert not _has_buttons(slack.message("C0ESCALATE", copy["ts"]))
    assert slack.thread(CHANNEL, refs["ts"]) == [record], "the record is posted once"


def test_a_copy_that_is_gone_is_skipped_without_failing_the_update(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs
) -> None:
    handoff, refs = _escalated(slack, notifier, handoffs)
    notifier.client.chat_delete(channel="C0ESCALATE", ts=refs["copies"][0]["ts"])
    handoffs.decide(handoff.id, "approved", by="U0ALICE")

    new_refs = notifier.update(handoffs.get(handoff.id))

    assert new_refs is not None and new_refs["record_ts"]
    assert not _has_buttons(slack.message(CHANNEL, refs["ts"]))


@pytest.mark.parametrize("last", [TaskKind.ESCALATE, TaskKind.DELIVER])
def test_a_reassignment_and_an_escalation_at_once_keep_each_others_messages(
    slack: SlackStandIn, notifier: SlackNotifier, handoffs: Handoffs, last: TaskKind
) -> None:
    # Found by the break-it review: each task returned the refs it read at its start, and
    # the one finishing last dropped the other's message (left with live buttons).
    store = handoffs.store
    handoff = handoffs.request_approval(
        run_id="run-1",
        thread_id="t-1",
        action="refund",
        escalate_to="C0ESCALATE",
        escalate_after=0.01,
    )
    first = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-1")
    posted = notifier.deliver(handoffs.get(handoff.id), attempt=first)
    store.finish_task(handoff.id, TaskKind.DELIVER, attempt=first.number, message_refs=posted)
    store.reassign(handoff.id, by="U0ADMIN", channel="C0OTHER")
    time.sleep(0.02)

    # Both read the handoff before either finishes, as two Slack workers would.
    escalation = _attempt(handoffs, handoff.id, TaskKind.ESCALATE, "job-e")
    delivery = _attempt(handoffs, handoff.id, TaskKind.DELIVER, "job-d")
    snapshot = handoffs.get(handoff.id)
    results = {
        TaskKind.ESCALATE: (escalation, notifier.escalate(snapshot, attempt=escalation)),
        TaskKind.DELIVER: (delivery, notifier.deliver(snapshot, attempt=delivery)),
    }
    for kind in sorted(results, key=lambda k: k is last):
        attempt, refs = results[kind]
        assert (
            store.finish_task(handoff.id, kind, attempt=attempt.number, message_refs=refs)
            == "completed"
        )

    refs = store.get(handoff.id).message_refs
    assert refs["channel"] == "C0OTHER"
    assert {c["channel"] for c in refs["copies"]} == {CHANNEL, "C0ESCALATE"}
    decided = handoffs.decide(handoff.id, "approved", by="U0ALICE")
    notifier.update(decided)
    for channel in (CHANNEL, "C0OTHER", "C0ESCALATE"):
        assert [m.ts for m in slack.messages(channel) if _has_buttons(m)] == [], channel
