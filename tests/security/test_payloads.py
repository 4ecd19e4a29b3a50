"""Oversized and malformed requests, properly signed: never a 5xx, never a traceback, no change.

What Slack would never send (a body over the size limit, bytes that are not UTF-8, broken
JSON, a field of the wrong type) is refused by the request gate before Bolt with a 4xx and
a one-line reason. What is well formed but names nothing real (an unknown handoff, action or
modal, metadata that is garbage or too long) gets the listeners' polite refusal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.http.checks import MAX_BODY_BYTES
from handlers.decisions import NOT_FOUND
from handlers.modals import NOT_OPENED_FOR_YOU
from store.models import Status
from tests.support.security_harness import (
    FORM,
    JSON,
    InProcessBot,
    assert_identical,
    assert_unchanged,
    capturing,
    interaction_body,
    no_traceback,
    payload_of,
    signed_headers,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ALICE, CHANNEL, SlackEnv, wait_for


@pytest.fixture(scope="module")
def approval(slack: SlackEnv) -> str:
    return slack.refund_approval(reviewers=[ALICE])


@pytest.fixture(scope="module")
def click(slack: SlackEnv, approval: str) -> dict[str, Any]:
    """Alice's real Approve click on the approval (captured, not delivered)."""
    with capturing(slack.standin) as captured:
        slack.standin.click(ALICE, slack.posted(approval), block_ids.APPROVE)
    return payload_of(captured[0][1])  # type: ignore[no-any-return]


