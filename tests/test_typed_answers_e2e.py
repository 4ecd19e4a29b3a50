"""Typed answers through Slack (the stand-in, a real `handoff serve` and worker): the Answer
form has one input per field of the question's ``answer_schema``, what the person enters
reaches the agent typed in ``resume_data.answer_data``, bad input is refused on its own input
with nothing decided, and a reply in the thread answers only a single text field; any other
schema gets the person a private note with a button that opens the form."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.blockkit import ids
from bot.blockkit.ids import VALUE, answer_field_block_id
from bot.standin import StandInError
from store.models import Handoff, Status
from tests.support import slack_env
from tests.support.slack_env import ALICE, BOB, CHANNEL, SlackEnv, wait_for

REFUND: dict[str, Any] = {
    "type": "object",
    "required": ["amount", "reason", "note"],
    "properties": {
        "amount": {
            "type": "number",
            "minimum": 0,
            "maximum": 500,
            "title": "Amount (EUR)",
            "description": "What the customer gets back",
        },
        "items": {"type": "integer", "minimum": 1, "maximum": 10},
        "reason": {"enum": ["damaged", "late", "other"]},
        "note": {"type": "string", "minLength": 3, "maxLength": 20},
        "notify": {"type": "boolean", "title": "Tell the customer"},
        "gift": {"type": "boolean"},
        "ship_by": {"type": "string", "format": "date"},
    },
}
"""Every kind of field; its inputs are ``answer_field_0`` to ``answer_field_6`` in order."""
AMOUNT, ITEMS, REASON, NOTE, NOTIFY, GIFT, SHIP_BY = (answer_field_block_id(i) for i in range(7))


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    for env in slack_env.running_slack(redis, redis_url, tmp_path):
        env.standin.invite_bot(CHANNEL)  # Slack sends events only where the bot is a member
        yield env


def _ask(slack: SlackEnv, run_id: str, schema: dict[str, Any]) -> Handoff:
    return slack.handoffs.ask(
        run_id=run_id,
        thread_id="t",
        question="Refund order A-1001?",
        answer_schema=schema,
        reviewers=[ALICE],
        resume="tests.support.resume_targets:record",
    )


def _open_form(slack: SlackEnv, handoff: Handoff, user: str = ALICE):  # type: ignore[no-untyped-def]
    slack.standin.click(user, slack.posted(handoff.id), ids.ANSWER)
    return slack.standin.views(user)[-1]


def _entered(**by_block: Any) -> dict[str, dict[str, Any]]:
    return {block_id: {VALUE: value} for block_id, value in by_block.items()}


def _decisions(slack: SlackEnv, handoff_id: str) -> list[str]:
    return [e.event for e in slack.handoffs.audit(handoff_id) if e.event == "decided"]


def test_the_form_has_one_input_per_field_and_the_agent_gets_each_value_typed(
    slack: SlackEnv,
) -> None:
    handoff = _ask(slack, "run-typed-form", REFUND)
    form = _open_form(slack, handoff)

    inputs = [b for b in form.blocks if b["type"] == "input"]
    assert [(b["block_id"], b["element"]["type"]) for b in inputs] == [
        (AMOUNT, "number_input"),
        (ITEMS, "number_input"),
        (REASON, "static_select"),
        (NOTE, "plain_text_input"),
        (NOTIFY, "checkboxes"),
        (GIFT, "checkboxes"),
        (SHIP_BY, "datepicker"),
    ]
    answer = slack.standin.submit_view(
        ALICE,
        form,
        {
            AMOUNT: {VALUE: "12.5"},
            ITEMS: {VALUE: "3"},
            REASON: {VALUE: "1"},  # the option's value: its place in the enum
            NOTE: {VALUE: "  box was wet  "},
            NOTIFY: {VALUE: ["true"]},
            SHIP_BY: {VALUE: "2026-03-01"},
        },  # gift left unticked
    )

    assert answer.status == 200 and answer.text == ""  # the form closes
    resumed = slack.resumed(handoff.id)
    data = resumed["resume_data"]["answer_data"]
    assert data == {
        "amount": 12.5,
        "items": 3,
        "reason": "late",
        "note": "box was wet",
        "notify": True,
        "gift": False,
        "ship_by": "2026-03-01",
    }
    assert isinstance(data["items"], int) and data["notify"] is True and data["gift"] is False
    assert resumed["status"] == "answered"
    assert resumed["resume_data"]["via"] == "slack_modal"
    assert resumed["resume_data"]["answer"].splitlines()[:2] == ["Amount (EUR): 12.5", "items: 3"]
    decided = wait_for(
        lambda: (m := slack.posted(handoff.id)) and "Answered" in str(m.blocks) and m
    )
    assert "Amount (EUR): 12.5" in json.dumps(decided.blocks)


def test_a_whole_number_in_a_number_field_stays_whole_and_optional_fields_may_stay_empty(
    slack: SlackEnv,
) -> None:
    handoff = _ask(slack, "run-typed-minimal", REFUND)
    form = _open_form(slack, handoff)

    slack.standin.submit_view(ALICE, form, _entered(**{AMOUNT: "30", REASON: "0", NOTE: "wet box"}))

    data = slack.resumed(handoff.id)["resume_data"]["answer_data"]
    assert data == {
        "amount": 30,
        "reason": "damaged",
        "note": "wet box",
        "notify": False,
        "gift": False,
    }
    assert isinstance(data["amount"], int)


def test_bad_input_is_refused_on_its_own_input_and_decides_nothing(slack: SlackEnv) -> None:
    handoff = _ask(slack, "run-typed-errors", REFUND)
    form = _open_form(slack, handoff)
    valid = {AMOUNT: "30", REASON: "0", NOTE: "wet box"}

    # Slack's client counts the spaces; the agent would not get them.
    too_short = slack.standin.submit_view(ALICE, form, _entered(**{**valid, NOTE: "  ab  "}))
    assert too_short.json() == {
        "response_action": "errors",
        "errors": {NOTE: "Enter at least 3 characters (spaces around the text do not count)."},
    }
    blank = slack.standin.submit_view(ALICE, form, _entered(**{**valid, NOTE: "    "}))
    assert blank.json()["errors"] == {NOTE: "This field is required."}
    # Slack's client refuses a number past its bounds before sending anything...
    with pytest.raises(StandInError, match="max_value"):
        slack.standin.submit_view(ALICE, form, _entered(**{**valid, AMOUNT: "900"}))
    # ...and the bot does not rely on it: a submission that no client checked.
    unchecked = {
        **_entered(**valid),
        AMOUNT: {VALUE: {"value": "900"}},
        ITEMS: {VALUE: {"value": "2.5"}},
    }
    out_of_range = slack.standin.submit_view(ALICE, form, unchecked)
    assert out_of_range.json()["errors"] == {
        AMOUNT: "Enter a number of at most 500.",
        ITEMS: "Enter a whole number, e.g. 42.",
    }
    forged = {**_entered(**valid), REASON: {VALUE: {"selected_option": {"value": "7"}}}}
    assert slack.standin.submit_view(ALICE, form, forged).json()["errors"] == {
        REASON: "Pick one of the choices offered."
    }

    shown = slack.standin.view(form.id)
    assert not shown.closed and shown.errors == {REASON: "Pick one of the choices offered."}
    assert slack.handoffs.get(handoff.id).status is Status.PENDING
    assert _decisions(slack, handoff.id) == []

    slack.standin.submit_view(ALICE, form, _entered(**valid))
    assert slack.resumed(handoff.id)["resume_data"]["answer_data"]["note"] == "wet box"


def test_a_thread_reply_answers_a_question_of_one_text_field(slack: SlackEnv) -> None:
    schema = {
        "type": "object",
        "required": ["why"],
        "properties": {"why": {"type": "string", "maxLength": 40}},
    }
    handoff = _ask(slack, "run-typed-thread", schema)
    message = slack.posted(handoff.id)
    assert "Answer with the form or a reply in this thread" in json.dumps(message.blocks)

    slack.standin.post_message(ALICE, CHANNEL, "the box was wet", thread_ts=message.ts)

    resumed = slack.resumed(handoff.id)
    assert resumed["resume_data"]["answer_data"] == {"why": "the box was wet"}
    assert resumed["resume_data"]["answer"] == "the box was wet"
    assert resumed["resume_data"]["via"] == "slack_thread"


def test_a_thread_reply_to_a_form_question_decides_nothing_and_offers_the_form(
    slack: SlackEnv,
) -> None:
    handoff = _ask(slack, "run-typed-thread-form", REFUND)
    message = slack.posted(handoff.id)
    assert "Answer with the form: 7 fields" in json.dumps(message.blocks)

    _, response = slack.standin.post_message(ALICE, CHANNEL, "30 euros, late", thread_ts=message.ts)

    assert response is not None and response.status == 200
    [told] = wait_for(lambda: slack.standin.ephemerals(ALICE))
    assert told.thread_ts == message.ts
    assert (
        "asks for 7 fields (Amount (EUR), items, reason, note, Tell the customer and 2 more)"
        in told.text
    )
    assert "nothing was recorded" in told.text
    [button] = [e for b in told.blocks if b["type"] == "actions" for e in b["elements"]]
    assert (button["action_id"], button["value"]) == (ids.ANSWER, handoff.id)
    assert slack.handoffs.get(handoff.id).status is Status.PENDING
    assert _decisions(slack, handoff.id) == []

    # Someone who may not answer is told so, with no button.
    slack.standin.post_message(BOB, CHANNEL, "30", thread_ts=message.ts)
    [refused] = wait_for(lambda: slack.standin.ephemerals(BOB))
    assert refused.text.startswith("Only") and not refused.blocks

    # The button opens the form, as the message's does, and the form decides.
    slack.standin.click(ALICE, told, ids.ANSWER)
    form = slack.standin.views(ALICE)[-1]
    assert form.callback_id == ids.ANSWER_MODAL
    slack.standin.submit_view(ALICE, form, _entered(**{AMOUNT: "30", REASON: "1", NOTE: "late"}))
    resumed = slack.resumed(handoff.id)
    assert resumed["resume_data"]["answer_data"]["reason"] == "late"
    assert _decisions(slack, handoff.id) == ["decided"]
