"""Posting once through a flaky Slack: the stand-in loses answers, the Poster reconciles."""

from __future__ import annotations

import time
import types
from collections.abc import Iterator

import pytest
from redis import Redis
from slack_sdk.errors import SlackApiError

from bot.delivery.posting import (
    AnswerLost,
    LookUps,
    Posted,
    Poster,
    PostRefused,
    PostTag,
    delete_extra,
)
from bot.standin import Message, SlackStandIn
from store.ids import new_handoff_id
from store.keys import KeySpace
from store.models import HandoffRequest, TaskKind
from store.rate_budget import RateBudget
from store.repository import HandoffStore
from tests.support.impatient_slack import (
    LATE,
    impatient_client,
    looking_back,
    running_standin,
    settling_poster,
)
from worker.notifier import Attempt, DeliveryFailed

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
    for running in running_standin():
        # The poster posts where it is told; the notifier has joined the channel first.
        running.invite_bot(CHANNEL)
        yield running


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


@pytest.mark.parametrize(
    "answered",
    [
        {"error": "internal_error"},  # "some aspect of the operation may have succeeded"
        {"error": "fatal_error"},
        {"truncated": True},  # an ok: true cut short reads as a non-JSON error
    ],
    ids=["internal_error", "fatal_error", "truncated"],
)
def test_a_post_slack_carried_out_but_answered_with_an_error_is_adopted_not_repeated(
    slack: SlackStandIn, poster: Poster, answered: dict
) -> None:
    slack.fail_next("chat.postMessage", carried_out=True, **answered)

    ts = _post(poster)

    assert [m.ts for m in _live(slack)] == [ts]
    assert len(slack.calls("chat.postMessage")) == 1


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


