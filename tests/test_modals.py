"""A handoff's modals (bot.blockkit.modals): each fits a modal, agent text cannot ping anyone,
every argument and the whole draft come back, and each keeps its handoff id."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from bot.blockkit.ids import (
    arg_block_id,
    handoff_id_from_view,
)
from bot.blockkit.modals import (
    render_answer_modal,
    render_correction_modal,
    render_edit_modal,
    render_full_content_modal,
    render_reject_modal,
    render_resolve_modal,
)
from handlers.modal_inputs import parse_corrected_draft
from store import defaults
from store.models import Handoff, RequestType
from tests.support.blockkit import (
    HANDOFF_ID,
    INJECTED_PAYLOADS,
    INJECTION_TEXT,
    INJECTIONS,
    MODAL_MAX_BYTES,
    PROPERTY,
    approval,
    assert_modal_within_limits,
    correction,
    dicts_in,
    escalation,
    full_content_sections,
    handoffs_in_any_state,
    input_values,
    make_handoff,
    pending_handoffs,
    question,
    store_payload_bytes,
    text_objects,
    view_bytes,
)
from worker.client import Handoffs


@PROPERTY
@given(handoff=handoffs_in_any_state())
def test_every_full_content_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_full_content_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs())
def test_every_reject_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_reject_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.APPROVAL,)))
def test_every_edit_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_edit_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.QUESTION,)))
def test_every_answer_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_answer_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.CORRECTION,)))
def test_every_correction_modal_fits_a_modal_and_gives_the_draft_back(handoff: Handoff) -> None:
    view = render_correction_modal(handoff)

    assert_modal_within_limits(view, handoff)
    assert parse_corrected_draft(input_values(view)) == handoff.payload.draft  # type: ignore[union-attr]


@PROPERTY
@given(handoff=pending_handoffs((RequestType.ESCALATION,)))
def test_every_resolve_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_resolve_modal(handoff), handoff)


def test_full_content_modal_of_a_nested_payload_the_store_accepts_stays_under_250_kb(
    handoffs: Handoffs,
) -> None:
    # About 60 KB as the store measures it; indented JSON in the modal is several times that.
    args = {"rows": [[[0] * 30_000]]}
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="bulk_update", args=args
    )

    view = render_full_content_modal(handoff)

    assert store_payload_bytes(handoff) <= defaults.MAX_PAYLOAD_BYTES
    assert view_bytes(view) < MODAL_MAX_BYTES


@pytest.mark.parametrize("where", ["context", "arg value", "description", "choice", "summary"])
def test_mentions_and_links_in_agent_text_render_escaped_in_the_full_content_modal(
    where: str,
) -> None:
    # The modal shows agent text as plain_text, which Slack never parses for mentions.
    payload, fields = INJECTED_PAYLOADS[where]

    view = render_full_content_modal(make_handoff(payload, **fields))

    for text in text_objects(view["blocks"], "mrkdwn"):
        assert not any(raw in text for raw in INJECTIONS)
    assert any("<!channel>" in text for text in text_objects(view["blocks"], "plain_text"))


@pytest.mark.parametrize(
    ("render", "payload"),
    [
        (render_answer_modal, question(INJECTION_TEXT)),
        (render_correction_modal, correction("Hi", INJECTION_TEXT)),
        (render_resolve_modal, escalation(INJECTION_TEXT)),
        (render_edit_modal, approval({"a": 1}, name=INJECTION_TEXT)),
        (render_reject_modal, approval({"a": 1}, name=INJECTION_TEXT)),
    ],
)
def test_mentions_and_links_in_agent_text_render_escaped_in_modals(
    render: Any, payload: dict[str, Any]
) -> None:
    view = render(make_handoff(payload))

    for text in text_objects(view["blocks"], "mrkdwn"):
        assert not any(raw in text for raw in INJECTIONS), text


def test_the_full_content_modal_shows_a_50_kb_context_in_full() -> None:
    context = ("Ünïcödé 🙂 <!channel> & line\n" * 2000)[:50_000]
    handoff = make_handoff(escalation("Summary"), context=context)

    view = render_full_content_modal(handoff)

    assert full_content_sections(view)["Why"] == context
    assert_modal_within_limits(view, handoff)


def test_the_full_content_modal_shows_50_kb_of_arguments_in_full(handoffs: Handoffs) -> None:
    args = {f"field_{i}": f"value {i} " * 20 for i in range(250)}
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="bulk_update", args=args
    )
    assert len(json.dumps(args)) > 50_000

    view = render_full_content_modal(handoff)

    assert json.loads(full_content_sections(view)["Arguments"]) == args
    assert_modal_within_limits(view, handoff)


def test_the_full_content_modal_shows_every_choice() -> None:
    choices = [f"Option {i}: " + "detail " * 40 for i in range(150)]
    handoff = make_handoff(question("Which?", choices))

    sections = full_content_sections(render_full_content_modal(handoff))

    assert sections["Choices"] == "\n".join(f"- {choice}" for choice in choices)


def test_the_edit_modal_has_one_prefilled_input_per_argument() -> None:
    args = {
        "amount": 30,
        "price": 12.5,
        "notify": True,
        "note": "refund for order 42",
        "code": "42",
        "tags": ["a", "b"],
        "address": {"city": "Zürich"},
        "coupon": None,
    }
    view = render_edit_modal(make_handoff(approval(args)))

    inputs = {block["block_id"]: block for block in view["blocks"] if block["type"] == "input"}

    assert set(inputs) == {arg_block_id(name) for name in args}
    prefilled = {name: inputs[arg_block_id(name)]["element"]["initial_value"] for name in args}
    assert prefilled == {
        "amount": "30",
        "price": "12.5",
        "notify": "true",
        "note": "refund for order 42",
        "code": "42",
        "tags": '["a", "b"]',
        "address": '{"city": "Zürich"}',
        "coupon": "null",
    }
    assert all(inputs[arg_block_id(name)]["label"]["text"] == name for name in args)


def test_the_edit_modal_requires_exactly_the_schema_required_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["amount"],
    }
    view = render_edit_modal(
        make_handoff(approval({"amount": 30, "note": "x"}, args_schema=schema))
    )

    inputs = {block["block_id"]: block for block in view["blocks"] if block["type"] == "input"}

    assert inputs[arg_block_id("amount")].get("optional", False) is False
    assert inputs[arg_block_id("note")]["optional"] is True


def test_an_argument_too_long_to_edit_is_shown_as_kept_as_sent() -> None:
    args = {"body": "x" * 3001, "items": list(range(1000)), "amount": 30}
    view = render_edit_modal(make_handoff(approval(args)))

    input_ids = [block["block_id"] for block in view["blocks"] if block["type"] == "input"]
    notes = [t for t in text_objects(view["blocks"], "mrkdwn") if "too long to edit" in t]

    assert input_ids == [arg_block_id("amount")]
    assert len(notes) == 2
    assert "*body*" in notes[0]
    assert "*items*" in notes[1]


def test_an_argument_of_exactly_3000_characters_is_still_editable() -> None:
    view = render_edit_modal(make_handoff(approval({"body": "x" * 3000})))

    (block,) = [block for block in view["blocks"] if block["type"] == "input"]

    assert block["element"]["initial_value"] == "x" * 3000


def test_a_short_draft_is_one_required_input() -> None:
    view = render_correction_modal(make_handoff(correction("Dear customer,")))

    (block,) = [block for block in view["blocks"] if block["type"] == "input"]

    assert block["element"]["initial_value"] == "Dear customer,"
    assert block.get("optional", False) is False


@pytest.mark.parametrize("size", [3001, 6000, 9500, 50_000])
def test_a_long_draft_is_split_into_parts_that_join_back_to_the_original(size: int) -> None:
    draft = ("Ünïcödé draft 🙂 line\n" * 3000)[:size]
    handoff = make_handoff(correction(draft, "Fix the tone"))

    view = render_correction_modal(handoff)
    inputs = [block for block in view["blocks"] if block["type"] == "input"]

    assert len(inputs) == -(-size // 3000)
    assert all(len(block["element"]["initial_value"]) <= 3000 for block in inputs)
    assert parse_corrected_draft(input_values(view)) == draft
    assert_modal_within_limits(view, handoff)


def test_every_modal_keeps_the_handoff_id_in_private_metadata() -> None:
    rendered = [
        (render_reject_modal, approval({"a": 1})),
        (render_edit_modal, approval({"a": 1})),
        (render_answer_modal, question("Which?", ["a", "b"])),
        (render_correction_modal, correction()),
        (render_resolve_modal, escalation()),
        (render_full_content_modal, escalation()),
    ]
    for render, payload in rendered:
        view = render(make_handoff(payload))

        assert handoff_id_from_view(view) == HANDOFF_ID


def test_the_answer_modal_offers_at_most_100_choices_by_index() -> None:
    choices = [f"choice {i} " + "x" * 100 for i in range(150)]
    view = render_answer_modal(make_handoff(question("Which?", choices)))

    (select,) = [obj for obj in dicts_in(view) if obj.get("type") == "static_select"]

    assert [option["value"] for option in select["options"]] == [str(i) for i in range(100)]
    assert select["options"][3]["text"]["text"].startswith("choice 3 ")


@pytest.mark.parametrize("metadata", [None, "", "not json", "[]", '{"other": 1}'])
def test_a_view_not_opened_for_a_handoff_has_no_handoff_id(metadata: str | None) -> None:
    assert handoff_id_from_view({"private_metadata": metadata}) is None
