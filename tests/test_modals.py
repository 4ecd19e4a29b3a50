"""A handoff's modals (bot.blockkit.modals): each fits a modal, agent text cannot ping anyone,
every argument and the whole draft come back, and each keeps its handoff id."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given

from bot.blockkit.ids import (
    ANSWER_MODAL,
    answer_field_block_id,
    arg_block_id,
    handoff_id_from_view,
)
from bot.blockkit.limits import FIELD_TEXT_LIMIT
from bot.blockkit.modals import (
    render_answer_modal,
    render_correction_modal,
    render_edit_modal,
    render_full_content_modal,
    render_reject_modal,
    render_resolve_modal,
)
from bot.standin.blockkit import check_view
from handlers.modal_inputs import parse_corrected_draft
from store import defaults
from store.answer_schemas import (
    MAX_DESCRIPTION,
    MAX_FIELDS,
    MAX_NAME,
    MAX_OPTION_TEXT,
    MAX_OPTIONS,
    MAX_TITLE,
    answer_fields,
    answer_schema_problem,
)
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


# -- typed answers (answer_schema) --------------------------------------------------------------


def typed_question(schema: dict[str, Any], text: str = "Refund order A-1001?") -> Handoff:
    return make_handoff({"kind": "question", "question": text, "answer_schema": schema})


def test_each_field_of_a_typed_answer_is_an_input_of_its_kind() -> None:
    schema = {
        "type": "object",
        "required": ["amount", "items", "reason", "note", "agree", "ship_by"],
        "properties": {
            "amount": {"type": "number", "minimum": 0.5, "maximum": 500, "title": "Amount"},
            "items": {"type": "integer", "minimum": 1},
            "reason": {"enum": ["damaged", "late"], "description": "Why it is refunded"},
            "note": {"type": "string", "minLength": 3, "maxLength": 20},
            "agree": {"type": "boolean"},
            "ship_by": {"type": "string", "format": "date"},
            "essay": {"type": "string"},
        },
    }
    view = render_answer_modal(typed_question(schema))

    question_block, *inputs = view["blocks"]
    assert question_block["text"]["text"] == "Refund order A-1001?"
    assert [block["block_id"] for block in inputs] == [answer_field_block_id(i) for i in range(7)]
    amount, items, reason, note, agree, ship_by, essay = inputs
    assert amount["label"]["text"] == "Amount" and amount["optional"] is False
    assert amount["element"] == {
        "type": "number_input",
        "action_id": "value",
        "is_decimal_allowed": True,
        "min_value": "0.5",
        "max_value": "500",
    }
    assert amount["hint"]["text"] == "A number from 0.5 to 500"
    assert items["element"] == {
        "type": "number_input",
        "action_id": "value",
        "is_decimal_allowed": False,
        "min_value": "1",
    }
    assert reason["label"]["text"] == "reason"
    assert reason["hint"]["text"] == "Why it is refunded (one of 2 choices)"
    assert reason["element"]["type"] == "static_select"
    assert reason["element"]["options"] == [
        {"text": {"type": "plain_text", "text": "damaged"}, "value": "0"},
        {"text": {"type": "plain_text", "text": "late"}, "value": "1"},
    ]
    assert note["element"] == {
        "type": "plain_text_input",
        "action_id": "value",
        "min_length": 3,
        "max_length": 20,
        "multiline": False,
    }
    # A checkbox left empty is an answer (false), so even a required one is optional.
    assert agree["optional"] is True
    assert agree["element"]["type"] == "checkboxes"
    assert agree["element"]["options"][0]["value"] == "true"
    assert agree["hint"]["text"] == "Tick for yes, leave empty for no"
    assert ship_by["element"] == {"type": "datepicker", "action_id": "value"}
    assert essay["optional"] is True
    assert essay["element"]["multiline"] is True and essay["element"]["max_length"] == 3000
    assert view["callback_id"] == ANSWER_MODAL
    assert_modal_within_limits(view, typed_question(schema))


def test_a_typed_answers_field_names_never_reach_a_block_id() -> None:
    name = "<!channel> " + "n" * 89
    schema = {"type": "object", "properties": {name: {"type": "string"}}}

    [_, field_input] = render_answer_modal(typed_question(schema))["blocks"]

    assert field_input["block_id"] == answer_field_block_id(0)
    assert field_input["label"]["text"] == name  # plain text: shown, never a mention


def test_the_full_content_modal_lists_the_fields_of_a_typed_answer() -> None:
    schema = {
        "type": "object",
        "required": ["amount"],
        "properties": {
            "amount": {"type": "integer", "maximum": 9, "title": "Items"},
            "ok": {"type": "boolean"},
        },
    }
    view = render_full_content_modal(typed_question(schema))

    assert "Items: a whole number of at most 9, required\nok: yes or no" in text_objects(view)


def _largest(make: Callable[[int], dict[str, Any]], most: int) -> dict[str, Any]:
    """``make(n)`` for the largest ``n`` up to ``most`` whose schema the store takes."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (
            (middle, high) if answer_schema_problem(make(middle)) is None else (low, middle - 1)
        )
    schema = make(low)
    assert answer_schema_problem(schema) is None
    return schema


