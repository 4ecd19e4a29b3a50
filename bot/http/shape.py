"""What a request body from Slack must look like before Bolt and the listeners read it.

Bolt parses the body and reads fields such as ``user.id``, ``actions[0].action_id`` or
``view.type`` before any listener runs, partly outside its own error handling: a body of
the wrong shape (a list, ``"user": 5``, a view without a type) raised out of the WSGI app
and gunicorn answered 500. Slack never sends such bodies, so they are refused here with a
``MalformedRequest`` (HTTP 400) after the signature check, and listeners can rely on the
types of the fields they read.

The rules are the types Slack documents for the fields that Bolt or a listener reads; any
other field may hold anything. Example::

    body = parse_body('payload={"type": "block_actions", ...}', "application/x-www-form-urlencoded")
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from bot.http.form import parse_form
from store.decoding import well_formed
from store.exceptions import HandoffError


class MalformedRequest(HandoffError, ValueError):
    """The body is not something Slack sends; the message says which field is wrong."""


Check = Callable[[Any], bool]

MISSING: Any = object()
"""What a check is given for a field the object does not have."""


def _optional(*types: type) -> Check:
    return lambda value: value is None or value is MISSING or isinstance(value, types)


def _absent_or(*types: type) -> Check:
    """Either absent or of ``types``, never null: Bolt reads these with ``body.get(k, {})``."""
    return lambda value: value is MISSING or isinstance(value, types)


def _required(*types: type) -> Check:
    return lambda value: isinstance(value, types)


def _dicts(value: Any) -> bool:
    if value is None or value is MISSING:
        return True
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _absent_or_dicts(value: Any) -> bool:
    """Absent, or a list of objects; never null: Bolt takes ``len()`` of what is there."""
    return value is MISSING or (value is not None and _dicts(value))


def _response_urls(value: Any) -> bool:
    """Absent, or at most one object: the app's modals hold no conversation select with a
    response URL, and for more than one Bolt logs through a logger it has not set yet (a
    ``KeyError``, answered 500)."""
    return _absent_or_dicts(value) and (value is MISSING or len(value) <= 1)


def _nonempty_dicts(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and _dicts(value)


STR, DICT = _optional(str), _optional(dict)
REF = _optional(str, dict)
"""A team, enterprise, user or channel: an id, or an object with an ``id``."""

ENVELOPE: Mapping[str, Check] = {
    "type": STR,
    "team": REF,
    "enterprise": REF,
    "user": REF,
    "channel": REF,
    "team_id": STR,
    "enterprise_id": STR,
    "user_id": STR,
    "channel_id": STR,
    "thread_ts": STR,
    "response_url": STR,
    "response_urls": _response_urls,
    "authorizations": _dicts,
    "event": _absent_or(dict),
    "view": _absent_or(dict),
    "context": _absent_or(dict),
    "function": _absent_or(dict),
    "message": DICT,
    "previous_message": DICT,
    "item": DICT,
    "container": DICT,
    "state": DICT,
}
"""Fields Bolt reads from the body to build a request's context, and from the objects it
descends into the same way (``NESTED``)."""

NESTED = ("authorizations", "event", "message", "previous_message", "item")

ID_OBJECT: Mapping[str, Check] = {"id": _required(str)}

ACTION: Mapping[str, Check] = {
    "action_id": _required(str),
    "block_id": STR,
    "value": STR,
    "type": STR,
}

VIEW: Mapping[str, Check] = {
    "id": STR,
    "type": _required(str),
    "callback_id": _required(str),
    "private_metadata": STR,
    "state": DICT,
    "blocks": _dicts,
}

HANDLED_EVENTS = frozenset({"message", "app_home_opened"})
"""Event types the listeners read; other events only need what Bolt reads (``ENVELOPE``)."""

INPUT_STATE: Mapping[str, Check] = {
    "type": STR,
    "value": STR,
    "selected_option": DICT,
}
"""What the listeners read of an input's state in ``view.state.values``."""

EVENT: Mapping[str, Check] = {
    "type": _required(str),
    "subtype": STR,
    "user": STR,
    "channel": STR,
    "ts": STR,
    "thread_ts": STR,
    "event_ts": STR,
    "text": STR,
    "bot_id": STR,
    "tab": STR,
    "channel_type": STR,
}

COMMAND: Mapping[str, Check] = {
    "command": _required(str),
    "user_id": _required(str),
    "text": STR,
    "channel_id": STR,
    "response_url": STR,
    "trigger_id": STR,
}


