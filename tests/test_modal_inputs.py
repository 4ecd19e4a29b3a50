"""Reading a reviewer's edits back from a modal: typed arguments, schema errors on the right
input, answers and corrected drafts, from ``view.state.values`` exactly as Slack sends them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.blockkit.ids import (
    ANSWER_BLOCK,
    CHOICE_BLOCK,
    DRAFT_BLOCK_PREFIX,
    answer_field_block_id,
    arg_block_id,
)
from bot.blockkit.modals import json_type, render_edit_modal
from handlers.modal_inputs import (
    input_value,
    parse_answer,
    parse_corrected_draft,
    parse_edited_args,
    parse_typed_answer,
)
from store.models import Handoff
from tests.support.blockkit import make_handoff


def approval(args: dict[str, Any], schema: dict[str, Any] | None = None) -> Handoff:
    action = {"name": "issue_refund", "args": args, "args_schema": schema}
    return make_handoff({"kind": "approval", "action": action})


def typed(value: str | None) -> dict[str, Any]:
    """A plain_text_input's state, as in view_submission's ``view.state.values``."""
    return {"value": {"type": "plain_text_input", "value": value}}


def picked(index: int | None, text: str = "") -> dict[str, Any]:
    """A static_select's state; ``None`` when nothing was picked."""
    option = (
        None
        if index is None
        else {"text": {"type": "plain_text", "text": text, "emoji": True}, "value": str(index)}
    )
    return {"value": {"type": "static_select", "selected_option": option}}


def edits(**values: str | None) -> dict[str, Any]:
    """State values of the edit modal with these arguments typed in."""
    return {arg_block_id(name): typed(value) for name, value in values.items()}


def submitted_unchanged(handoff: Handoff) -> dict[str, Any]:
    """State values of the edit modal submitted without touching it."""
    view = render_edit_modal(handoff)
    return {
        block["block_id"]: typed(block["element"].get("initial_value"))
        for block in view["blocks"]
        if block["type"] == "input"
    }


def modal_block_ids(handoff: Handoff) -> set[str]:
    return {
        block["block_id"] for block in render_edit_modal(handoff)["blocks"] if "block_id" in block
    }


# -- types are kept --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "typed_in", "expected"),
    [
        (30, "45", 45),
        (30, " 45 ", 45),
        (2.5, "12.75", 12.75),
        (2.0, "2.0", 2.0),
        (True, "false", False),
        (False, "true", True),
        (False, "yes", True),
        (True, "no", False),
        (True, "No", False),
        ({"city": "Bern"}, '{"city": "Zürich", "zip": 8001}', {"city": "Zürich", "zip": 8001}),
        ([1, 2], '[3, "four", null]', [3, "four", None]),
        ("order 41", "order 42", "order 42"),
        ("41", "42", "42"),
        ("note", "  padded, kept as typed  ", "  padded, kept as typed  "),
        (None, "null", None),
    ],
)
def test_an_edited_value_keeps_the_type_of_the_original(
    original: Any, typed_in: str, expected: Any
) -> None:
    parsed = parse_edited_args(approval({"arg": original}), edits(arg=typed_in))

    assert parsed.errors == {}
    assert parsed.args == {"arg": expected}
    assert type(parsed.args["arg"]) is type(expected)


def test_an_emptied_string_argument_becomes_an_empty_string() -> None:
    parsed = parse_edited_args(approval({"note": "hello"}), edits(note=None))

    assert parsed.errors == {}
    assert parsed.args == {"note": ""}


def test_the_schema_type_wins_over_the_type_the_agent_sent() -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}

    parsed = parse_edited_args(approval({"amount": "30"}, schema), edits(amount="45"))

    assert parsed.args == {"amount": 45}


def test_an_argument_the_modal_could_not_show_is_kept_as_sent() -> None:
    body = "x" * 5000
    handoff = approval({"body": body, "amount": 30})
    state = submitted_unchanged(handoff)
    assert arg_block_id("body") not in state

    state[arg_block_id("amount")] = typed("25")
    parsed = parse_edited_args(handoff, state)

    assert parsed.errors == {}
    assert parsed.args == {"body": body, "amount": 25}


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=40),
    ),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    args=st.dictionaries(st.text(min_size=1, max_size=30), json_values, max_size=12),
    with_schema=st.booleans(),
)
def test_submitting_the_edit_modal_unchanged_gives_back_the_agents_arguments(
    args: dict[str, Any], with_schema: bool
) -> None:
    schema = None
    if with_schema:
        properties = {name: {"type": json_type(value)} for name, value in args.items()}
        schema = {"type": "object", "properties": properties}
    handoff = approval(args, schema)

    parsed = parse_edited_args(handoff, submitted_unchanged(handoff))

    assert parsed.errors == {}
    assert parsed.args == args


