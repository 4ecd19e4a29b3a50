"""Typed answers to questions (``answer_schema``): the JSON Schema of a flat object whose
fields a person fills in, one input each, in Slack's Answer modal.

Only what one modal input can hold is accepted: ``string`` (with ``minLength`` and
``maxLength``), ``string`` with ``format: date``, ``string`` with an ``enum``, ``number`` and
``integer`` (with ``minimum`` and ``maximum``), and ``boolean``. The schema is checked once,
when the handoff is created, and bounded (fields, options, text) so that its modal stays
within Slack's limits; an answer is checked against it in the store, so no surface (the
modal, a thread reply, the HTTP API, ``HandoffStore.decide``) can deliver one that does not
fit. Validation is jsonschema's (through ``store.arg_schemas``), with dates checked.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

from jsonschema import FormatChecker

from store.arg_schemas import argument_errors

MAX_FIELDS = 25
"""Fields in one answer schema: one input block each, far below a modal's 100 blocks."""
MAX_OPTIONS = 100
"""Values of one enum: what a static select holds."""
MAX_OPTION_TEXT = 75
"""Characters of one enum value: what a select option shows (longer would be cut)."""
MAX_TEXT_LENGTH = 3000
"""The longest string a modal's text input takes."""
MAX_NAME = 100
"""Characters of a field's name."""
MAX_TITLE = 200
"""Characters of a field's title (its input's label)."""
MAX_DESCRIPTION = 500
"""Characters of a field's description (its input's hint)."""
MAX_SCHEMA_CHARS = 32_000
"""JSON characters of the whole schema, counted as the modal is sent to Slack: ASCII, a
character beyond it as its ``\\u`` escape (6 characters, 12 for an emoji). Bounds the modal
it renders below Slack's 250 kB view (each enum value becomes an option of about 50 more)."""
MAX_BOUND = 1e15
"""Largest magnitude of a number field's minimum and maximum: Slack takes them as decimal
strings, and beyond this floats print in exponent form."""

FieldKind = Literal["string", "date", "enum", "number", "integer", "boolean"]

_SCHEMA_KEYS = frozenset({"type", "properties", "required", "title", "description"})
_SCHEMA_KEYS_ALSO = frozenset({"$schema", "additionalProperties"})
_FIELD_KEYS: dict[str, frozenset[str]] = {
    "string": frozenset({"minLength", "maxLength"}),
    "date": frozenset(),
    "enum": frozenset(),
    "number": frozenset({"minimum", "maximum"}),
    "integer": frozenset({"minimum", "maximum"}),
    "boolean": frozenset(),
}
_COMMON_FIELD_KEYS = frozenset({"type", "title", "description"})
_DATES = FormatChecker(formats=("date",))


class AnswerSchemaError(ValueError):
    """An ``answer_schema`` that is not a flat object of the supported field types."""


@dataclass(frozen=True)
class AnswerField:
    """One field of a typed answer, as its modal input renders and reads it."""

    name: str
    kind: FieldKind
    required: bool
    title: str | None = None
    description: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    options: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """What the person sees the field called: its title, else its name."""
        return self.title or self.name