def _many_options(char: str) -> Callable[[int], dict[str, Any]]:
    """25 enums of 100 values, each value ``n`` characters: the most options there are."""

    def make(n: int) -> dict[str, Any]:
        values = [str(i) + char * n for i in range(MAX_OPTIONS)]
        properties = {f"f{k}": {"enum": values} for k in range(MAX_FIELDS)}
        return {"type": "object", "properties": properties}

    return make


def _long_options(char: str) -> Callable[[int], dict[str, Any]]:
    """``n`` enums of 100 values of 75 characters, each titled and described in full."""

    def make(n: int) -> dict[str, Any]:
        values = [f"{i:02d}".ljust(MAX_OPTION_TEXT, char) for i in range(MAX_OPTIONS)]
        properties = {
            f"f{k}": {"enum": values, "title": char * MAX_TITLE, "description": char * 40}
            for k in range(n)
        }
        return {"type": "object", "properties": properties or {"x": {"type": "boolean"}}}

    return make


def _long_labels(char: str) -> Callable[[int], dict[str, Any]]:
    """25 fields of every kind, with names, titles and descriptions of ``n``% of their most."""

    def make(n: int) -> dict[str, Any]:
        kinds = [
            {"type": "string", "minLength": 1, "maxLength": 3000},
            {"type": "number", "minimum": -1e15, "maximum": 1e15},
            {"type": "integer", "minimum": -(10**15), "maximum": 10**15},
            {"type": "boolean"},
            {"type": "string", "format": "date"},
        ]
        properties = {
            (f"{k:02d}" + char * MAX_NAME)[: max(2, MAX_NAME * n // 100)]: {
                **kinds[k % len(kinds)],
                "title": char * (MAX_TITLE * n // 100),
                "description": char * (MAX_DESCRIPTION * n // 100),
            }
            for k in range(MAX_FIELDS)
        }
        return {"type": "object", "properties": properties, "required": list(properties)}

    return make


@pytest.mark.parametrize("char", ["x", "é", "日", "🙂", '"', "\\"])
@pytest.mark.parametrize(
    ("shape", "most"),
    [(_many_options, MAX_OPTION_TEXT), (_long_options, MAX_FIELDS), (_long_labels, 100)],
)
def test_the_largest_typed_answers_the_store_takes_render_modals_slack_accepts(
    char: str, shape: Callable[[str], Callable[[int], dict[str, Any]]], most: int
) -> None:
    schema = _largest(shape(char), most)
    # The question at its longest in a modal too, in the same characters.
    handoff = typed_question(schema, text=char * 5000)

    view = render_answer_modal(handoff)  # slack_sdk's models check their limits here

    check_view(view, kind="modal")  # and the stand-in, as Slack checks a view
    assert_modal_within_limits(view, handoff)
    assert len(json.dumps(view).encode()) < MODAL_MAX_BYTES  # sent with \u escapes too
    fields = answer_fields(schema)
    inputs = [block for block in view["blocks"] if block["type"] == "input"]
    assert len(inputs) == len(fields)
    for field, block in zip(fields, inputs, strict=True):
        assert block["label"]["text"] == field.label  # never cut
        assert len(block["hint"]["text"]) <= FIELD_TEXT_LIMIT
        options = block["element"].get("options", [])
        if field.kind == "enum":  # every value offered, as it is
            assert [o["text"]["text"] for o in options] == list(field.options)
            assert all(len(o["text"]["text"]) <= MAX_OPTION_TEXT for o in options)