def parse_body(text: str, content_type: str | None) -> dict[str, Any]:
    """The body, parsed as Bolt parses it and with its shape checked; raises
    ``MalformedRequest``.

    One difference from Bolt: Bolt takes any form body that merely contains the text
    "payload" for an interaction, so ``/handoff list run payload-7`` parsed as an empty body
    and got a 404. Here only a form with a ``payload`` field is an interaction.
    """
    try:
        if content_type == "application/json" or text.startswith("{"):
            body = json.loads(text)
        else:
            fields = dict(parse_form(text))
            body = json.loads(fields["payload"]) if "payload" in fields else fields
    except (ValueError, RecursionError) as exc:
        raise MalformedRequest("the body is not valid JSON or form data") from exc
    if not isinstance(body, dict):
        raise MalformedRequest("the body is not an object")
    # JSON may hold half a UTF-16 pair ("\\ud83d": an emoji cut in two in typed text, or a
    # forged id); replaced here, nothing downstream (Redis, JSON) fails writing it.
    body = well_formed(body)
    problem = shape_problem(body)
    if problem:
        raise MalformedRequest(problem)
    return body


def shape_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a parsed body, or None if nothing is."""
    problem = _envelope_problem(body, "", depth=0)
    if problem:
        return problem
    kind = body.get("type")
    if kind == "block_actions":
        return _block_actions_problem(body)
    if kind in ("view_submission", "view_closed"):
        return _fields_problem(body, {"user": _required(dict)}) or _view_problem(body)
    if kind == "event_callback":
        return _fields_problem(body, {"event_id": _required(str), "event": _required(dict)}) or (
            _event_problem(body["event"])
        )
    if "command" in body:
        return _fields_problem(body, COMMAND, "")
    return None


def _envelope_problem(obj: dict[str, Any], where: str, *, depth: int) -> str | None:
    problem = _fields_problem(obj, ENVELOPE, where)
    if problem or depth >= 3:
        return problem
    for name in NESTED:
        value = obj.get(name)
        for index, nested in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(nested, dict):
                path = f"{where}{name}[{index}]." if isinstance(value, list) else f"{where}{name}."
                problem = _envelope_problem(nested, path, depth=depth + 1)
                if problem:
                    return problem
    return None


def _block_actions_problem(body: dict[str, Any]) -> str | None:
    problem = _fields_problem(
        body, {"user": _required(dict), "actions": _nonempty_dicts, "trigger_id": _required(str)}
    )
    if problem:
        return problem
    problem = _fields_problem(body["user"], ID_OBJECT, "user.")
    for index, action in enumerate(body["actions"]):
        problem = problem or _fields_problem(action, ACTION, f"actions[{index}].")
    container, view = body.get("container") or {}, body.get("view") or {}
    problem = problem or _fields_problem(
        container, {"type": STR, "channel_id": STR, "message_ts": STR}, "container."
    )
    return problem or _fields_problem(view, {"type": STR, "id": STR}, "view.")


def _view_problem(body: dict[str, Any]) -> str | None:
    problem = _fields_problem(body["user"], ID_OBJECT, "user.") or _fields_problem(
        body, {"view": _required(dict)}
    )
    if problem:
        return problem
    view = body["view"]
    problem = _fields_problem(view, VIEW, "view.")
    if problem:
        return problem
    values = (view.get("state") or {}).get("values")
    if values is None:
        return None
    if not isinstance(values, dict):
        return "view.state.values is not an object"
    for block_id, actions in values.items():
        if not isinstance(actions, dict):
            return f"view.state.values.{block_id} is not an object"
        for action_id, state in actions.items():
            where = f"view.state.values.{block_id}.{action_id}."
            if not isinstance(state, dict):
                return f"{where[:-1]} is not an object"
            problem = _fields_problem(state, INPUT_STATE, where) or _fields_problem(
                state.get("selected_option") or {}, {"value": STR}, f"{where}selected_option."
            )
            if problem:
                return problem
    return None


def _event_problem(event: dict[str, Any]) -> str | None:
    if not isinstance(event.get("type"), str):
        return "event.type has the wrong type"
    if event["type"] not in HANDLED_EVENTS:
        return None
    problem = _fields_problem(event, EVENT, "event.")
    if problem:
        return problem
    if event["type"] == "app_home_opened" and not isinstance(event.get("user"), str):
        return "event.user is missing"
    return None


def _fields_problem(obj: dict[str, Any], rules: Mapping[str, Check], where: str = "") -> str | None:
    for name, check in rules.items():
        value = obj.get(name, MISSING)
        if not check(value):
            return f"{where}{name} {'is missing' if value is MISSING else 'has the wrong type'}"
    return None