def answer_fields(schema: dict[str, Any]) -> list[AnswerField]:
    """The fields of ``schema`` in order, or ``AnswerSchemaError`` saying what to change.

    Example: ``answer_fields({"type": "object", "properties": {"n": {"type": "integer"}}})``
    is ``[AnswerField(name="n", kind="integer", required=False)]``.
    """
    if not isinstance(schema, dict):
        raise AnswerSchemaError("answer_schema must be a JSON object")
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise AnswerSchemaError(
            f"answer_schema is over {MAX_SCHEMA_CHARS} characters of JSON (a character "
            "beyond ASCII counts as its \\u escape: 6, or 12 for an emoji)"
        )
    unknown = set(schema) - _SCHEMA_KEYS - _SCHEMA_KEYS_ALSO
    if unknown:
        raise AnswerSchemaError(
            f"answer_schema does not take {sorted(unknown)}: only type, properties, required, "
            "title and description (a flat object)"
        )
    if schema.get("type") != "object":
        raise AnswerSchemaError('answer_schema must be {"type": "object", "properties": {...}}')
    if schema.get("additionalProperties", False) is not False:
        raise AnswerSchemaError("answer_schema takes no additionalProperties: list each field")
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise AnswerSchemaError("answer_schema needs properties: at least one field")
    if len(properties) > MAX_FIELDS:
        raise AnswerSchemaError(f"answer_schema has {len(properties)} fields; at most {MAX_FIELDS}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        raise AnswerSchemaError("answer_schema.required must be a list of field names")
    if missing := [n for n in required if n not in properties]:
        raise AnswerSchemaError(f"answer_schema.required names fields it has not: {missing}")
    return [_field(name, spec, name in required) for name, spec in properties.items()]


def answer_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be an ``answer_schema`` (None when it can)."""
    try:
        answer_fields(schema)
    except AnswerSchemaError as exc:
        return str(exc)
    return None


def single_text_field(schema: dict[str, Any]) -> str | None:
    """The field's name when ``schema`` is one plain string field (a thread reply can fill
    it in), else None."""
    fields = answer_fields(schema)
    if len(fields) == 1 and fields[0].kind == "string":
        return fields[0].name
    return None


def answer_errors(schema: dict[str, Any], data: dict[str, Any]) -> dict[str, str]:
    """What is wrong with ``data`` against ``schema``: field name to message ("" for the
    object itself); empty when it fits."""
    closed = {**schema, "additionalProperties": False}
    errors: dict[str, str] = {}
    for error in argument_errors(closed, data, format_checker=_DATES):
        if error.path:
            field = str(error.path[0])
        elif error.validator == "required":
            field = str(error.message.split("'")[1]) if "'" in error.message else ""
        else:
            field = ""
        errors.setdefault(field, error.message)
    return errors


def answer_text(schema: dict[str, Any], data: dict[str, Any]) -> str:
    """The typed answer as text, for people and for ``resume_data.answer``: the value of a
    single string field as it is, else one ``label: value`` line per field given."""
    fields = answer_fields(schema)
    if len(fields) == 1 and fields[0].kind == "string" and fields[0].name in data:
        return str(data[fields[0].name])
    lines = []
    for field in fields:
        if field.name not in data:
            continue
        value = data[field.name]
        shown = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        lines.append(f"{field.label}: {shown}")
    # Every field optional and none filled in is an answer too, and an answer has text.
    return "\n".join(lines) or "(no field filled in)"


def decimal_text(number: int | float) -> str:
    """A bound as a plain decimal string (no exponent), as Slack's number input takes it."""
    text = format(Decimal(repr(number)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _field(name: str, spec: Any, required: bool) -> AnswerField:
    where = f"answer_schema.properties.{name}"
    if not name or len(name) > MAX_NAME:
        raise AnswerSchemaError(f"field names are 1 to {MAX_NAME} characters: {name[:40]!r}")
    if not isinstance(spec, dict):
        raise AnswerSchemaError(f"{where} must be an object")
    kind = _kind(where, spec)
    unknown = set(spec) - _COMMON_FIELD_KEYS - _FIELD_KEYS[kind] - {"enum", "format"}
    if unknown:
        allowed = sorted(_COMMON_FIELD_KEYS | _FIELD_KEYS[kind])
        raise AnswerSchemaError(
            f"{where} does not take {sorted(unknown)}; a {kind} takes {allowed}"
        )
    title, description = spec.get("title"), spec.get("description")
    for key, value, limit in (
        ("title", title, MAX_TITLE),
        ("description", description, MAX_DESCRIPTION),
    ):
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            raise AnswerSchemaError(f"{where}.{key} must be text of at most {limit} characters")
    field = AnswerField(
        name=name, kind=kind, required=required, title=title, description=description
    )
    if kind == "string":
        low, high = _bound(where, spec, "minLength", int), _bound(where, spec, "maxLength", int)
        if high is not None and not 1 <= high <= MAX_TEXT_LENGTH:
            # 0 or less: no answer could ever fit (and Slack refuses such an input).
            raise AnswerSchemaError(
                f"{where}.maxLength must be 1 to {MAX_TEXT_LENGTH} (Slack's input)"
            )
        if low is not None and (low < 0 or low > (MAX_TEXT_LENGTH if high is None else high)):
            raise AnswerSchemaError(f"{where}.minLength must be 0 to maxLength")
        return replace(field, min_length=low, max_length=high)
    if kind in ("number", "integer"):
        number = int if kind == "integer" else (int, float)
        low, high = _bound(where, spec, "minimum", number), _bound(where, spec, "maximum", number)
        if low is not None and high is not None and low > high:
            raise AnswerSchemaError(f"{where}.minimum is greater than its maximum")
        return replace(field, minimum=low, maximum=high)
    if kind == "enum":
        return replace(field, options=_options(where, spec["enum"]))
    return field


def _kind(where: str, spec: dict[str, Any]) -> FieldKind:
    kind, fmt = spec.get("type"), spec.get("format")
    if "enum" in spec:
        if kind not in (None, "string") or fmt is not None:
            raise AnswerSchemaError(f"{where}: an enum is of strings, with no format")
        return "enum"
    if fmt is not None and (kind != "string" or fmt != "date"):
        raise AnswerSchemaError(f'{where}: the only format is "date", on a string')
    if kind == "string":
        return "date" if fmt == "date" else "string"
    if kind in ("number", "integer", "boolean"):
        return kind  # type: ignore[return-value]
    raise AnswerSchemaError(
        f"{where}.type must be string, number, integer or boolean (or give an enum), not {kind!r}"
    )


def _bound(where: str, spec: dict[str, Any], key: str, kind: Any) -> Any:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise AnswerSchemaError(f"{where}.{key} must be a {'whole ' if kind is int else ''}number")
    if not math.isfinite(value) or abs(value) > MAX_BOUND:
        raise AnswerSchemaError(f"{where}.{key} must be within ±{MAX_BOUND:.0f}")
    return value


def _options(where: str, values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_OPTIONS:
        raise AnswerSchemaError(f"{where}.enum must list 1 to {MAX_OPTIONS} values")
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_OPTION_TEXT for v in values):
        raise AnswerSchemaError(
            f"{where}.enum values must be strings of 1 to {MAX_OPTION_TEXT} characters"
        )
    if len(set(values)) != len(values):
        raise AnswerSchemaError(f"{where}.enum lists a value twice")
    return tuple(values)
