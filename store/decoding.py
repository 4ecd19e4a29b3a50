"""Text in and out of the store: Redis replies as text, and text that can be stored.

The store's clients are made without ``decode_responses`` (RQ needs bytes), so every reply
arrives as ``bytes``; this is the one place that turns one into ``str``.
"""

from __future__ import annotations

import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 pair: JSON may carry one (``"\\ud83d"``, an emoji cut in two), Python
decodes it, and no UTF-8 encoder writes it."""


def as_text(value: Any) -> str:
    """A Redis reply (``bytes``, or a ``str`` from a decoding client) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def well_formed(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (dict keys too) replaced by U+FFFD.

    Text a person typed or an agent sent arrives parsed from JSON, which may hold lone
    surrogates; storing it would fail deep in serialization (a 500, a lost answer). The
    models that take such text (requests, decisions) pass their input through here, so it
    is stored as the replacement character instead. Returns ``value`` itself when nothing
    needs replacing.
    """
    # Almost nothing holds one: a look first, which builds nothing (every creation passes
    # its whole request through here), then the copy only where one was found.
    return _cleaned(value) if _holds_lone_surrogate(value) else value


def _holds_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _LONE_SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_holds_lone_surrogate(k) or _holds_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_lone_surrogate(v) for v in value)
    return False


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return value


MAX_JSON_DEPTH = 32
"""How deep a request's JSON may nest (args, metadata): far more than data needs, far less
than what overflows the encoders."""


def json_value_problem(value: Any, *, depth: int = 0, where: str = "") -> str | None:
    """Why ``value`` (JSON as parsed) cannot be stored as it is: a NaN or an infinity, or
    nesting deeper than ``MAX_JSON_DEPTH``; None when it can. ``where`` names ``value`` in
    the message (``depth``: how deep it already is)."""
    found = _problem_at(value, depth)
    if found is None:
        return None
    path, problem = found
    named = ".".join([where, *reversed(path)] if where else reversed(path))
    return f"{named or 'value'}: {problem}"


def _problem_at(value: Any, depth: int) -> tuple[list[str], str] | None:
    """The first problem under ``value``: the keys leading to it, innermost first, and what
    it is. Names are built only for a problem found (every creation walks its request)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return [], f"{value} is not a JSON number (use a finite number or a string)"
    if isinstance(value, dict | list):
        if depth >= MAX_JSON_DEPTH:
            return [], f"nested deeper than {MAX_JSON_DEPTH} levels"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(item, dict | list | float) and (found := _problem_at(item, depth + 1)):
                found[0].append(str(key))
                return found
    return None