@pytest.mark.parametrize(
    ("original", "schema_type"),
    [(None, ["string", "null"]), ("42", ["integer", "string"]), (None, ["integer", "null"])],
)
def test_an_unchanged_value_of_a_union_type_keeps_its_type(original: Any, schema_type: Any) -> None:
    # The prefilled text of null is "null" and of "42" is 42: both parse as several types.
    schema = {"type": "object", "properties": {"arg": {"type": schema_type}}}
    handoff = approval({"arg": original}, schema)

    parsed = parse_edited_args(handoff, submitted_unchanged(handoff))

    assert parsed.errors == {}
    assert parsed.args == {"arg": original}
    assert type(parsed.args["arg"]) is type(original)


# -- helpful errors on the right input -------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "typed_in", "hint"),
    [
        (30, "abc", "whole number"),
        (30, "4.5", "whole number"),
        (2.5, "twelve", "number"),
        (True, "maybe", "true or false"),
        ({"a": 1}, "{a: 1", "valid JSON"),
        ({"a": 1}, "[1, 2]", "JSON object"),
        ([1], '{"a": 1}', "JSON array"),
        (30, None, "Enter a value"),
        # What JSON parses but a request may not hold: were a 500 (nothing decided).
        ({"a": 1}, '{"limit": 1e309}', "not a JSON number"),
        ({"a": 1}, '{"a": ' + "[" * 40 + "]" * 40 + "}", "nested deeper"),
        # Past the parser's recursion limit (not valid JSON) or, where a library raised that
        # limit in this process, nested too deep: refused on its input either way.
        ({"a": 1}, '{"a": ' + "[" * 1400 + "]" * 1400 + "}", "JSON"),
    ],
)
def test_bad_input_is_reported_on_its_own_input_with_a_hint(
    original: Any, typed_in: str | None, hint: str
) -> None:
    handoff = approval({"arg": original, "other": "fine"})

    parsed = parse_edited_args(handoff, edits(arg=typed_in, other="still fine"))

    assert list(parsed.errors) == [arg_block_id("arg")]
    assert hint in parsed.errors[arg_block_id("arg")]
    assert arg_block_id("arg") in modal_block_ids(handoff)


@pytest.mark.parametrize("typed_in", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_a_number_that_json_cannot_carry_is_refused_on_its_input(typed_in: str) -> None:
    # NaN passes every schema bound (it compares false) and would reach the agent as null.
    schema = {"type": "object", "properties": {"amount": {"type": "number", "maximum": 100}}}
    handoff = approval({"amount": 30.5}, schema)

    parsed = parse_edited_args(handoff, edits(amount=typed_in))

    assert list(parsed.errors) == [arg_block_id("amount")]
    assert "finite number" in parsed.errors[arg_block_id("amount")]


@pytest.mark.parametrize(("original", "typed_in"), [({"a": 1}, '{"a": NaN}'), ([1], "[Infinity]")])
def test_json_with_nan_or_infinity_is_refused(original: Any, typed_in: str) -> None:
    parsed = parse_edited_args(approval({"arg": original}), edits(arg=typed_in))

    assert "finite numbers" in parsed.errors[arg_block_id("arg")]


REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 1, "maximum": 500},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "reason": {"type": "string", "maxLength": 20},
    },
    "required": ["amount", "currency"],
}
REFUND_ARGS = {"amount": 30, "currency": "EUR", "reason": "double charge"}


@pytest.mark.parametrize(
    ("name", "typed_in", "message"),
    [
        ("amount", "0", "minimum"),
        ("amount", "900", "maximum"),
        ("currency", "GBP", "is not one of"),
        ("reason", "a reason that is far too long", "is too long"),
    ],
)
def test_a_schema_violation_is_reported_on_the_offending_argument(
    name: str, typed_in: str, message: str
) -> None:
    handoff = approval(REFUND_ARGS, REFUND_SCHEMA)
    state = submitted_unchanged(handoff)
    state[arg_block_id(name)] = typed(typed_in)

    parsed = parse_edited_args(handoff, state)

    assert list(parsed.errors) == [arg_block_id(name)]
    assert message in parsed.errors[arg_block_id(name)]


def test_valid_edits_pass_the_schema() -> None:
    handoff = approval(REFUND_ARGS, REFUND_SCHEMA)

    parsed = parse_edited_args(handoff, edits(amount="500", currency="USD", reason="goodwill"))

    assert parsed.errors == {}
    assert parsed.args == {"amount": 500, "currency": "USD", "reason": "goodwill"}


