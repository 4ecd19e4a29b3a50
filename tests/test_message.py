"""A handoff's channel message (bot.blockkit.message): it fits Slack's limits, agent text
cannot ping anyone, long payloads stay reachable, and each state shows the right buttons and
says who decided what."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given

from bot.blockkit.ids import (
    ANSWER,
    APPROVE,
    CLAIM,
    CORRECT,
    EDIT,
    REJECT,
    RESOLVE,
    VIEW_FULL,
)
from bot.blockkit.message import (
    already_decided_text,
    outcome_text,
    render_form_needed,
    render_message,
)
from bot.standin.blockkit import MAX_MESSAGE_BLOCKS, check_blocks
from store.canonical import action_digest
from store.models import Handoff, Status
from tests.support.blockkit import (
    CREATED,
    HANDOFF_ID,
    INJECTED_PAYLOADS,
    INJECTION_TEXT,
    INJECTIONS,
    PROPERTY,
    action_ids,
    approval,
    assert_message_within_limits,
    assert_no_raw_injection,
    blocks_text,
    button,
    correction,
    decision,
    escalation,
    handoffs_in_any_state,
    make_handoff,
    question,
)
from worker.client import Handoffs


@PROPERTY
@given(handoff=handoffs_in_any_state())
def test_every_message_passes_slack_validation_and_our_limits(handoff: Handoff) -> None:
    assert_message_within_limits(render_message(handoff, now=CREATED))


@pytest.mark.parametrize("lines", [1500, 2500])
def test_context_of_many_short_lines_still_fits_a_section(lines: int) -> None:
    # Quoting adds a ">" to every line, after the text was shortened to fit.
    handoff = make_handoff(correction("x\n" * lines), context="\n" * lines)

    assert_message_within_limits(render_message(handoff))


@pytest.mark.parametrize("where", list(INJECTED_PAYLOADS))
def test_mentions_and_links_in_agent_text_render_escaped_in_the_message(where: str) -> None:
    payload, fields = INJECTED_PAYLOADS[where]

    message = render_message(make_handoff(payload, **fields))

    assert_no_raw_injection(message.blocks)


def test_reasons_and_answers_in_the_outcome_render_escaped() -> None:
    handoff = make_handoff(
        question("Which?"),
        status=Status.ANSWERED,
        resume_data=decision(Status.ANSWERED, answer=INJECTION_TEXT, comment=INJECTION_TEXT),
    )

    assert_no_raw_injection(render_message(handoff).blocks)


def test_an_action_name_cannot_inject_into_the_approve_confirmation() -> None:
    # The confirm dialog's texts are plain_text: Slack parses no mention or link there.
    handoff = make_handoff(approval({"a": 1}, name=INJECTION_TEXT))

    confirm = button(render_message(handoff).blocks, APPROVE)["confirm"]

    assert {confirm[key]["type"] for key in ("title", "text", "confirm", "deny")} == {"plain_text"}


def test_the_approve_confirmation_is_plain_text_within_slacks_limits() -> None:
    name = "refund & <credit> " + "x" * 182  # the longest name an action may have
    handoff = make_handoff(approval({"a": 1}, name=name))

    blocks = render_message(handoff).blocks
    confirm = button(blocks, APPROVE)["confirm"]

    # The Block Kit reference takes only plain_text for the dialog's text (slack_sdk's
    # ConfirmObject renders a plain string as mrkdwn); the stand-in refuses anything else.
    check_blocks(blocks, limit=MAX_MESSAGE_BLOCKS)
    assert confirm["text"]["type"] == "plain_text"
    assert confirm["text"]["text"] == f"The agent will run {name} with the arguments shown."


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        (approval({"a": 1}, name="<!channel> refund"), {}),
        (question("Which?"), {"agent_name": "<!channel> bot <@U123>"}),
    ],
)
def test_message_fallback_text_cannot_ping(payload: dict[str, Any], fields: dict[str, Any]) -> None:
    # chat.postMessage's `text` is what notifications show, and Slack parses mentions in it.
    message = render_message(make_handoff(payload, **fields))

    assert not any(raw in message.text for raw in INJECTIONS)


@pytest.mark.parametrize(
    ("payload", "context"),
    [
        (approval({"amount": 30}), "Customer was double charged. " * 100),
        (approval({"body": "x" * 1000}), ""),
        (approval({f"arg_{i}": i for i in range(15)}), ""),
        (approval({"items": list(range(500))}), ""),
        (question("Which? " * 600), ""),
        (correction("Dear customer " * 300), ""),
        (escalation("Details. " * 400), ""),
        # The message lists ten choices, each cut at 150 characters (75 in the answer modal).
        (question("Which?", [f"option {i}" for i in range(15)]), ""),
        (question("Which?", ["short", "a long choice " * 20]), ""),
    ],
    ids=[
        "long context",
        "long arg",
        "many args",
        "long list arg",
        "question",
        "draft",
        "summary",
        "many choices",
        "long choice",
    ],
)
def test_a_shortened_message_offers_view_full(payload: dict[str, Any], context: str) -> None:
    for handoff in (
        make_handoff(payload, context=context),
        make_handoff(
            payload,
            context=context,
            status=Status.REJECTED,
            resume_data=decision(Status.REJECTED, comment="no"),
        ),
    ):
        blocks = render_message(handoff).blocks

        assert button(blocks, VIEW_FULL)["value"] == HANDOFF_ID


@pytest.mark.parametrize(
    "payload",
    [
        approval({"amount": 30, "currency": "EUR"}),
        approval({f"arg_{i}": i for i in range(10)}),
        question("Which plan?", ["basic", "pro"]),
        correction("Dear customer,", "be polite"),
        escalation(),
    ],
)
def test_a_short_message_has_no_view_full_button(payload: dict[str, Any]) -> None:
    blocks = render_message(make_handoff(payload, context="Customer was double charged")).blocks

    assert VIEW_FULL not in action_ids(blocks)


def test_a_pending_approval_has_approve_with_a_confirm_dialog_reject_and_edit(
    handoffs: Handoffs,
) -> None:
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", args={"amount": 30}
    )

    blocks = render_message(handoff).blocks

    assert action_ids(blocks) == [APPROVE, REJECT, EDIT]
    approve = button(blocks, APPROVE)
    # The handoff, and the arguments the message shows (a click is of those).
    shown = f"{handoff.id}@{action_digest('issue_refund', {'amount': 30})}"
    assert approve["value"] == shown
    assert approve["confirm"]["confirm"]["text"] == "Approve"
    assert "issue_refund" in approve["confirm"]["text"]["text"]
    assert all(button(blocks, a)["value"] == shown for a in (REJECT, EDIT))


def test_a_pending_question_has_an_answer_button(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="run-1", thread_id="t-1", question="Which plan?")

    blocks = render_message(handoff).blocks

    assert action_ids(blocks) == [ANSWER]
    assert button(blocks, ANSWER)["value"] == handoff.id


def test_a_pending_correction_has_correct_and_reject_buttons(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Dear customer")

    assert action_ids(render_message(handoff).blocks) == [CORRECT, REJECT]


def test_an_escalation_is_claimed_first_then_resolved_or_sent_back(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(run_id="run-1", thread_id="t-1", summary="Legal threat")

    unclaimed = render_message(handoff).blocks
    claimed = render_message(handoffs.claim(handoff.id, by="U02")).blocks

    assert action_ids(unclaimed) == [CLAIM]
    assert "Claimed by" not in blocks_text(unclaimed)
    assert action_ids(claimed) == [RESOLVE, REJECT]
    assert "Claimed by <@U02>" in blocks_text(claimed)


def test_decided_messages_keep_only_the_view_full_button() -> None:
    long_context = "Long story. " * 300
    for payload in (approval({"a": 1}), question(), correction(), escalation()):
        for context in ("short", long_context):
            handoff = make_handoff(
                payload,
                context=context,
                status=Status.REJECTED,
                resume_data=decision(Status.REJECTED),
                claimed_by="U7",
            )

            assert set(action_ids(render_message(handoff).blocks)) <= {VIEW_FULL}


def test_a_rejection_shows_who_rejected_and_why(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Hi")
    decided = handoffs.decide(handoff.id, "rejected", by="U01", comment="Wrong customer")

    text = blocks_text(render_message(decided).blocks)

    assert "*Rejected* by <@U01>" in text
    assert "*Reason:* Wrong customer" in text


def test_an_answer_shows_who_answered_and_the_answer(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="run-1", thread_id="t-1", question="Which plan?")
    decided = handoffs.decide(handoff.id, "answered", by="U01", answer="The pro plan")

    text = outcome_text(decided)

    assert "*Answered* by <@U01>" in text
    assert "*Answer:* The pro plan" in text


def test_a_resolved_escalation_says_resolved_by_the_claimer(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(run_id="run-1", thread_id="t-1", summary="Legal threat")
    handoffs.claim(handoff.id, by="U02")
    decided = handoffs.decide(handoff.id, "answered", by="U02", answer="Called them back")

    blocks = render_message(decided).blocks

    assert "*Resolved* by <@U02>" in blocks_text(blocks)
    assert "Claimed by" not in blocks_text(blocks)
    assert action_ids(blocks) == []


def test_expired_and_cancelled_handoffs_say_so() -> None:
    expired = make_handoff(
        question(), status=Status.EXPIRED, resume_data=decision(Status.EXPIRED, by="system")
    )
    cancelled = make_handoff(
        question(),
        status=Status.CANCELLED,
        resume_data=decision(Status.CANCELLED, by="agent", comment="no longer needed"),
    )

    assert "*Expired*" in outcome_text(expired)
    assert "*Cancelled* by agent" in outcome_text(cancelled)
    assert "*Reason:* no longer needed" in outcome_text(cancelled)


@pytest.mark.parametrize(
    ("seconds", "ago"),
    [
        (2, "just now"),
        (30, "30 seconds ago"),
        (60, "1 minute ago"),
        (150, "2 minutes ago"),
        (7200, "2 hours ago"),
        (3 * 86400, "3 days ago"),
    ],
)
def test_a_late_reviewer_is_told_who_decided_and_when(seconds: int, ago: str) -> None:
    handoff = make_handoff(
        approval({"a": 1}), status=Status.APPROVED, resume_data=decision(Status.APPROVED)
    )
    assert handoff.decided_at is not None

    text = already_decided_text(handoff, now=handoff.decided_at + timedelta(seconds=seconds))

    assert text == f"Already approved by <@U01> {ago}."


def test_a_late_reviewer_of_an_expired_handoff_is_told_it_expired() -> None:
    handoff = make_handoff(
        question(), status=Status.EXPIRED, resume_data=decision(Status.EXPIRED, by="system")
    )
    assert handoff.decided_at is not None

    text = already_decided_text(handoff, now=handoff.decided_at + timedelta(minutes=2))

    assert text == "This request expired 2 minutes ago; nothing was changed."


def test_an_approval_shows_who_approved_and_with_which_edited_arguments(
    handoffs: Handoffs,
) -> None:
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", args={"amount": 30}
    )
    decided = handoffs.decide(handoff.id, "approved", by="U01", edited_args={"amount": 25})

    text = blocks_text(render_message(decided).blocks)

    assert "*Approved* by <@U01>" in text
    assert '*With edited arguments:* `{"amount": 25}`' in text
    assert render_message(decided).text.endswith("[approved]")


def test_a_correction_shows_the_corrected_draft(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Hi")
    decided = handoffs.decide(handoff.id, "approved", by="U1", corrected_draft="Hello there")

    assert "*Corrected draft:*\n>Hello there" in outcome_text(decided)


# -- typed answers ---------------------------------------------------------------------------


def typed_question(schema: dict[str, Any]) -> Handoff:
    return make_handoff({"kind": "question", "question": "Refund?", "answer_schema": schema})


def test_a_typed_question_says_which_fields_the_form_asks_for() -> None:
    schema = {
        "type": "object",
        "required": ["amount", "agree"],
        "properties": {
            "amount": {"type": "number", "minimum": 0, "title": "Amount <!channel>"},
            "reason": {"enum": ["damaged", "late", "other"]},
            "agree": {"type": "boolean"},
        },
    }
    message = render_message(typed_question(schema))

    assert (
        "*Answer with the form: 3 fields* (a reply in the thread cannot fill them in)\n"
        "• *Amount &lt;!channel&gt;*: a number of at least 0 · required\n"
        "• *reason*: one of 3 choices\n"
        "• *agree*: yes or no"
    ) in blocks_text(message.blocks)
    assert action_ids(message.blocks) == [ANSWER]
    assert_no_raw_injection(message.blocks)
    assert_message_within_limits(message)


def test_a_single_text_field_may_be_answered_in_the_thread() -> None:
    schema = {"type": "object", "properties": {"why": {"type": "string", "maxLength": 50}}}

    text = blocks_text(render_message(typed_question(schema)).blocks)

    assert "*Answer with the form or a reply in this thread*\n• *why*: text of up to 50" in text


def test_the_fields_of_the_largest_schema_are_listed_within_the_message_budget() -> None:
    properties = {
        f"{k:02d}" + "n" * 98: {"type": "string", "title": "Tom & Jerry <3 " * 13}
        for k in range(25)
    }
    handoff = typed_question({"type": "object", "properties": properties})

    message = render_message(handoff)

    assert "more" in blocks_text(message.blocks)
    assert VIEW_FULL in action_ids(message.blocks)  # the full list is one click away
    assert_message_within_limits(message)
    check_blocks(message.blocks, limit=MAX_MESSAGE_BLOCKS)


def test_a_thread_reply_that_cannot_answer_is_told_so_with_the_messages_answer_button() -> None:
    schema = {
        "type": "object",
        "properties": {f"field {k}": {"type": "boolean"} for k in range(7)},
    }
    handoff = typed_question(schema)

    reply = render_form_needed(handoff)

    assert reply.text == (
        "This question asks for 7 fields (field 0, field 1, field 2, field 3, field 4 and 2 "
        "more), which a reply in the thread cannot fill in, so nothing was recorded. Answer "
        "it with the form."
    )
    assert action_ids(reply.blocks) == [ANSWER]
    assert button(reply.blocks, ANSWER)["value"] == handoff.id
    check_blocks(reply.blocks, limit=MAX_MESSAGE_BLOCKS)