def test_a_rate_limited_post_ends_the_attempt_with_slacks_retry_after_without_looking(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", status=429, retry_after=7)
    started = time.monotonic()

    with pytest.raises(PostRefused) as limited:
        _post(poster)

    assert limited.value.retry_after == 7
    assert limited.value.unanswered is None, "Slack answered: nothing to look for"
    assert time.monotonic() - started < 1, "the poster sleeps out no Retry-After"
    assert [c.http_status for c in slack.calls("chat.postMessage")] == [429]
    assert slack.calls("conversations.history") == []


def test_a_rejected_post_is_raised_as_slack_said(slack: SlackStandIn, poster: Poster) -> None:
    slack.fail_next("chat.postMessage", error="channel_not_found")

    with pytest.raises(PostRefused, match="channel_not_found") as refused:
        _post(poster)

    assert isinstance(refused.value.slack_error, SlackApiError)
    assert refused.value.retry_after is None
    assert slack.calls("conversations.history") == []


def test_answers_lost_every_time_raise_answer_lost_and_a_later_attempt_posts_once(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("chat.postMessage", reset_connection=True, times=poster.tries)
    with pytest.raises(AnswerLost) as lost:
        _post(poster)
    assert _live(slack) == []
    assert lost.value.unanswered is not None, "the next attempt must look"

    ts = _post(poster, attempt=Attempt(2, unanswered=lost.value.unanswered))

    assert [m.ts for m in _live(slack)] == [ts]


def test_a_first_attempt_posts_without_looking(slack: SlackStandIn, poster: Poster) -> None:
    _post(poster)
    _post(poster, attempt=Attempt(5))  # a retry after a clear refusal: nothing to look for

    assert slack.calls("conversations.history") == []
    assert len(_live(slack)) == 2


def test_a_later_attempt_adopts_the_earlier_post_and_neutralises_extra_copies(
    slack: SlackStandIn, poster: Poster
) -> None:
    # Two earlier attempts both posted, and neither outcome was recorded.
    first = _post(poster)
    second = _post(poster)

    kept = _post(poster, attempt=looking_back())

    assert kept == first
    assert [m.ts for m in _live(slack)] == [first]
    assert len(slack.calls("chat.postMessage")) == 2
    assert [c.params["ts"] for c in slack.calls("chat.delete")] == [second]


def test_known_and_foreign_messages_with_the_same_metadata_are_never_adopted(
    slack: SlackStandIn, poster: Poster
) -> None:
    old = _post(poster)  # e.g. the message a reassignment left behind

    new = _post(poster, attempt=looking_back(), exclude={old})

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


def test_a_worker_whose_clock_runs_a_minute_fast_still_finds_its_lost_post(
    slack: SlackStandIn, poster: Poster, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of a lost post is timed by Redis's clock (the attempt's start), never by
    the worker's: a worker 60 s fast would look after its own post and post again."""
    store = HandoffStore(redis)
    handoff_id = store.create(
        HandoffRequest(
            run_id="r",
            thread_id="t",
            request_type="approval",
            payload={"kind": "approval", "action": {"name": "refund", "args": {}}},
        ),
        handoff_id=new_handoff_id(),
    ).handoff.id
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token="job-1")
    fast = types.SimpleNamespace(time=lambda: time.time() + 60, sleep=time.sleep)
    monkeypatch.setattr("bot.delivery.posting.time", fast)
    slack.fail_next("chat.postMessage", reset_connection=True, carried_out=True)

    posted = poster.post(
        channel=CHANNEL,
        tag=TAG,
        neutralise=delete_extra,
        text="Approve?",
        blocks=BUTTONS,
        attempt=Attempt(start.attempt, start.started_at, start.unanswered),
    )

    assert posted.adopted
    assert [m.ts for m in _live(slack)] == [posted.ts]
    assert len(slack.calls("chat.postMessage")) == 1


def test_a_copy_found_before_a_later_page_fails_is_remembered_by_the_next_attempt(
    slack: SlackStandIn, poster: Poster
) -> None:
    """The post is on the first page; the second page fails: the next attempt reads on from
    there, and still knows the copy the first page held (it would post a second live copy,
    or read that page forever)."""
    earlier = looking_back()
    _post(poster)
    for n in range(20):
        slack.message_event("U0ALICE", CHANNEL, f"chatter {n}")
    ours = _post(poster)  # the newest: on the first page of 15 (the other is on the second)
    slack.fail_next("conversations.history", error="internal_error", after=1)
    paged = Poster(poster.client, settle_seconds=0, look_ups=LookUps(page_size=15))

    with pytest.raises(DeliveryFailed) as cut_short:
        _post(paged, attempt=earlier)
    again = Attempt(3, unanswered=cut_short.value.unanswered)
    kept = _post(paged, attempt=again)

    left = cut_short.value.unanswered
    assert left is not None and left.found == (ours,), "the copy on the first page is kept"
    assert left.read is not None, "and the first page is not read again"
    assert kept != ours and [m.ts for m in _live(slack)] == [kept], "the first copy kept"
    assert len(slack.calls("chat.postMessage")) == 2


def _looked_up_one_page_an_attempt(
    redis: Redis, slack: SlackStandIn, poster: Poster, *, attempts: int
) -> tuple[Posted, int]:
    """Post through a budget that gives one look-up page an attempt (as one call a minute
    does), running attempts as the worker would (each given what the last one left)."""
    budget = RateBudget(redis, KeySpace("ho"), "conversations.history", calls_per_minute=300)
    paced = Poster(
        poster.client,
        settle_seconds=0,
        look_ups=LookUps(
            page_size=15, budgets={"conversations.history": budget}, max_wait_seconds=0
        ),
    )
    attempt = looking_back()
    for number in range(1, attempts + 1):
        try:
            return _posted(paced, attempt), number
        except DeliveryFailed as put_off:
            assert put_off.retry_after is not None and put_off.retry_after <= 0.2
            time.sleep(put_off.retry_after + 0.01)
            attempt = Attempt(number + 1, unanswered=put_off.unanswered)
    raise AssertionError(f"not found in {attempts} attempts")


def _posted(poster: Poster, attempt: Attempt) -> Posted:
    return poster.post(
        channel=CHANNEL,
        tag=TAG,
        text="Approve?",
        blocks=BUTTONS,
        neutralise=delete_extra,
        attempt=attempt,
    )


def test_a_look_up_of_one_page_an_attempt_finds_the_post_above_older_messages_and_ends(
    slack: SlackStandIn, poster: Poster, redis: Redis
) -> None:
    for n in range(20):
        slack.message_event("U0ALICE", CHANNEL, f"chatter {n}")
    ours = _post(poster)  # landed, its answer lost: the newest, on the first page

    posted, attempts = _looked_up_one_page_an_attempt(redis, slack, poster, attempts=5)

    assert posted.ts == ours and posted.adopted
    assert attempts == 2, "page one, then page two: never page one again"
    assert len(slack.calls("chat.postMessage")) == 1


def test_a_copy_that_cannot_be_neutralised_now_is_neutralised_by_the_next_attempt(
    slack: SlackStandIn, poster: Poster
) -> None:
    first, second = _post(poster), _post(poster)  # both landed, neither answer heard
    slack.fail_next("chat.delete", status=429, retry_after=7)

    with pytest.raises(DeliveryFailed) as limited:
        _post(poster, attempt=looking_back())
    left = limited.value.unanswered
    kept = _post(poster, attempt=Attempt(3, unanswered=left))

    assert limited.value.retry_after == 7
    assert left is not None and set(left.found) == {first, second}
    assert kept == first and [m.ts for m in _live(slack)] == [first]
    assert len(slack.calls("chat.postMessage")) == 2, "no third copy"


def test_look_ups_are_never_repeated_by_the_client_each_is_one_of_the_budgets(
    slack: SlackStandIn, poster: Poster
) -> None:
    slack.fail_next("conversations.history", status=500)

    with pytest.raises(DeliveryFailed):
        _post(poster, attempt=looking_back())

    assert len(slack.calls("conversations.history")) == 1