def test_a_missing_required_argument_is_named_on_an_input_of_the_modal() -> None:
    # The agent left out a required argument: the modal has no input for it, so the error
    # must land on one that exists, or Slack cannot show it.
    handoff = approval({"amount": 30}, REFUND_SCHEMA)

    parsed = parse_edited_args(handoff, submitted_unchanged(handoff))

    assert len(parsed.errors) == 1
    (block_id, message) = next(iter(parsed.errors.items()))
    assert "'currency' is a required property" in message
    assert block_id in modal_block_ids(handoff)


def test_error_messages_fit_slacks_error_display() -> None:
    schema = {"type": "object", "properties": {"tag": {"enum": [f"value-{i}" for i in range(200)]}}}
    handoff = approval({"tag": "value-1"}, schema)

    parsed = parse_edited_args(handoff, edits(tag="other"))

    assert arg_block_id("tag") in parsed.errors
    assert len(parsed.errors[arg_block_id("tag")]) <= 150


# -- answers and drafts ------------------------------------------------------------------


CHOICES = ["Basic plan", "Pro plan", "Enterprise plan"]


def test_a_picked_choice_is_mapped_back_from_its_index_to_its_text() -> None:
    state = {CHOICE_BLOCK: picked(1, "Pro plan"), ANSWER_BLOCK: typed(None)}

    assert parse_answer(state, CHOICES) == "Pro plan"


def test_a_choice_clipped_in_the_select_is_answered_in_full() -> None:
    choices = ["short", "a very long choice " * 10]
    state = {CHOICE_BLOCK: picked(1, choices[1][:74] + "…"), ANSWER_BLOCK: typed(None)}

    assert parse_answer(state, choices) == choices[1]


def test_typed_text_wins_over_a_picked_choice() -> None:
    state = {CHOICE_BLOCK: picked(0, "Basic plan"), ANSWER_BLOCK: typed("  Neither, call them  ")}

    assert parse_answer(state, CHOICES) == "Neither, call them"


def test_blank_typed_text_falls_back_to_the_picked_choice() -> None:
    state = {CHOICE_BLOCK: picked(2, "Enterprise plan"), ANSWER_BLOCK: typed("   \n ")}

    assert parse_answer(state, CHOICES) == "Enterprise plan"


def test_a_question_without_choices_takes_the_typed_answer() -> None:
    assert parse_answer({ANSWER_BLOCK: typed("Tuesday")}, None) == "Tuesday"


@pytest.mark.parametrize(
    "state",
    [
        {CHOICE_BLOCK: picked(None), ANSWER_BLOCK: typed(None)},
        {ANSWER_BLOCK: typed("")},
        {CHOICE_BLOCK: picked(7, "gone"), ANSWER_BLOCK: typed(None)},
        {},
    ],
    ids=["nothing picked", "empty text", "unknown option", "no inputs"],
)
def test_no_usable_answer_gives_none(state: dict[str, Any]) -> None:
    assert parse_answer(state, CHOICES) is None


def test_input_value_reads_text_and_selects_and_treats_empty_as_absent() -> None:
    state = {"a": typed("text"), "b": typed(""), "c": picked(3, "x"), "d": picked(None)}

    assert [input_value(state, block) for block in ("a", "b", "c", "d", "missing")] == [
        "text",
        None,
        "3",
        None,
        None,
    ]


def test_draft_parts_are_joined_in_numeric_order() -> None:
    parts = [f"part {i};" for i in range(12)]
    # Slack gives no ordering guarantee: shuffle, and use two-digit indexes (10 after 9).
    state = {f"{DRAFT_BLOCK_PREFIX}{i}": typed(parts[i]) for i in reversed(range(12))}

    assert parse_corrected_draft(state) == "".join(parts)


def test_an_emptied_draft_part_is_left_out() -> None:
    state = {
        f"{DRAFT_BLOCK_PREFIX}0": typed("Hello"),
        f"{DRAFT_BLOCK_PREFIX}1": typed(None),
        f"{DRAFT_BLOCK_PREFIX}2": typed(" world"),
    }

    assert parse_corrected_draft(state) == "Hello world"


# -- typed answers ---------------------------------------------------------------------------

TYPED: dict[str, Any] = {
    "type": "object",
    "required": ["amount", "reason", "note"],
    "properties": {
        "amount": {"type": "number", "minimum": 0, "maximum": 500},
        "items": {"type": "integer", "minimum": 1},
        "reason": {"enum": ["damaged", "late"]},
        "note": {"type": "string", "minLength": 3, "maxLength": 20},
        "notify": {"type": "boolean"},
        "ship_by": {"type": "string", "format": "date"},
    },
}
AMOUNT, ITEMS, REASON, NOTE, NOTIFY, SHIP_BY = (answer_field_block_id(i) for i in range(6))


