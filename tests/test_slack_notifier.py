"""SlackNotifier against the stand-in: a post whose answer is lost never leaves a second
message with live buttons, and every message follows the handoff's state."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bot.delivery.slack_notifier import DUPLICATE_EVENT_TYPE, METADATA_EVENT_TYPE, SlackNotifier
from bot.standin import Message, SlackStandIn
from store.models import Handoff
from tests.support.impatient_slack import (
    LATE,
    impatient_client,
    looking_back,
    running_standin,
    settling_poster,
)
from worker.client import Handoffs
from worker.notifier import DeliveryFailed, Undeliverable

CHANNEL = "C0APPROVALS"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    yield from running_standin()


@pytest.fixture
def notifier(slack: SlackStandIn) -> SlackNotifier:
    client = impatient_client(slack)
    return SlackNotifier(client, default_channel=CHANNEL, poster=settling_poster(client))


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
    """The bot may post where it cannot read the history (chat:write.public): a look-up
    answered not_in_channel says nothing of the post, and no later attempt could read more,
    so the message is posted (a copy may show twice) rather than the handoff left to fail."""
    handoff = _approval(handoffs)
    slack.fail_next("conversations.history", error="not_in_channel")

    refs = notifier.deliver(handoffs.get(handoff.id), attempt=looking_back())

    [posted] = _posts_of(slack, handoff.id)
    assert refs["ts"] == posted.ts
    assert len(slack.calls("conversations.history")) == 1


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
    slack.fail_next("chat.postMessage", error="internal_error")

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
