"""Requests not signed by Slack, signed too long ago or in the future, or replayed, are
refused with 401 and change nothing; an event runs once however often it is delivered
(Slack's retries and replays of them are acknowledged and not run again), and while the
replay guard cannot reach Redis nothing runs at all.

A few cases go over real HTTP to `handoff serve`; the whole matrix of forgeries runs
against the same WSGI app in process, on every surface.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.app import create_app
from bot.blockkit import ids
from bot.http.checks import RequestGate
from bot.http.prefetch import clicked_handoff_read
from bot.http.replay import ReplayGuard
from bot.http.signing import MAX_AGE_SECONDS, sign
from bot.http.wsgi import make_wsgi_app
from bot.keys import BotKeys
from bot.standin import Response
from store.models import Status
from tests.support.redis_server import RedisServer
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
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, SIGNING_SECRET, SlackEnv

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
    # A retry sent within the same second carries the very same signature.
    same_second = same_signature("2")
    # The same again: a replay looks just like it, and the retry number is not signed.
    replayed = same_signature("2")

    # Each is acknowledged (so that Slack stops retrying) and none runs again.
    assert (retried.status, same_second.status, replayed.status) == (200, 200, 200)
    events = [e.event for e in slack.handoffs.audit(question.id)]
    assert events.count("decided") == 1


def test_an_app_home_opened_resent_with_retry_numbers_1_to_11_publishes_the_home_once(
    slack: SlackEnv, store_redis: Redis
) -> None:
    """The retry number is not signed: the same signed event sent with any of them, or
    re-signed as Slack's later retries are, is the same event, and runs once."""
    wait_quiet(store_redis, slack)
    published = len(_home_publishes(slack, BOB))
    first = slack.standin.send_app_home_opened(BOB)
    assert first.status == 200
    assert len(_home_publishes(slack, BOB)) == published + 1

    again = [
        slack.standin.send_signed(
            first.request_body,
            content_type=JSON,
            timestamp=int(first.request_headers[TS]),
            signature=first.request_headers[SIG],
            headers={"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_error"},
        )
        for retry_num in range(1, 12)
    ]
    again.append(slack.standin.resend_event(first, retry_num=3, reason="http_timeout"))

    time.sleep(0.2)  # anything the deliveries set off would show by now
    assert len(_home_publishes(slack, BOB)) == published + 1
    # Each acknowledged, so that Slack stops sending it.
    assert [answer.status for answer in again] == [200] * 12


def _home_publishes(slack: SlackEnv, user: str) -> list[Any]:
    return [c for c in slack.standin.calls("views.publish") if c.params.get("user_id") == user]


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
        # A replayed event looks like Slack's retry of it: acknowledged, so that Slack
        # stops sending it, and not run again. Anything else gets 401.
        expected = 200 if content_type == JSON else 401
        assert replay.status == expected, f"{surface} replayed: {replay}"
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


# -- while the replay guard cannot reach Redis ------------------------------------------------


class GuardOnItsOwnRedis(InProcessBot):
    """The in-process bot with its replay guard on ``guard_redis``, a Redis server the test
    kills and restarts; the store and the listeners stay on the shared one, so a request
    let through while the guard's Redis is down would run."""

    def __init__(self, slack: SlackEnv, guard_redis: Redis) -> None:
        super().__init__(slack)
        redis = self.settings.open_redis()
        store = self.settings.open_store(redis=redis)
        guard = ReplayGuard(guard_redis, BotKeys(store.keys))
        gate = RequestGate(SIGNING_SECRET, guard, read_for=clicked_handoff_read(store))
        self.app = make_wsgi_app(create_app(self.settings, redis=redis), redis, gate=gate)


def test_while_the_replay_guard_cannot_reach_redis_nothing_runs_and_retries_run_once_it_is_back(
    slack: SlackEnv, store_redis: Redis, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "guard-redis")
    server.start()
    # No retries of its own: a refused connection fails the check at once.
    guard_redis = Redis(port=server.port, socket_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        bot = GuardOnItsOwnRedis(slack, guard_redis)
        approval, to_cancel = _approval(slack), _approval(slack, run_id="run-to-cancel")
        question = slack.region_question(run_id="run-outage", reviewers=[ALICE])
        asked = slack.posted(question.id)
        _, click = _captured_click(slack, approval)
        with capturing(slack.standin) as captured:
            slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=asked.ts)
            slack.standin.send_command(ADMIN, "/handoff", f"cancel {to_cancel}")
        (_, event), (_, command) = captured
        sent = {
            "click": (click, FORM, signed_headers(click)),
            "command": (command, FORM, signed_headers(command)),
            "event": (event, JSON, signed_headers(event)),
        }

        def send(kind: str, **extra: str) -> Answer:
            body, content_type, headers = sent[kind]
            return bot.post(
                body, content_type=content_type, headers={**headers, **extra}, sign=False
            )

        wait_quiet(store_redis, slack)
        before, told = snapshot(store_redis), len(slack.standin.ephemerals(ALICE))
        server.kill()

        clicked, commanded, delivered = send("click"), send("command"), send("event")

        time.sleep(0.2)  # anything the requests set off would show by now
        for handoff_id in (approval, to_cancel, question.id):
            assert slack.handoffs.get(handoff_id).status is Status.PENDING
        assert_identical(before, snapshot(store_redis))  # nothing decided
        # Each is refused with a "try again" its kind allows: the click through its
        # response_url, the command in its answer, the event by a 503 Slack retries.
        assert clicked.status == 200, clicked
        assert any("try again" in e.text for e in slack.standin.ephemerals(ALICE)[told:])
        assert commanded.status == 200 and "try again" in json.loads(commanded.body)["text"]
        assert delivered.status == 503, delivered

        server.start()
        assert guard_redis.dbsize() == 0  # nothing recorded either

        # Slack's retry of the event (the same body, re-signed a minute later), and the same
        # click and command sent again: each runs now, once.
        retried = bot.post(event, content_type=JSON, headers={"X-Slack-Retry-Num": "1"})
        assert (send("click").status, send("command").status, retried.status) == (200, 200, 200)
        assert slack.handoffs.get(approval).status is Status.APPROVED
        assert slack.handoffs.get(to_cancel).status is Status.CANCELLED
        assert slack.handoffs.get(question.id).status is Status.ANSWERED
        assert send("click").status == 401
        assert send("event", **{"X-Slack-Retry-Num": "2"}).status == 200
        assert [e.event for e in slack.handoffs.audit(question.id)].count("decided") == 1
    finally:
        guard_redis.close()
        server.stop()
