"""Typed answers (``answer_schema``): only a flat object of the supported field types is
taken, and the store delivers only an answer that fits it, whatever surface decides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from store.answer_schemas import (
    MAX_FIELDS,
    MAX_SCHEMA_CHARS,
    answer_errors,
    answer_fields,
    answer_schema_problem,
    answer_text,
    decimal_text,
)
from store.exceptions import InvalidDecision, InvalidHandoffRequest
from worker.client import Handoffs

REFUND: dict[str, Any] = {
    "type": "object",
    "required": ["amount", "reason"],
    "properties": {
        "amount": {"type": "number", "minimum": 0, "maximum": 500, "title": "Amount (EUR)"},
        "items": {"type": "integer", "minimum": 1},
        "reason": {"enum": ["damaged", "late", "other"]},
        "note": {"type": "string", "maxLength": 20},
        "notify": {"type": "boolean"},
        "ship_by": {"type": "string", "format": "date"},
    },
}


def test_each_supported_field_type_is_read_with_its_limits() -> None:
    fields = {f.name: f for f in answer_fields(REFUND)}
    assert [fields[n].kind for n in REFUND["properties"]] == [
        "number",
        "integer",
        "enum",
        "string",
        "boolean",
        "date",
    ]
    assert (fields["amount"].minimum, fields["amount"].maximum) == (0, 500)
    assert fields["amount"].label == "Amount (EUR)" and fields["amount"].required
    assert fields["reason"].options == ("damaged", "late", "other")
    assert fields["note"].max_length == 20 and not fields["note"].required


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "array"}, '{"type": "object"'),
        ({"type": "object", "properties": {}}, "at least one field"),
        (
            {"type": "object", "properties": {"a": {"type": "object"}}},
            "must be string, number, integer or boolean",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}},
            "does not take ['pattern']",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
            'the only format is "date"',
        ),
        ({"type": "object", "properties": {"a": {"enum": [1, 2]}}}, "strings of 1 to 75"),
        ({"type": "object", "properties": {"a": {"enum": ["x" * 76]}}}, "strings of 1 to 75"),
        ({"type": "object", "properties": {"a": {"enum": ["x", "x"]}}}, "a value twice"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "maxLength": 0}}},
            "maxLength must be 1 to 3000",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3001}}},
            "maxLength must be 1 to 3000",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1.5}}},
            "whole number",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "number", "minimum": 2, "maximum": 1}}},
            "greater than its maximum",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["b"]},
            "names fields it has not",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "boolean"}}, "anyOf": []},
            "does not take ['anyOf']",
        ),
        (
            {
                "type": "object",
                "properties": {f"f{i}": {"type": "boolean"} for i in range(MAX_FIELDS + 1)},
            },
            f"at most {MAX_FIELDS}",
        ),
    ],
)
def test_schemas_a_modal_cannot_render_are_refused(schema: dict[str, Any], problem: str) -> None:
    assert problem in (answer_schema_problem(schema) or "")


def test_a_schema_is_measured_as_the_json_slack_is_sent() -> None:
    # 2,500 options of 5 emoji are 20,000 characters, but 12 each as JSON with \u escapes.
    values = [f"{i:02d}" + "🙂" * 5 for i in range(100)]
    schema = {"type": "object", "properties": {f"f{k}": {"enum": values} for k in range(25)}}
    assert len(json.dumps(schema, ensure_ascii=False)) < MAX_SCHEMA_CHARS

    assert "over 32000 characters of JSON" in (answer_schema_problem(schema) or "")
    ascii_values = [f"{i:02d}" + "x" * 5 for i in range(100)]
    schema["properties"] = {f"f{k}": {"enum": ascii_values} for k in range(25)}
    assert answer_schema_problem(schema) is None


def test_answers_are_checked_field_by_field() -> None:
    errors = answer_errors(
        REFUND,
        {"amount": 900, "reason": "bored", "items": 1.5, "ship_by": "2026-13-01", "x": 1},
    )
    assert set(errors) == {"amount", "reason", "items", "ship_by", ""}
    assert "900 is greater than the maximum of 500" in errors["amount"]
    assert answer_errors(REFUND, {"amount": 12.5, "reason": "late"}) == {}
    assert "required" in answer_errors(REFUND, {"amount": 1})["reason"]
    assert answer_errors(REFUND, {"amount": True, "reason": "late"})["amount"]


def test_the_text_of_a_typed_answer_lists_its_fields() -> None:
    data = {"amount": 12.5, "reason": "late", "notify": False}
    assert answer_text(REFUND, data) == "Amount (EUR): 12.5\nreason: late\nnotify: no"
    single = {"type": "object", "properties": {"why": {"type": "string"}}}
    assert answer_text(single, {"why": "it broke"}) == "it broke"


def test_number_bounds_are_plain_decimals() -> None:
    assert [decimal_text(n) for n in (5, 5.0, 0.00001, 1e15, -2.5)] == [
        "5",
        "5",
        "0.00001",
        "1000000000000000",
        "-2.5",
    ]


def test_a_question_with_an_invalid_schema_is_refused_at_creation(handoffs: Handoffs) -> None:
    with pytest.raises(InvalidHandoffRequest, match="answer_schema"):
        handoffs.ask(run_id="r", thread_id="t", question="?", answer_schema={"type": "string"})
    with pytest.raises(InvalidHandoffRequest, match="not both"):
        handoffs.ask(run_id="r", thread_id="t", question="?", choices=["a"], answer_schema=REFUND)


def test_decide_delivers_the_typed_answer_with_its_text(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="r", thread_id="t", question="Refund?", answer_schema=REFUND)
    decided = handoffs.decide(
        handoff.id, "answered", by="U1", answer_data={"amount": 30, "reason": "damaged"}
    )
    assert decided.resume_data is not None
    assert decided.resume_data.answer_data == {"amount": 30, "reason": "damaged"}
    assert decided.resume_data.answer == "Amount (EUR): 30\nreason: damaged"
    stored = handoffs.get(handoff.id).resume_data
    assert stored is not None and stored.answer_data == {"amount": 30, "reason": "damaged"}


def test_decide_cannot_bypass_the_schema(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="r", thread_id="t", question="Refund?", answer_schema=REFUND)
    with pytest.raises(InvalidDecision, match="takes a typed answer"):
        handoffs.decide(handoff.id, "answered", by="U1", answer="30 euros")
    with pytest.raises(InvalidDecision, match=r"amount: .*greater than the maximum"):
        handoffs.decide(
            handoff.id, "answered", by="U1", answer_data={"amount": 501, "reason": "late"}
        )
    with pytest.raises(InvalidDecision, match="outcome 'answered'"):
        handoffs.decide(handoff.id, "rejected", by="U1", answer_data={"amount": 1})
    assert handoffs.get(handoff.id).is_pending
    plain = handoffs.ask(run_id="r", thread_id="t", question="Why?")
    with pytest.raises(InvalidDecision, match="with an answer_schema"):
        handoffs.decide(plain.id, "answered", by="U1", answer_data={"why": "x"})


def test_a_single_string_field_is_answered_with_text(handoffs: Handoffs) -> None:
    schema = {
        "type": "object",
        "required": ["why"],
        "properties": {"why": {"type": "string", "maxLength": 10}},
    }
    handoff = handoffs.ask(run_id="r", thread_id="t", question="Why?", answer_schema=schema)
    with pytest.raises(InvalidDecision, match=r"why: .*too long"):
        handoffs.decide(handoff.id, "answered", by="U1", answer="far too long an answer")
    decided = handoffs.decide(handoff.id, "answered", by="U1", answer=" it broke ")
    assert decided.resume_data is not None
    assert decided.resume_data.answer_data == {"why": "it broke"}
