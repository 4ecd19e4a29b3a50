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
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value
    if isinstance(value, dict):
        cleaned = {well_formed(k): well_formed(v) for k, v in value.items()}
        if list(cleaned) != list(value):  # a key changed (two may have become one)
            return cleaned
        same = all(a is b for a, b in zip(value.values(), cleaned.values(), strict=True))
        return value if same else cleaned
    if isinstance(value, list):
        items = [well_formed(v) for v in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else items
    return value


MAX_JSON_DEPTH = 32
"""How deep a request's JSON may nest (args, metadata): far more than data needs, far less
than what overflows the encoders."""


def json_value_problem(value: Any, *, depth: int = 0, where: str = "") -> str | None:
    """Why ``value`` (JSON as parsed) cannot be stored as it is: a NaN or an infinity, or
    nesting deeper than ``MAX_JSON_DEPTH``; None when it can."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return f"{where or 'value'}: {value} is not a JSON number (use a finite number or a string)"
    if isinstance(value, dict | list):
        if depth >= MAX_JSON_DEPTH:
            return f"{where or 'value'}: nested deeper than {MAX_JSON_DEPTH} levels"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            inner = f"{where}.{key}" if where else str(key)
            if problem := json_value_problem(item, depth=depth + 1, where=inner):
                return problem
    return None
