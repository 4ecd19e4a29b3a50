"""The handoff a click is about, read by the request gate before the listener runs.

A click on a handoff button reads its handoff first thing. ``handoff serve``'s request gate
reads that hash in the same Redis round trip as its replay check (see ``bot.gate``) and
the server puts it into the Bolt context; ``handlers.decisions.load_for`` uses it instead
of reading again. Socket Mode, and any request the gate did not read for, read as before.
"""

from __future__ import annotations

from typing import Any

from bot.gate import HashToRead, Prefetched
from store.ids import is_handoff_id
from store.keys import KeySpace

PREFETCHED_KEY = "handoff_prefetched"
"""Where the server puts the gate's ``Prefetched`` read in a request's Bolt context."""


def clicked_handoff_hash(keys: KeySpace) -> HashToRead:
    """For the gate: the hash of the handoff a button click names, if it names one."""

    def hash_key(body: dict[str, Any]) -> str | None:
        if body.get("type") != "block_actions":
            return None
        actions = body.get("actions")
        if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
            return None
        value = actions[0].get("value")
        return keys.handoff(value) if isinstance(value, str) and is_handoff_id(value) else None

    return hash_key


def prefetched_in(context: dict[str, Any]) -> Prefetched | None:
    """What the gate read for this request, if anything."""
    prefetched = context.get(PREFETCHED_KEY)
    return prefetched if isinstance(prefetched, Prefetched) else None
