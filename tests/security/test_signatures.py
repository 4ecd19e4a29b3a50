"""Requests not signed by Slack, signed too long ago or in the future, or replayed, are
refused with 401 and change nothing; Slack's own event retries still go through.

A few cases go over real HTTP to `handoff serve`; the whole matrix of forgeries runs
against the same WSGI app in process, on every surface.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from redis import Redis

from bot.blockkit import ids
from bot.http.signing import MAX_AGE_SECONDS, sign
from bot.standin import Response
from store.models import Status
from tests.support.security_harness import (
    FORM,
    JSON,
    Answer,
    InProcessBot,
    assert_identical,
    capturing,
    interaction_body,
    payload_of,
    signed_headers,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ADMIN, ALICE, CAROL, CHANNEL, SIGNING_SECRET, SlackEnv

TS, SIG = "X-Slack-Request-Timestamp", "X-Slack-Signature"


def _approval(slack: SlackEnv, **options: Any) -> str:
    return slack.refund_approval(reviewers=[ALICE], **options)


def _captured_click(slack: SlackEnv, handoff_id: str, user: str = ALICE) -> tuple[dict, bytes]:
    """The signed request Slack would send for ``user`` clicking Approve (not delivered)."""
    message = slack.posted(handoff_id)
    with capturing(slack.standin) as captured:
        slack.standin.click(user, message, ids.APPROVE)
    [(headers, body)] = captured
    return headers, body


def _send_raw(slack: SlackEnv, body: bytes, headers: dict[str, str], **extra: str) -> Response:
    """POST exactly these signature headers (plus ``extra``) to `handoff serve`."""
    return slack.standin.send_signed(
        body,
        content_type=FORM,
        timestamp=int(headers[TS]),
        signature=headers[SIG],
        headers=extra or None,
    )


# -- over real HTTP -------------------------------------------------------------------------


FORGERIES: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "forged signature": lambda body: {"signature": "v0=" + "ab" * 32},
    "wrong secret": lambda body: {
        "timestamp": (ts := int(time.time())),
        "signature": sign("not-the-secret", str(ts), body),
    },
    "no signature headers": lambda body: {"sign": False},
    "signature but no timestamp": lambda body: {
        "sign": False,
        "headers": {SIG: sign(SIGNING_SECRET, str(int(time.time())), body)},
    },
    "timestamp but no signature": lambda body: {
        "sign": False,
        "headers": {TS: str(int(time.time()))},
    },
    "signed six minutes ago": lambda body: {"timestamp": int(time.time()) - 360},
    "signed six minutes ahead": lambda body: {"timestamp": int(time.time()) + 360},
}


def test_forged_clicks_over_http_get_401_and_change_nothing(
    slack: SlackEnv, store_redis: Redis
) -> None:
    handoff_id = _approval(slack)
    _, body = _captured_click(slack, handoff_id)
    wait_quiet(store_redis, slack)
    before, calls = snapshot(store_redis), len(slack.standin.calls())

    for forgery, options in FORGERIES.items():
        response = slack.standin.send_signed(body, content_type=FORM, **options(body))
        assert response.status == 401, forgery
        assert response.json() == {"error": "invalid request"}, forgery

    time.sleep(0.2)  # anything the requests set off would show by now
    assert_identical(before, snapshot(store_redis))
    assert len(slack.standin.calls()) == calls
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_a_replayed_click_over_http_gets_401_and_changes_nothing(
    slack: SlackEnv, store_redis: Redis
) -> None:
    handoff_id = _approval(slack)
    headers, body = _captured_click(slack, handoff_id)

    first = _send_raw(slack, body, headers)
    assert first.status == 200
    assert slack.handoffs.get(handoff_id).status is Status.APPROVED
    wait_quiet(store_redis, slack)
    before, calls = snapshot(store_redis), len(slack.standin.calls())

    replay = _send_raw(slack, body, headers)

    assert replay.status == 401
    time.sleep(0.2)
    assert_identical(before, snapshot(store_redis))
    assert len(slack.standin.calls()) == calls  # not even an "already approved" reply


def test_a_replay_with_a_made_up_retry_header_is_still_refused(
    slack: SlackEnv, store_redis: Redis
) -> None:
    """Retry headers are not signed: on an interaction they must not open a second use."""
    handoff_id = _approval(slack)
    headers, body = _captured_click(slack, handoff_id, user=CAROL)
    assert _send_raw(slack, body, headers).status == 200
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    replay = _send_raw(slack, body, headers, **{"X-Slack-Retry-Num": "1"})

    assert replay.status == 401
    assert_identical(before, snapshot(store_redis))


def test_slack_retries_of_a_thread_reply_are_accepted_and_answer_once(
    slack: SlackEnv, store_redis: Redis
) -> None:
    question = slack.region_question(run_id="run-retry", reviewers=[ALICE])
    message = slack.posted(question.id)
    _, first = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)
    assert first.status == 200
    assert slack.handoffs.get(question.id).status is Status.ANSWERED

    def same_signature(retry_num: str) -> Response:
        """The first delivery's exact body and signature, sent again as Slack's retry."""
        return slack.standin.send_signed(
            first.request_body,
            content_type=JSON,
            timestamp=int(first.request_headers[TS]),
            signature=first.request_headers[SIG],
            headers={"X-Slack-Retry-Num": retry_num, "X-Slack-Retry-Reason": "http_error"},
        )

    # Slack's retry: the same body, re-signed now, with X-Slack-Retry-Num.
    retried = slack.standin.resend_event(first, retry_num=1)
    # A retry sent within the same second carries the very same signature: still a retry.
    same_second = same_signature("2")

    assert (retried.status, same_second.status) == (200, 200)
    events = [e.event for e in slack.handoffs.audit(question.id)]
    assert events.count("decided") == 1
    # ...but the exact same retry request twice is a replay.
    assert same_signature("2").status == 401


# -- the whole matrix, in process -------------------------------------------------------------


def _bodies(slack: SlackEnv) -> tuple[str, dict[str, tuple[bytes, str]]]:
    """An approval's id, and a real request of every kind that would change state if it
    got through (approve it, submit a modal for it, answer a question, cancel it)."""
    handoff_id = _approval(slack)
    question = slack.handoffs.ask(run_id="run-q", thread_id="t", question="?", reviewers=[ALICE])
    asked = slack.posted(question.id)
    click = payload_of(_captured_click(slack, handoff_id)[1])
    submission = {
        "type": "view_submission",
        "user": {"id": ALICE},
        "view": {
            "id": "V0FORGED",
            "type": "modal",
            "callback_id": ids.REJECT_MODAL,
            "private_metadata": json.dumps({"handoff_id": handoff_id}),
            "state": {"values": {}},
        },
    }
    with capturing(slack.standin) as captured:
        slack.standin.post_message(ALICE, CHANNEL, "answer", thread_ts=asked.ts)
        slack.standin.send_command(ADMIN, "/handoff", f"cancel {handoff_id}")
    (_, event), (_, command) = captured
    return handoff_id, {
        "click": (interaction_body(click), FORM),
        "modal submission": (interaction_body(submission), FORM),
        "thread reply event": (event, JSON),
        "admin command": (command, FORM),
    }


def _forged_headers(body: bytes) -> dict[str, dict[str, str]]:
    now = int(time.time())
    good = sign(SIGNING_SECRET, str(now), body)
    return {
        "random signature": {TS: str(now), SIG: "v0=" + "0" * 64},
        "wrong secret": {TS: str(now), SIG: sign("wrong", str(now), body)},
        "other body's signature": {TS: str(now), SIG: sign(SIGNING_SECRET, str(now), b"x")},
        "other version": {TS: str(now), SIG: "v1=" + good.removeprefix("v0=")},
        "truncated signature": {TS: str(now), SIG: good[:-2]},
        "upper-case hex": {TS: str(now), SIG: "v0=" + good.removeprefix("v0=").upper()},
        "empty signature": {TS: str(now), SIG: ""},
        "no signature": {TS: str(now)},
        "no timestamp": {SIG: good},
        "no headers": {},
        "timestamp not a number": {TS: "now", SIG: sign(SIGNING_SECRET, "now", body)},
        "timestamp with spaces": {TS: f" {now}", SIG: sign(SIGNING_SECRET, f" {now}", body)},
        "timestamp just over 5 min old": signed_headers(body, timestamp=now - MAX_AGE_SECONDS - 2),
        "timestamp a day old": signed_headers(body, timestamp=now - 86400),
        "timestamp just over 5 min ahead": signed_headers(
            body, timestamp=now + MAX_AGE_SECONDS + 2
        ),
        "timestamp zero": signed_headers(body, timestamp=0),
        "signature of another timestamp": {TS: str(now), SIG: sign(SIGNING_SECRET, "1", body)},
    }


def test_every_forgery_on_every_surface_gets_401_and_changes_nothing(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    handoff_id, bodies = _bodies(slack)
    wait_quiet(store_redis, slack)
    before, calls = snapshot(store_redis), len(slack.standin.calls())
    refused = 0
    for surface, (body, content_type) in bodies.items():
        for forgery, headers in _forged_headers(body).items():
            answer = bot.post(body, content_type=content_type, headers=headers, sign=False)
            assert answer.status == 401, f"{surface} with {forgery}: {answer}"
            assert json.loads(answer.body) == {"error": "invalid request"}
            refused += 1
    assert refused == len(bodies) * 17
    time.sleep(0.2)
    assert_identical(before, snapshot(store_redis))
    assert len(slack.standin.calls()) == calls

    # The same bodies, properly signed, do get through (so the refusals above were the
    # signatures' doing): the cancel command, for one, cancels.
    body, content_type = bodies["admin command"]
    assert bot.post(body, content_type=content_type).status == 200
    assert slack.handoffs.get(handoff_id).status is Status.CANCELLED


def test_every_surface_refuses_a_replay_in_process(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    _, bodies = _bodies(slack)
    for surface, (body, content_type) in bodies.items():
        headers = signed_headers(body)
        first = bot.post(body, content_type=content_type, headers=headers, sign=False)
        assert first.status == 200, f"{surface}: {first}"
        wait_quiet(store_redis, slack)
        before, calls = snapshot(store_redis), len(slack.standin.calls())
        replay = bot.post(body, content_type=content_type, headers=headers, sign=False)
        assert replay.status == 401, f"{surface} replayed: {replay}"
        assert_identical(before, snapshot(store_redis))
        assert len(slack.standin.calls()) == calls


def test_a_request_signed_just_inside_the_window_is_accepted(bot: InProcessBot) -> None:
    body = b"command=%2Fhandoff&text=help&user_id=U0CAROL&channel_id=C0APPROVALS"
    for age in (MAX_AGE_SECONDS - 5, -(MAX_AGE_SECONDS - 5)):
        headers = signed_headers(body, timestamp=int(time.time()) - age)
        assert bot.post(body, headers=headers, sign=False).status == 200


def test_an_unsigned_ssl_check_ping_gets_200_and_nothing_more(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    """Slack's certificate ping for slash commands is answered as Bolt answers it, signed or
    not; anything more in the body makes it an ordinary request, which must be signed."""
    wait_quiet(store_redis, slack)
    before, calls = snapshot(store_redis), len(slack.standin.calls())
    assert bot.post(b"ssl_check=1&token=abc", sign=False) == Answer(200, b"")
    sneaked = b"ssl_check=1&command=%2Fhandoff&user_id=U0ADMIN&text=stats"
    assert bot.post(sneaked, sign=False).status == 401
    assert_identical(before, snapshot(store_redis))
    assert len(slack.standin.calls()) == calls