def number(value: str | None) -> dict[str, Any]:
    return {"value": {"type": "number_input", "value": value}}


def ticked(*values: str) -> dict[str, Any]:
    options = [{"text": {"type": "plain_text", "text": "Yes"}, "value": v} for v in values]
    return {"value": {"type": "checkboxes", "selected_options": options}}


def dated(value: str | None) -> dict[str, Any]:
    return {"value": {"type": "datepicker", "selected_date": value}}


def form(**changes: dict[str, Any]) -> dict[str, Any]:
    """The typed-answer form's state, every input as Slack sends it, with ``changes``."""
    state = {
        AMOUNT: number("30"),
        ITEMS: number(None),
        REASON: picked(1, "late"),
        NOTE: typed("wet box"),
        NOTIFY: ticked(),
        SHIP_BY: dated(None),
    }
    return {**state, **{answer_field_block_id(int(k[1:])): v for k, v in changes.items()}}


def test_a_typed_answer_is_read_as_its_fields_types() -> None:
    state = form(
        f0=number("12.50"),
        f1=number("1e3"),
        f3=typed("  wet box \n"),
        f4=ticked("true"),
        f5=dated("2026-02-28"),
    )

    parsed = parse_typed_answer(TYPED, state)

    assert parsed.errors == {}
    assert parsed.data == {
        "amount": 12.5,
        "items": 1000,
        "reason": "late",
        "note": "wet box",
        "notify": True,
        "ship_by": "2026-02-28",
    }
    assert type(parsed.data["items"]) is int and type(parsed.data["amount"]) is float


def test_empty_optional_fields_are_left_out_and_an_empty_checkbox_is_false() -> None:
    parsed = parse_typed_answer(TYPED, form(f0=number("30.0")))

    assert parsed.data == {"amount": 30, "reason": "late", "note": "wet box", "notify": False}
    assert type(parsed.data["amount"]) is int


@pytest.mark.parametrize(
    ("changes", "errors"),
    [
        ({"f0": number("500.01")}, {AMOUNT: "Enter a number of at most 500."}),
        ({"f0": number("-1")}, {AMOUNT: "Enter a number of at least 0."}),
        ({"f0": number("abc")}, {AMOUNT: "Enter a number, e.g. 12.5."}),
        ({"f0": number("NaN")}, {AMOUNT: "Enter a number, e.g. 12.5."}),
        ({"f0": number(None)}, {AMOUNT: "This field is required."}),
        ({"f1": number("2.5")}, {ITEMS: "Enter a whole number, e.g. 42."}),
        ({"f1": number("0")}, {ITEMS: "Enter a number of at least 1."}),
        (
            {"f1": number("1e400")},
            {ITEMS: "Enter a number between -1000000000000000 and 1000000000000000."},
        ),
        ({"f2": picked(2, "gone")}, {REASON: "Pick one of the choices offered."}),
        ({"f2": picked(None)}, {REASON: "This field is required."}),
        (
            {"f3": typed(" ab ")},
            {NOTE: "Enter at least 3 characters (spaces around the text do not count)."},
        ),
        ({"f3": typed("x" * 21)}, {NOTE: "Enter at most 20 characters."}),
        ({"f3": typed("   ")}, {NOTE: "This field is required."}),
        ({"f5": dated("2026-02-30")}, {SHIP_BY: "Pick a date."}),
        ({"f5": dated("next week")}, {SHIP_BY: "Pick a date."}),
        (
            {"f0": number("900"), "f3": typed("")},
            {AMOUNT: "Enter a number of at most 500.", NOTE: "This field is required."},
        ),
    ],
)
def test_bad_input_is_an_error_on_its_own_input(
    changes: dict[str, Any], errors: dict[str, str]
) -> None:
    parsed = parse_typed_answer(TYPED, form(**changes))

    assert parsed.errors == errors


def test_a_submission_without_the_forms_inputs_is_refused_on_them() -> None:
    parsed = parse_typed_answer(TYPED, {"answer": typed("30 euros")})

    assert parsed.errors == {
        AMOUNT: "This field is required.",
        REASON: "This field is required.",
        NOTE: "This field is required.",
    }


def test_a_ticked_box_the_form_never_had_is_no_yes() -> None:
    assert parse_typed_answer(TYPED, form(f4=ticked("yes"))).data["notify"] is False
