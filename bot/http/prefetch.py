"""The handoff a click is about, read by the request gate before the listener runs.

A click on a handoff button reads its handoff first thing. ``handoff serve``'s request gate
reads that handoff in the same Redis round trip as its replay check (see ``bot.http.checks``) and
the server puts it into the Bolt context; ``handlers.decisions.load_for`` uses it instead
of reading again. Socket Mode, and any request the gate did not read for, read as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.client import Pipeline

from store.ids import is_handoff_id, parse_decision_value
from store.repository import HandoffStore


@dataclass(frozen=True)
class PrefetchRead:
    """A read to make in the replay check's round trip: the key it reads, and how to add
    the read (one command) to a pipeline."""

    key: str
    queue: Callable[[Pipeline], None]


@dataclass(frozen=True)
class Prefetched:
    """A read made together with the replay check, for the listener to use: the key it
    read and the reply as Redis gave it."""

    key: str
    reply: Any


ReadFor = Callable[[dict[str, Any]], PrefetchRead | None]
"""The read a parsed request's listener will make first, if one is known."""


PREFETCHED_KEY = "handoff_prefetched"
"""Where the server puts the gate's ``Prefetched`` read in a request's Bolt context."""


def clicked_handoff_read(store: HandoffStore) -> ReadFor:
    """For the gate: the read of the handoff a button click names, if it names one."""

    def read_for(body: dict[str, Any]) -> PrefetchRead | None:
        if body.get("type") != "block_actions":
            return None
        actions = body.get("actions")
        if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
            return None
        value, _ = parse_decision_value(actions[0].get("value"))
        if value is None or not is_handoff_id(value):
            return None
        return PrefetchRead(
            store.keys.handoff(value), functools.partial(store.queue_read, handoff_id=value)
        )

    return read_for


def prefetched_in(context: dict[str, Any]) -> Prefetched | None:
    """What the gate read for this request, if anything."""
    prefetched = context.get(PREFETCHED_KEY)
    return prefetched if isinstance(prefetched, Prefetched) else None
