"""The bot's index of pending handoffs that name no reviewers.

A viewer's queue includes the handoffs anyone may decide, but the store keeps no index of
them: this module keeps one (``BotKeys.unassigned``, a sorted set of ids scored 0 like the
store's indexes). It is a cache, safe to delete, and is brought up to date by each read:

1. Once, the store's index of all pending handoffs is walked (``WALK_BUDGET`` ids per read,
   so a large backlog is worked off over several reads without stalling one); until the walk
   ends, the index is only complete up to the last id walked (its *ceiling*).
2. From then on (and from the moment the walk started), the ``created`` and ``reassigned``
   events of the store's audit stream are applied: the stream is in arrival order, so a
   handoff whose id sorts early (an agent host with a slow clock) is not missed.

Handoffs decided, cancelled or expired since they were added are dropped when their event is
applied (and by the readers that find them decided before that).
The dispatcher trims the stream to the retention period: if nothing read the index for half
of it, events may be lost, so the index starts over (its read position expires).
"""

from __future__ import annotations

import json
from typing import Any

from bot.keys import BotKeys
from store.decoding import as_text
from store.keys import KeySpace, body_fields, stored_index_keys
from store.repository import HandoffStore

WALK_BUDGET = 10_000
"""Most pending ids one read walks while building the index."""

STREAM_BUDGET = 10_000
"""Most audit events one read applies; more wait for the next read."""

BATCH = 1000
"""Ids or events per round trip."""

_DONE = "done"
_ADDS = ("created", "reassigned")
"""Events after which a handoff may have joined the index (or left it: a reassignment)."""
_CLOSES = ("decided", "cancelled", "expired", "undeliverable")
"""Events after which a handoff is no longer pending: it leaves the index at once, rather
than when a reader pages past it (a handoff nobody pages to would stay forever)."""
_EVENTS = tuple(f'"{name}"'.encode() for name in (*_ADDS, *_CLOSES))


class UnassignedIndex:
    """Keeps ``BotKeys.unassigned`` up to date; see the module docstring.

    Example::

        index = UnassignedIndex(store)
        ceiling = index.refresh()   # None once the index is complete
    """

    def __init__(self, store: HandoffStore) -> None:
        self.store = store
        self.keys = BotKeys(store.keys)

    @property
    def key(self) -> str:
        """The sorted set of ids."""
        return self.keys.unassigned

    def is_complete(self) -> bool:
        """True once the first walk is done (from then on, reads only apply new events)."""
        return self.store.redis.get(self.keys.unassigned_walk) == _DONE.encode()

    def refresh(self, *, walk_budget: int | None = None) -> str | None:
        """Bring the index up to date; returns its ceiling while the first walk is not done
        (ids above it may be missing), else None. Walks at least one batch."""
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.mget(self.keys.unassigned_walk, self.keys.unassigned_read)
        pipe.expire(self.keys.unassigned_read, self._read_ttl)
        found: list[Any] = pipe.execute()[0]
        walked, read = (as_text(v) if v is not None else None for v in found)
        if read is None:
            read = self._start_over()
            walked = None
        self._apply_events(read)
        if walked == _DONE:
            return None
        return self._walk(walked, walk_budget or WALK_BUDGET)

    @property
    def _read_ttl(self) -> int:
        return max(60, int(self.store.config.retention_seconds / 2))

    def _start_over(self) -> str:
        # Remember where the stream is *before* walking, so nothing created meanwhile is lost.
        read = self.store.audit_position()
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.delete(self.key, self.keys.unassigned_walk)
        pipe.set(self.keys.unassigned_read, read, ex=self._read_ttl)
        pipe.execute()
        return read

    def _apply_events(self, read: str) -> None:
        for page in self.store.audit_pages(after=read, limit=STREAM_BUDGET, batch=BATCH):
            touched: list[str] = []
            for entry in page:
                # Only these change whether a handoff is pending and names no reviewers.
                if any(name in entry.raw for name in _EVENTS):
                    event = json.loads(entry.raw)
                    if event.get("event") in (*_ADDS, *_CLOSES):
                        touched.append(str(event["handoff_id"]))
            self._sort(touched, also_remove=True, read=page[-1].id)

    def _walk(self, walked: str | None, budget: int) -> str | None:
        examined = 0
        while True:
            ids = self.store.pending_ids(walked, limit=BATCH)
            if len(ids) < BATCH:
                self._sort(ids, walked=_DONE)
                return None
            walked = ids[-1]
            self._sort(ids, walked=walked)
            examined += len(ids)
            if examined >= budget:
                return walked

    def _sort(
        self,
        ids: list[str],
        *,
        also_remove: bool = False,
        walked: str | None = None,
        read: str | None = None,
    ) -> None:
        """Add the pending ones among ``ids`` that name no reviewers (and, with
        ``also_remove``, drop the others), and record the progress, in one pipeline."""
        states: list[Any] = []
        if ids:
            pipe = self.store.redis.pipeline(transaction=False)
            for handoff_id in ids:
                # The hash's status and its list of pending indexes (kept by the store's
                # scripts): a handoff naming reviewers is in a reviewer index. Much cheaper
                # than reading and parsing the whole handoff.
                pipe.hmget(self.store.keys.handoff(handoff_id), "status", "indexes")
                # Handoffs keep their index list in their body; those written before the
                # body existed, in the hash itself (see store.keys).
                pipe.get(self.store.keys.handoff_body(handoff_id))
            replies = pipe.execute()
            states = [
                (status, _names_reviewers(self.store.keys, in_hash, body))
                for (status, in_hash), body in zip(replies[::2], replies[1::2], strict=True)
            ]
        add: list[str] = []
        drop: list[str] = []
        for handoff_id, (status, names_reviewers) in zip(ids, states, strict=True):
            unassigned = status == b"pending" and names_reviewers is False
            (add if unassigned else drop).append(handoff_id)
        pipe = self.store.redis.pipeline(transaction=False)
        if add:
            pipe.zadd(self.key, dict.fromkeys(add, 0))
        if drop and also_remove:
            pipe.zrem(self.key, *drop)
        if walked is not None:
            pipe.set(self.keys.unassigned_walk, walked)
        if read is not None:
            pipe.set(self.keys.unassigned_read, read, ex=self._read_ttl)
        pipe.execute()


def _names_reviewers(keys: KeySpace, in_hash: bytes | None, body: bytes | None) -> bool | None:
    """Whether a handoff is in a reviewer index, from its stored index list (in its hash,
    written before the body, or its body), else from its request's reviewers, which is where
    the store's scripts find the index keys of a handoff that lists none (``CREATE``); None
    for a handoff with neither (gone)."""
    fields = body_fields(body)
    indexes = in_hash if in_hash is not None else fields.get("indexes")
    if indexes is not None:
        reviewer_index = keys.pending_by_reviewer("")
        return any(key.startswith(reviewer_index) for key in stored_index_keys(keys, indexes))
    request = fields.get("request")
    if request is None:
        return None
    return bool(json.loads(request).get("reviewers"))