def _with(click: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> bytes:
    payload = json.loads(json.dumps(click))
    change(payload)
    return interaction_body(payload)


def _submission(**view: Any) -> bytes:
    return interaction_body(
        {"type": "view_submission", "user": {"id": ALICE}, "view": {"type": "modal", **view}}
    )


def _event(event: Any, **envelope: Any) -> bytes:
    return json.dumps(
        {"type": "event_callback", "event_id": "Ev0MALFORMED", "event": event, **envelope}
    ).encode()


# name -> (body, content type, expected status)
REFUSED_BY_THE_GATE: dict[str, Callable[[dict[str, Any]], tuple[bytes, str, int]]] = {
    "a body over the limit": lambda c: (b"payload=" + b"x" * MAX_BODY_BYTES, FORM, 413),
    "bytes that are not UTF-8": lambda c: (b"payload=\xff\xfe\xfd", FORM, 400),
    "UTF-8 cut in the middle": lambda c: ("payload=é".encode()[:-1], FORM, 400),
    "invalid JSON in payload=": lambda c: (b"payload=%7B%22type%22%3A", FORM, 400),
    "an empty payload=": lambda c: (b"payload=", FORM, 400),
    "a JSON list": lambda c: (b"[1, 2, 3]", JSON, 400),
    "a JSON string": lambda c: (b'"block_actions"', JSON, 400),
    "JSON null": lambda c: (b"null", JSON, 400),
    "nesting 100,000 deep": lambda c: (b"payload=" + b"%5B" * 100_000, FORM, 400),
    "a number of 5,000 digits": lambda c: (b'{"type": ' + b"9" * 5000 + b"}", JSON, 400),
    "block_actions without user": lambda c: (_with(c, lambda p: p.pop("user")), FORM, 400),
    "user as a number": lambda c: (_with(c, lambda p: p.update(user=5)), FORM, 400),
    "user without id": lambda c: (_with(c, lambda p: p["user"].pop("id")), FORM, 400),
    "user id as a list": lambda c: (_with(c, lambda p: p["user"].update(id=[ALICE])), FORM, 400),
    "no actions": lambda c: (_with(c, lambda p: p.pop("actions")), FORM, 400),
    "empty actions": lambda c: (_with(c, lambda p: p.update(actions=[])), FORM, 400),
    "actions as an object": lambda c: (_with(c, lambda p: p.update(actions={})), FORM, 400),
    "an action that is a string": lambda c: (
        _with(c, lambda p: p.update(actions=["x"])),
        FORM,
        400,
    ),
    "action_id as a number": lambda c: (
        _with(c, lambda p: p["actions"][0].update(action_id=1)),
        FORM,
        400,
    ),
    "value as an object": lambda c: (
        _with(c, lambda p: p["actions"][0].update(value={"id": "ho_x"})),
        FORM,
        400,
    ),
    "container as a string": lambda c: (_with(c, lambda p: p.update(container="C1")), FORM, 400),
    "channel id as a number": lambda c: (
        _with(c, lambda p: p["container"].update(channel_id=7)),
        FORM,
        400,
    ),
    "response_url as a list": lambda c: (
        _with(c, lambda p: p.update(response_url=["x"])),
        FORM,
        400,
    ),
    # Slack sends response_urls only when a modal asks for them, as a list; Bolt takes its
    # len() (found by the fuzzer: null answered 500).
    "a submission whose response_urls is null": lambda c: (
        interaction_body(
            {
                "type": "view_submission",
                "user": {"id": ALICE},
                "view": {"type": "modal", "callback_id": block_ids.REJECT_MODAL},
                "response_urls": None,
            }
        ),
        FORM,
        400,
    ),
    # Found by the fuzzer: Bolt logs "multiple response urls" through a logger it has not
    # set yet (KeyError, 500).
    "a submission with two response_urls": lambda c: (
        interaction_body(
            {
                "type": "view_submission",
                "user": {"id": ALICE},
                "view": {"type": "modal", "callback_id": block_ids.REJECT_MODAL},
                "response_urls": [{}, {}],
            }
        ),
        FORM,
        400,
    ),
    "authorizations of strings": lambda c: (
        _with(c, lambda p: p.update(authorizations=["x"])),
        FORM,
        400,
    ),
    "a submission without view": lambda c: (
        interaction_body({"type": "view_submission", "user": {"id": ALICE}}),
        FORM,
        400,
    ),
    "a view without callback_id": lambda c: (_submission(private_metadata="{}"), FORM, 400),
    "a view without type": lambda c: (
        interaction_body(
            {"type": "view_submission", "user": {"id": ALICE}, "view": {"callback_id": "x"}}
        ),
        FORM,
        400,
    ),
    "private_metadata as an object": lambda c: (
        _submission(callback_id=block_ids.REJECT_MODAL, private_metadata={"handoff_id": "x"}),
        FORM,
        400,
    ),
    "state values as a list": lambda c: (
        _submission(callback_id=block_ids.REJECT_MODAL, state={"values": []}),
        FORM,
        400,
    ),
    "an input's value as a number": lambda c: (
        _submission(
            callback_id=block_ids.REJECT_MODAL,
            state={"values": {block_ids.REASON_BLOCK: {block_ids.VALUE: {"value": 3}}}},
        ),
        FORM,
        400,
    ),
    "selected option as a string": lambda c: (
        _submission(
            callback_id=block_ids.ANSWER_MODAL,
            state={"values": {block_ids.CHOICE_BLOCK: {block_ids.VALUE: {"selected_option": "0"}}}},
        ),
        FORM,
        400,
    ),
    "an event envelope without event": lambda c: (
        json.dumps({"type": "event_callback", "event_id": "Ev1"}).encode(),
        JSON,
        400,
    ),
    "event null": lambda c: (b'{"event": null}', JSON, 400),
    "an event without type": lambda c: (_event({"text": "hi"}), JSON, 400),
    "a message event with text as a number": lambda c: (
        _event({"type": "message", "text": 5, "channel": CHANNEL, "user": ALICE}),
        JSON,
        400,
    ),
    "a thread reply with thread_ts as a list": lambda c: (
        _event({"type": "message", "text": "x", "thread_ts": ["1"], "channel": CHANNEL}),
        JSON,
        400,
    ),
    "app_home_opened without user": lambda c: (_event({"type": "app_home_opened"}), JSON, 400),
    "an event without event_id": lambda c: (
        json.dumps({"type": "event_callback", "event": {"type": "message"}}).encode(),
        JSON,
        400,
    ),
    "a command without user_id": lambda c: (
        urlencode({"command": "/handoff", "text": "help"}).encode(),
        FORM,
        400,
    ),
}


def _answered(click: dict[str, Any], approval: str) -> dict[str, tuple[bytes, str, int]]:
    """Well-formed requests that name nothing real: each gets a refusal, never an error."""
    return {
        "an unknown action id": (
            _with(click, lambda p: p["actions"][0].update(action_id="handoff_nuke")),
            FORM,
            404,
        ),
        "an unknown handoff id": (
            _with(click, lambda p: p["actions"][0].update(value="ho_01ZZZZZZZZZZZZZZZZZZZZZZZZ")),
            FORM,
            200,
        ),
        "an empty handoff id": (
            _with(click, lambda p: p["actions"][0].update(value="")),
            FORM,
            200,
        ),
        "a 2,000-character handoff id": (
            _with(click, lambda p: p["actions"][0].update(value="h" * 2000)),
            FORM,
            200,
        ),
        "garbage private_metadata": (
            _submission(callback_id=block_ids.REJECT_MODAL, private_metadata="{{{ not json"),
            FORM,
            200,
        ),
        "a refused submission whose blocks and state are null": (
            _submission(
                callback_id=block_ids.REJECT_MODAL,
                private_metadata=json.dumps({"handoff_id": approval}),
                blocks=None,
                state=None,
            ),
            FORM,
            200,
        ),
        "private_metadata over Slack's 3,000 characters": (
            _submission(
                callback_id=block_ids.REJECT_MODAL,
                private_metadata=json.dumps({"handoff_id": approval, "pad": "x" * 5000}),
            ),
            FORM,
            200,
        ),
        "private_metadata naming no handoff": (
            _submission(callback_id=block_ids.CORRECT_MODAL, private_metadata="[1, 2]"),
            FORM,
            200,
        ),
        "draft parts that are not the modal's": (
            _submission(
                callback_id=block_ids.CORRECT_MODAL,
                private_metadata=json.dumps({"handoff_id": approval}),
                state={
                    "values": {
                        f"{block_ids.DRAFT_BLOCK_PREFIX}x": {block_ids.VALUE: {"value": "a"}},
                        f"{block_ids.DRAFT_BLOCK_PREFIX}1": {"other": {"value": "b"}},
                    }
                },
            ),
            FORM,
            200,
        ),
        "an unknown modal": (_submission(callback_id="handoff_nuke_modal"), FORM, 404),
        "a thread reply in no handoff's thread": (
            _event(
                {
                    "type": "message",
                    "text": "hi",
                    "user": ALICE,
                    "channel": CHANNEL,
                    "ts": "1700000000.000300",
                    "thread_ts": "1700000000.000200",
                }
            ),
            JSON,
            200,
        ),
        "an unknown command": (
            urlencode({"command": "/nuke", "user_id": ALICE, "text": ""}).encode(),
            FORM,
            404,
        ),
        "a command with unknown words": (
            urlencode(
                {"command": "/handoff", "user_id": ALICE, "text": "cancel everything"}
            ).encode(),
            FORM,
            200,
        ),
    }


def test_malformed_requests_are_refused_before_bolt_and_change_nothing(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis, click: dict[str, Any]
) -> None:
    wait_quiet(store_redis, slack)
    before, calls = snapshot(store_redis), len(slack.standin.calls())
    for name, make in REFUSED_BY_THE_GATE.items():
        body, content_type, expected = make(click)
        answer = bot.post(body, content_type=content_type)
        assert answer.status == expected, f"{name}: {answer}"
        assert no_traceback(answer.text), name
        assert set(json.loads(answer.body)) == {"error"}, name
    assert_identical(before, snapshot(store_redis))  # not even a replay marker
    assert len(slack.standin.calls()) == calls


def test_requests_naming_nothing_real_get_a_refusal_and_change_nothing(
    slack: SlackEnv,
    bot: InProcessBot,
    store_redis: Redis,
    click: dict[str, Any],
    approval: str,
) -> None:
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)
    for name, (body, content_type, expected) in _answered(click, approval).items():
        answer = bot.post(body, content_type=content_type)
        assert answer.status == expected, f"{name}: {answer}"
        assert no_traceback(answer.text), name
    assert slack.standin.ephemerals(ALICE)[-1].text == NOT_FOUND
    assert slack.handoffs.get(approval).status is Status.PENDING
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_a_modal_refusal_names_the_reason_under_its_input(bot: InProcessBot) -> None:
    answer = bot.post(
        _submission(
            callback_id=block_ids.REJECT_MODAL,
            private_metadata="x" * 3001,
            blocks=[{"type": "input", "block_id": block_ids.REASON_BLOCK}],
        )
    )
    assert json.loads(answer.body) == {
        "response_action": "errors",
        "errors": {block_ids.REASON_BLOCK: NOT_OPENED_FOR_YOU},
    }


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"payload=" + b"x" * MAX_BODY_BYTES, 413),
        (b"payload=\xff\xfe", 400),
        (b"payload=%7Bnot-json", 400),
        (b"payload=" + b"%5B" * 100_000, 400),
    ],
    ids=["oversized", "not UTF-8", "invalid JSON", "deep nesting"],
)
def test_over_http_malformed_bodies_get_a_4xx_without_a_traceback(
    slack: SlackEnv, body: bytes, status: int
) -> None:
    headers = signed_headers(body)
    response = slack.standin.send_signed(
        body,
        content_type=FORM,
        timestamp=int(headers["X-Slack-Request-Timestamp"]),
        signature=headers["X-Slack-Signature"],
    )
    assert response.status == status
    assert no_traceback(response.text)
    assert set(response.json()) == {"error"}
    # The server is still up and well.
    assert slack.standin.send_command(ALICE, "/handoff", "help").status == 200


