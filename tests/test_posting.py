"""Posting once through a flaky Slack: the stand-in loses answers, the Poster reconciles."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slack_sdk.errors import SlackApiError

from bot.delivery.posting import AnswerLost, Poster, PostTag, delete_extra
from bot.standin import Message, SlackStandIn
from tests.support.impatient_slack import (
    LATE,
    impatient_client,
    running_standin,
    settling_poster,
)

CHANNEL = "C0APPROVALS"
TAG = PostTag("handoff_posted", {"handoff_id": "ho_01", "run_id": "run-1"})
BUTTONS = [
    {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "value": "ho_01",
                "text": {"type": "plain_text", "text": "Approve"},
            }
        ],
    }
]


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    yield from running_standin()


@pytest.fixture
def poster(slack: SlackStandIn) -> Poster:
    return settling_poster(impatient_client(slack))


def _post(poster: Poster, **options: object) -> str:
    options.setdefault("neutralise", delete_extra)
    posted = poster.post(channel=CHANNEL, tag=TAG, text="Approve?", blocks=BUTTONS, **options)  # type: ignore[arg-type]
    return posted.ts


def _live(slack: SlackStandIn) -> list[Message]:
    """Top-level messages that still show buttons."""
    return [
        m
        for m in slack.messages(CHANNEL)
        if not m.thread_ts and any(b.get("type") == "actions" for b in m.blocks)
    ]


def test_a_post_whose_answer_came_too_late_is_adopted_not_repeated(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", status=200, delay=LATE)

    ts = _post(poster)

    assert [m.ts for m in _live(slack)] == [ts]
    assert len(slack.calls("chat.postMessage")) == 1
    [looked] = slack.calls("conversations.history")
    assert looked.params["include_all_metadata"] in ("1", "true", True)


def test_a_post_whose_connection_reset_after_slack_posted_is_adopted(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)

    ts = _post(poster)

    assert [m.ts for m in _live(slack)] == [ts]
    assert len(slack.calls("chat.postMessage")) == 1


@pytest.mark.parametrize(
    "fault", [{"reset_connection": True}, {"status": 500}, {"status": 503}], ids=str
)
def test_a_post_that_failed_before_slack_posted_is_posted_again_once(
    slack: SlackStandIn, poster: Poster, fault: dict
) -> None:
    slack.fail_next("chat.postMessage", **fault)

    ts = _post(poster)

    assert [m.ts for m in _live(slack)] == [ts]
    assert len(slack.calls("chat.postMessage")) == 2


def test_a_rate_limited_post_is_retried_without_looking(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", status=429, retry_after=0)

    ts = _post(poster)

    assert [m.ts for m in _live(slack)] == [ts]
    assert [c.http_status for c in slack.calls("chat.postMessage")] == [429, 200]
    assert slack.calls("conversations.history") == []


def test_a_rejected_post_is_raised_as_slack_said(slack: SlackStandIn, poster: Poster) -> None:
    slack.fail_next("chat.postMessage", error="channel_not_found")

    with pytest.raises(SlackApiError, match="channel_not_found"):
        _post(poster)
    assert slack.calls("conversations.history") == []


def test_answers_lost_every_time_raise_answer_lost_and_a_later_attempt_posts_once(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", reset_connection=True, times=poster.tries)
    with pytest.raises(AnswerLost):
        _post(poster)
    assert _live(slack) == []

    ts = _post(poster, since=0.0)

    assert [m.ts for m in _live(slack)] == [ts]


def test_a_later_attempt_adopts_the_earlier_post_and_neutralises_extra_copies(
    slack: SlackStandIn, poster: Poster
) -> None:
    # Two earlier attempts both posted, and neither outcome was recorded.
    first = _post(poster)
    second = _post(poster)

    kept = _post(poster, since=0.0)

    assert kept == first
    assert [m.ts for m in _live(slack)] == [first]
    assert len(slack.calls("chat.postMessage")) == 2
    assert [c.params["ts"] for c in slack.calls("chat.delete")] == [second]


def test_known_and_foreign_messages_with_the_same_metadata_are_never_adopted(
    slack: SlackStandIn, poster: Poster
) -> None:
    old = _post(poster)  # e.g. the message a reassignment left behind

    new = _post(poster, since=0.0, exclude={old})

    assert new != old
    assert len(slack.calls("chat.postMessage")) == 2
    assert {m.ts for m in _live(slack)} == {old, new}


def test_a_thread_reply_is_looked_for_in_its_thread(slack: SlackStandIn, poster: Poster) -> None:
    parent = _post(poster)
    record = PostTag("handoff_recorded", {"handoff_id": "ho_01"})
    slack.fail_next("chat.postMessage", status=200, delay=LATE)

    posted = poster.post(
        channel=CHANNEL, thread_ts=parent, tag=record, neutralise=delete_extra, text="Approved"
    )

    assert [m.ts for m in slack.thread(CHANNEL, parent)] == [posted.ts]
    assert posted.adopted
    assert len(slack.calls("conversations.replies")) == 1
