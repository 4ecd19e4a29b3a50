"""JSON schemas of an approval's arguments (``args_schema``): checked once when the handoff
is created, and used to check a reviewer's edited arguments (in Slack's edit modal and the
HTTP API's decision), safely.

A schema comes from the agent, so it is untrusted input to the process that applies it:

- ``$ref`` may point only inside the schema (``#...``): jsonschema would otherwise fetch a
  remote or ``file:`` URL with ``urlopen`` while validating, from inside the deployment's
  network. Validation runs with an empty ``referencing`` registry that retrieves nothing.
- ``pattern`` and ``patternProperties`` run with the ``regex`` package and a time limit
  (``PATTERN_SECONDS``): Python's ``re`` has none, and one catastrophic pattern would hold
  the process (and, through the GIL, every other request in it) for minutes.
- Every keyword applied counts against a budget (``MAX_STEPS``): a schema whose ``$ref``s
  branch (``anyOf`` of two refs to the next level, twenty levels deep) would otherwise take
  2^20 steps; past the budget the edit is refused as "too costly to check".
  ``uniqueItems`` is checked in linear time (jsonschema compares unhashable items pairwise).
- The schema itself must be a valid Draft 2020-12 schema.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import jsonschema
import regex
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable

PATTERN_SECONDS = 0.05
"""Longest a schema's pattern may take on one value."""
MAX_STEPS = 20_000
"""Keywords applied in one check of edited arguments: far more than any argument schema
needs (a few per property), and a few tens of milliseconds at most."""

_steps: ContextVar[list[int]] = ContextVar("arg_schema_steps")


class _TooCostly(Exception):
    pass


class _PatternFailed(Exception):
    """A pattern that cannot be applied in time (or at all); becomes a validation error."""


def _search(pattern: str, value: str) -> bool:
    try:
        return regex.search(pattern, value, timeout=PATTERN_SECONDS) is not None
    except TimeoutError:
        raise _PatternFailed(
            f"the pattern {pattern!r} took too long on this value; simplify the schema"
        ) from None
    except regex.error as exc:
        raise _PatternFailed(f"the pattern {pattern!r} is not a valid regex ({exc})") from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not isinstance(instance, str):
        return
    try:
        matched = _search(pattern, instance)
    except _PatternFailed as exc:
        yield ValidationError(str(exc))
        return
    if not matched:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            try:
                matched = _search(pattern, name)
            except _PatternFailed as exc:
                yield ValidationError(str(exc))
                return
            if matched:
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _unique_items(
    validator: Any, unique: bool, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not unique or not isinstance(instance, list):
        return
    seen: set[str] = set()
    for item in instance:
        # JSON equality: 1 and 1.0 are one number, true is not 1.
        key = json.dumps(_normal(item), sort_keys=True)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _normal(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _counted(keyword: Any) -> Any:
    def step(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _steps.get(None)
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise _TooCostly
        return keyword(validator, value, instance, schema)

    return step


_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "uniqueItems": _unique_items,
}
_Validator = jsonschema.validators.extend(
    Draft202012Validator, {name: _counted(function) for name, function in _KEYWORDS.items()}
)
_NO_RETRIEVAL: Registry[Any] = Registry()
"""An empty registry without a ``retrieve``: a ``$ref`` it does not hold fails, unfetched."""


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("$ref", "$dynamicRef") and isinstance(item, str):
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be an ``args_schema`` (None when it can)."""
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return _schema_problem(schema)  # not JSON: no cache key; checked (and refused) anyway
    return _cached_schema_problem(text)


@functools.lru_cache(maxsize=256)
def _cached_schema_problem(text: str) -> str | None:
    # An agent sends the same tool schema with every approval: checking a schema against the
    # metaschema was most of the cost of creating one (4.4 ms of CPU in a 6 ms create,
    # bench/agent_framework_resume.py), the same answer each time.
    return _schema_problem(json.loads(text))


def _schema_problem(schema: dict[str, Any]) -> str | None:
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return (
                f"args_schema refers to {ref!r}: only references inside the schema (#/...) "
                "are allowed, nothing is fetched"
            )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"args_schema is not a valid JSON schema: {exc.message}"
    return None


def validator_for(schema: dict[str, Any], *, format_checker: FormatChecker | None = None) -> Any:
    """A validator of arguments against ``schema`` (already checked by ``schema_problem``);
    ``format`` is checked only with a ``format_checker`` (JSON Schema makes it a note)."""
    return _Validator(schema, registry=_NO_RETRIEVAL, format_checker=format_checker)


def argument_errors(
    schema: dict[str, Any], args: dict[str, Any], *, format_checker: FormatChecker | None = None
) -> list[ValidationError]:
    """What is wrong with ``args`` against ``schema``; a reference the schema cannot resolve
    is an error about the schema, never a fetch."""
    token = _steps.set([MAX_STEPS])
    try:
        return list(validator_for(schema, format_checker=format_checker).iter_errors(args))
    except Unresolvable as exc:
        return [ValidationError(f"args_schema cannot be applied: {exc}")]
    except _TooCostly:
        return [
            ValidationError(
                "args_schema is too costly to check these arguments against (over "
                f"{MAX_STEPS} steps); the agent should simplify it"
            )
        ]
    finally:
        _steps.reset(token)