def test_a_command_whose_text_says_payload_is_still_a_command(slack: SlackEnv) -> None:
    """Bolt's parser took any form body containing "payload" for an interaction (an empty
    body, answered 404); the gate parses a form as an interaction only with that field."""
    reply = slack.command(ALICE, "show payload")
    assert "`payload` is not a handoff id" in reply.text + json.dumps(reply.blocks)


HALF_EMOJI = "\ud83d"
"""Half of a UTF-16 pair: what a client that cuts a string mid-emoji sends (JSON "\\ud83d")."""


def test_half_an_emoji_in_a_thread_answer_is_stored_as_a_replacement_character(
    slack: SlackEnv,
) -> None:
    question = slack.region_question(run_id="run-half-emoji", reviewers=[ALICE])
    message = slack.posted(question.id)

    _, response = slack.standin.post_message(
        ALICE, message.channel, f"eu-west {HALF_EMOJI}", thread_ts=message.ts
    )

    assert response.status == 200
    decided = wait_for(lambda: (h := slack.handoffs.get(question.id)).resume_data and h)
    assert decided.resume_data.answer == "eu-west \ufffd"


def test_half_an_emoji_in_a_reject_reason_is_stored_as_a_replacement_character(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE], run_id="run-half-emoji-2")
    slack.standin.click(ALICE, slack.posted(handoff_id), block_ids.REJECT)
    modal = wait_for(lambda: [v for v in slack.standin.views(ALICE) if not v.closed][-1:])[0]
    [block] = [b for b in modal.blocks if b.get("type") == "input"][:1]
    values = {block["block_id"]: {block["element"]["action_id"]: f"too much {HALF_EMOJI}"}}

    assert slack.standin.submit_view(ALICE, modal, values).status == 200

    decided = slack.handoffs.get(handoff_id)
    assert decided.status is Status.REJECTED
    assert decided.resume_data is not None and decided.resume_data.comment == "too much \ufffd"
