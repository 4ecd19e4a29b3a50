"""Reading a reviewer's input back from a modal: argument values with their types kept,
checked against the action's JSON schema when the agent gave one; a typed answer's fields
as the types its ``answer_schema`` names."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from bot.blockkit.ids import (
    ANSWER_BLOCK,
    CHOICE_BLOCK,
    DRAFT_BLOCK_PREFIX,
    VALUE,
    answer_field_block_id,
    arg_block_id,
)
from bot.blockkit.modals import CHECKED, json_type
from bot.mrkdwn import clip
from store.answer_schemas import (
    MAX_BOUND,
    AnswerField,
    answer_errors,
    answer_fields,
    decimal_text,
)
from store.arg_schemas import argument_errors
from store.decoding import json_value_problem
from store.models import Handoff

_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0"}


@dataclass
class ParsedEdit:
    """Edited arguments, or errors keyed by the input block they belong to."""

    args: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def input_value(state_values: dict[str, Any], block_id: str) -> str | None:
    """The text typed into an input block (None when empty or absent)."""
    element = state_values.get(block_id, {}).get(VALUE, {})
    if element.get("type") == "static_select":
        option = element.get("selected_option") or {}
        return option.get("value")
    value = element.get("value")
    return value if value not in (None, "") else None


def parse_edited_args(handoff: Handoff, state_values: dict[str, Any]) -> ParsedEdit:
    """Turn the edit modal's inputs back into typed arguments.

    Each input is read as the type the schema names (or, without a schema, the type of the
    original value), so ``30`` stays a number and ``{"a": 1}`` stays an object.
    """
    action = handoff.payload.action  # type: ignore[union-attr]
    properties = (action.args_schema or {}).get("properties", {})
    parsed = ParsedEdit()
    for name, original in handoff.current_args.items():
        block_id = arg_block_id(name)
        if block_id not in state_values:
            parsed.args[name] = original  # not editable in the modal (too long): kept
            continue
        raw = input_value(state_values, block_id)
        expected = properties.get(name, {}).get("type") or json_type(original)
        try:
            parsed.args[name] = _coerce(raw, expected, original)
        except ValueError as exc:
            parsed.errors[block_id] = str(exc)
    if action.args_schema and not parsed.errors:
        _check_schema(action.args_schema, parsed)
    return parsed


def parse_answer(state_values: dict[str, Any], choices: list[str] | None) -> str | None:
    """The answer to a question: the typed text, else the picked choice."""
    typed = input_value(state_values, ANSWER_BLOCK)
    if typed and typed.strip():
        return typed.strip()
    picked = input_value(state_values, CHOICE_BLOCK)
    if picked is not None and choices:
        try:
            return choices[int(picked)]
        except (ValueError, IndexError):
            return None
    return None


@dataclass
class ParsedAnswer:
    """A typed answer read from the Answer modal, or errors keyed by the input block of the
    field they are about."""

    data: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ERROR_SHOWN = 150


def parse_typed_answer(schema: dict[str, Any], state_values: dict[str, Any]) -> ParsedAnswer:
    """Read a typed answer's fields from the Answer modal (``render_answer_modal``), each as
    its type: text (trimmed), ``"YYYY-MM-DD"``, the enum's value, an int or a float, True or
    False; then check the whole against ``schema`` as the store will.

    An empty optional field is left out; a boolean is always given (its checkbox left empty
    is False). What Slack's client lets through is not trusted: text that is only spaces, a
    number past its bounds or an option the form never offered is an error on its input.
    """
    fields = answer_fields(schema)
    parsed = ParsedAnswer()
    for index, answer_field in enumerate(fields):
        block_id = answer_field_block_id(index)
        element = state_values.get(block_id, {}).get(VALUE) or {}
        try:
            value = _field_value(answer_field, element)
        except ValueError as exc:
            parsed.errors[block_id] = clip(str(exc), _ERROR_SHOWN)
            continue
        if value is None:
            if answer_field.required:
                parsed.errors[block_id] = "This field is required."
            continue
        parsed.data[answer_field.name] = value
    if parsed.errors:
        return parsed
    # The schema's own verdict, as the store gives it: nothing the modal reads may pass here
    # and fail there.
    places = {f.name: answer_field_block_id(i) for i, f in enumerate(fields)}
    for name, message in answer_errors(schema, parsed.data).items():
        parsed.errors.setdefault(
            places.get(name, answer_field_block_id(0)), clip(message, _ERROR_SHOWN)
        )
    return parsed


def _field_value(answer_field: AnswerField, element: dict[str, Any]) -> Any:
    """One field's value from its input's state (None: left empty)."""
    kind = answer_field.kind
    if kind == "boolean":
        picked = element.get("selected_options") or []
        return any(isinstance(o, dict) and o.get("value") == CHECKED for o in picked)
    if kind == "enum":
        option = element.get("selected_option") or {}
        picked = option.get("value") if isinstance(option, dict) else None
        if picked is None:
            return None
        if not str(picked).isdecimal() or int(picked) >= len(answer_field.options):
            raise ValueError("Pick one of the choices offered.")
        return answer_field.options[int(picked)]
    if kind == "date":
        picked = element.get("selected_date")
        if not picked:
            return None
        try:
            if not _DATE.fullmatch(str(picked)):
                raise ValueError
            date.fromisoformat(str(picked))
        except ValueError:
            raise ValueError("Pick a date.") from None
        return str(picked)
    raw = element.get("value")
    text = raw.strip() if isinstance(raw, str) else ""
    if kind == "string":
        return _text_value(answer_field, text) if text else None
    return _number_value(answer_field, text) if text else None


def _text_value(answer_field: AnswerField, text: str) -> str:
    low, high = answer_field.min_length, answer_field.max_length
    if low is not None and len(text) < low:
        raise ValueError(f"Enter at least {low} characters (spaces around the text do not count).")
    if high is not None and len(text) > high:
        raise ValueError(f"Enter at most {high} characters.")
    return text


def _number_value(answer_field: AnswerField, text: str) -> int | float:
    whole = answer_field.kind == "integer"
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite():
        raise ValueError(
            "Enter a whole number, e.g. 42." if whole else "Enter a number, e.g. 12.5."
        )
    if abs(number) > Decimal(repr(MAX_BOUND)):
        # Beyond this a number loses digits on its way (Slack's client, JSON readers).
        raise ValueError(
            f"Enter a number between -{decimal_text(MAX_BOUND)} and {decimal_text(MAX_BOUND)}."
        )
    if whole and number != number.to_integral_value():
        raise ValueError("Enter a whole number, e.g. 42.")
    low, high = answer_field.minimum, answer_field.maximum
    if low is not None and number < Decimal(repr(low)):
        raise ValueError(f"Enter a number of at least {decimal_text(low)}.")
    if high is not None and number > Decimal(repr(high)):
        raise ValueError(f"Enter a number of at most {decimal_text(high)}.")
    if number == number.to_integral_value():
        return int(number)  # 12 stays 12, not 12.0, in a number field too
    return float(number)


def parse_corrected_draft(state_values: dict[str, Any]) -> str:
    """The corrected draft, joined from its parts in order."""
    parts = sorted(
        (int(block_id.removeprefix(DRAFT_BLOCK_PREFIX)), block_id)
        for block_id in state_values
        # Only the parts the modal has: a submission naming others is not Slack's.
        if block_id.startswith(DRAFT_BLOCK_PREFIX)
        and block_id.removeprefix(DRAFT_BLOCK_PREFIX).isdecimal()
        and len(block_id) <= len(DRAFT_BLOCK_PREFIX) + 4
    )
    return "".join(input_value(state_values, block_id) or "" for _, block_id in parts)


def _coerce(raw: str | None, expected: Any, original: Any) -> Any:
    types = list(expected) if isinstance(expected, list) else [expected]
    # With a union type, read the input as the original value's type first, so that a
    # field left as it was keeps its type ("42" stays a string, null stays null).
    original_type = json_type(original)
    if original_type in types:
        types.remove(original_type)
        types.insert(0, original_type)
    if raw is None:
        if "null" in types:
            return None
        if "string" in types:
            return ""
        raise ValueError("Enter a value (or cancel to keep the agent's)")
    errors = []
    for kind in types:
        try:
            return _coerce_one(raw, kind)
        except ValueError as exc:
            errors.append(str(exc))
    raise ValueError(errors[0] if errors else "Invalid value")


def _no_constants(name: str) -> Any:
    # Python's json reads NaN and Infinity, which are not JSON and reach the agent as null.
    raise ValueError(f"{name} is not a JSON number")


def _coerce_one(raw: str, kind: str) -> Any:
    text = raw.strip()
    if kind == "string":
        return raw
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("Enter a whole number, e.g. 42") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError("Enter a number, e.g. 12.5") from None
        # float() reads "nan" and "inf", which no JSON schema bound excludes (NaN compares
        # false) and which JSON cannot carry: the agent would get null.
        if not math.isfinite(number):
            raise ValueError("Enter a finite number, e.g. 12.5") from None
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "boolean":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError("Enter true or false")
    if kind == "null":
        if text.lower() in ("null", "none", ""):
            return None
        raise ValueError("Must be empty (null)")
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        raise ValueError(f"Enter valid JSON ({kind}), with finite numbers") from None
    # 1e309 parses as an infinity (parse_constant sees only NaN and Infinity); half an emoji
    # would be stored as U+FFFD; nesting past what a request may hold overflows encoders.
    if problem := json_value_problem(value, where=kind):
        raise ValueError(f"Enter JSON that can be stored: {problem}")
    if kind == "object" and not isinstance(value, dict):
        raise ValueError('Enter a JSON object, e.g. {"key": "value"}')
    if kind == "array" and not isinstance(value, list):
        raise ValueError("Enter a JSON array, e.g. [1, 2]")
    return value


def _check_schema(schema: dict[str, Any], parsed: ParsedEdit) -> None:
    names = list(parsed.args)
    # The agent's schema, applied safely: no remote $ref, patterns with a time limit.
    for error in argument_errors(schema, parsed.args):
        name = str(error.path[0]) if error.path else None
        if name is None and error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else None
            name = missing if missing in parsed.args else None
        block_id = (
            arg_block_id(name)
            if name in parsed.args
            else arg_block_id(names[0])
            if names
            else "arg"
        )
        parsed.errors.setdefault(block_id, clip(error.message, 150))
