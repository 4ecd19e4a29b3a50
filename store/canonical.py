"""Canonical JSON (RFC 8785, by the ``rfc8785`` package) and the digest of an action.

An approval is bound to what the people saw: the SHA-256 of the canonical JSON of the action's
name and arguments (``action_digest``). The decision records the digest of what was
approved; whoever executes the action recomputes it from what they are about to run and
refuses on a mismatch (``check_approved_action``). Webhook receivers and agents can do the
same from ``resume_data.action_digest``.

RFC 8785 has no form for integers outside +-(2**53 - 1) (they are no IEEE doubles, and JSON
parsers in other languages round them); such an integer is canonicalized as ``{"integer":
"<decimal digits>"}``, so that arguments holding one can still be bound. So that no two
different arguments share a form (a digest names exactly one set of arguments), an object of
the arguments that could be mistaken for that form, one whose only key is ``integer`` or
``object``, is canonicalized wrapped as ``{"object": {...}}``: every other value keeps its
plain RFC 8785 form, so the digests of ordinary arguments are those of plain RFC 8785.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

_MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer RFC 8785 writes (an IEEE double holds every integer up to it)."""
_ESCAPED_KEYS = ({"integer"}, {"object"})
"""Key sets of objects that look like the wrapped forms, and so are wrapped themselves."""


def json_safe_integers(value: Any) -> Any:
    """``value`` with every integer outside +-(2**53 - 1) as ``{"integer": "<digits>"}``,
    and every object whose only key is ``integer`` or ``object`` as ``{"object": {...}}``
    (so the mapping back is unambiguous)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > _MAX_SAFE_INTEGER:
        return {"integer": str(value)}
    if isinstance(value, dict):
        converted = {k: json_safe_integers(v) for k, v in value.items()}
        return {"object": converted} if set(converted) in _ESCAPED_KEYS else converted
    if isinstance(value, list | tuple):
        return [json_safe_integers(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """``value``'s RFC 8785 canonical form (wide integers and look-alikes as above)."""
    return bytes(rfc8785.dumps(json_safe_integers(value)))


def action_digest(name: str, args: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``{"name": name, "args": args}``."""
    canonical = canonical_json({"name": name, "args": args})
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def stored_digest(digest: str) -> str:
    """An action digest as a handoff's body keeps it from its creation: the first 128 bits
    (32 hex digits) without the ``sha256:`` prefix, 39 bytes less of every waiting approval.
    It guards the stored arguments against a change before the decision, for which 128 bits
    are as far out of reach as 256 (a second preimage); the scripts compare a whole digest
    with it (``digest_matches`` in ``store.scripts``)."""
    return digest.removeprefix("sha256:")[:32]
