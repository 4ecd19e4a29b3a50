"""Pages of pending handoffs for the slash command and the App Home: oldest first, both ways.

A listing reads the store's pending indexes (sorted sets of ids, all scored 0) by id range
with ZRANGE BYLEX. Ids are ULIDs, so id order is age order, and a page costs a few round
trips however many handoffs are pending. Cursors are ids: ``after=X`` is the next page,
``before=X`` the previous one.

A viewer's own queue ("mine") is the union of several indexes: their reviewer index, those
of the user groups they belong to, and the handoffs that name no reviewers when they may
decide those (they are among ``HANDOFF_DEFAULT_REVIEWERS``, or that is unset and
``HANDOFF_ALLOW_ANY_CHANNEL_MEMBER`` lets the members of a handoff's channel decide it: then
only the handoffs of their channels are kept); for an admin who
may decide anything (``AdminPolicy.may_decide_anything``), every pending handoff. A viewer's
user groups come from the cache the permission check uses (``bot.access.usergroups``). The
indexes are merged by id, each read only as far as the page needs, and
``ReviewerPolicy.denial`` has the last word on every item.

The store keeps no index of handoffs without reviewers: ``bot.queries.unassigned`` keeps one,
brought up to date before each read of a queue.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from bot.access.reviewers import ReviewerPolicy
from bot.keys import BotKeys
from bot.queries.unassigned import UnassignedIndex
from store.models import Handoff, RequestType
from store.repository import HandoffStore

PAGE_SIZE = 20
"""Handoffs on one page of ``/handoff list``."""

MAX_ROUNDS = 5
"""Index reads one page may take when most candidates are filtered out (e.g. a viewer's own
requests); past it the page comes back short, with a cursor to continue from."""


class ListKind(StrEnum):
    """Which handoffs a listing selects: pending ones, or (``FAILED``) those with a task
    that gave up, whatever their status."""

    PENDING = "pending"
    MINE = "mine"
    CHANNEL = "channel"
    RUN = "run"
    TYPE = "type"
    FAILED = "failed"


@dataclass(frozen=True)
class ListFilter:
    """A listing's selection: a kind and, for channel, run and type, its value.

    Example: ``ListFilter(ListKind.RUN, "run-42")``.
    """

    kind: ListKind
    value: str = ""

    def __post_init__(self) -> None:
        needs_value = self.kind in (ListKind.CHANNEL, ListKind.RUN, ListKind.TYPE)
        if needs_value != bool(self.value):
            article = "a" if needs_value else "no"
            raise ValueError(f"a {self.kind.value} listing takes {article} value")
        if self.kind is ListKind.TYPE:
            RequestType(self.value)  # raises ValueError for an unknown type


@dataclass(frozen=True)
class Listing:
    """One page: its handoffs and the cursors to the pages around it.

    ``total`` and ``offset`` (handoffs before this page) are known for single-index listings,
    None for a viewer's queue, which is a union.
    """

    filter: ListFilter
    items: list[Handoff]
    prev_cursor: str | None = None
    next_cursor: str | None = None
    total: int | None = None
    offset: int | None = None


class _Source(Protocol):
    def fetch(
        self, cursor: str | None, *, forward: bool, want: int
    ) -> tuple[list[str], str | None]:
        """Up to ``want`` ids beyond ``cursor`` in the direction, and how far they reach:
        every id of the source between ``cursor`` and that bound is among them. The bound is
        None when the source has nothing further."""
        ...


@dataclass(frozen=True)
class _IndexSource:
    """A sorted set of pending ids, known only up to ``ceiling`` when one is given."""

    store: HandoffStore
    key: str
    ceiling: str | None = None

    def fetch(
        self, cursor: str | None, *, forward: bool, want: int
    ) -> tuple[list[str], str | None]:
        top = f"[{self.ceiling}" if self.ceiling else "+"
        if forward:
            low = f"({cursor}" if cursor else "-"
            ids = self.store.index_range(self.key, low, top, want)
        else:
            high = f"({cursor}" if cursor else "+"
            if self.ceiling and (cursor is None or cursor > self.ceiling):
                high = top
            ids = self.store.index_range(self.key, high, "-", want, desc=True)
        if len(ids) == want:
            return ids, ids[-1]
        # Past the ceiling lie pending ids not sorted yet: not "nothing further".
        return ids, self.ceiling if forward else None


def merge(
    sources: Sequence[_Source], cursor: str | None, *, forward: bool, want: int
) -> tuple[list[str], str | None]:
    """The ids of all ``sources`` beyond ``cursor``, deduplicated and in order, as far as the
    nearest source bound (returned too; None when every source is exhausted).

    Stopping at the nearest bound is what makes the union exact: beyond it, a source that was
    not read far enough could still hold ids that sort before the others'.
    """
    fetched = [source.fetch(cursor, forward=forward, want=want) for source in sources]
    bounds = [bound for _, bound in fetched if bound is not None]
    nearest = min if forward else max
    bound = nearest(bounds) if bounds else None
    ids = {
        handoff_id
        for got, _ in fetched
        for handoff_id in got
        if bound is None or (handoff_id <= bound if forward else handoff_id >= bound)
    }
    return sorted(ids, reverse=not forward), bound


class Listings:
    """Reads pages of pending handoffs for a viewer.

    Example::

        listings = Listings(store, reviewers)
        page = listings.page(ListFilter(ListKind.MINE), viewer="U0ALICE")
        older = listings.page(page.filter, viewer="U0ALICE", after=page.next_cursor)
    """

    def __init__(self, store: HandoffStore, reviewers: ReviewerPolicy) -> None:
        self.store = store
        self.reviewers = reviewers
        self.keys = BotKeys(store.keys)
        self.unassigned = UnassignedIndex(store)

    def page(
        self,
        listing: ListFilter,
        *,
        viewer: str,
        after: str | None = None,
        before: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> Listing:
        """The page after ``after``, before ``before``, or the first page."""
        if listing.kind is ListKind.FAILED:
            return self._failed_page(listing, after=after, before=before, limit=limit)
        if listing.kind is ListKind.MINE:
            sources, accept = self._queue_of(viewer)
        else:
            keys = self._index_keys(listing)
            sources, accept = [_IndexSource(self.store, key) for key in keys], None
        if before is not None:
            page = self._collect(listing, sources, accept, before, forward=False, limit=limit)
            if not page.items:  # everything before it was decided meanwhile: start over
                page = self._collect(listing, sources, accept, None, forward=True, limit=limit)
        else:
            page = self._collect(listing, sources, accept, after, forward=True, limit=limit)
        if listing.kind is not ListKind.MINE:
            page = self._with_position(page, self._index_keys(listing))
        return page

    def queue(self, viewer: str, *, limit: int = PAGE_SIZE) -> Listing:
        """The first page of the handoffs ``viewer`` may decide, oldest first."""
        return self.page(ListFilter(ListKind.MINE), viewer=viewer, limit=limit)

    # -- sources ------------------------------------------------------------------------

    def _index_keys(self, listing: ListFilter) -> list[str]:
        """The indexes a listing reads: one, or for every pending handoff the type indexes,
        which hold each once (``HandoffStore.type_indexes``)."""
        keys = self.store.keys
        if listing.kind is ListKind.CHANNEL:
            return [keys.pending_by_channel(listing.value)]
        if listing.kind is ListKind.RUN:
            return [keys.pending_by_run(listing.value)]
        if listing.kind is ListKind.TYPE:
            return [keys.pending_by_type(listing.value)]
        return self.store.type_indexes

    def _queue_of(self, viewer: str) -> tuple[list[_Source], Callable[[Handoff], bool]]:
        def may_decide(handoff: Handoff) -> bool:
            return self.reviewers.denial(viewer, handoff) is None

        if self.reviewers.admins.may_decide_anything(viewer):
            return [_IndexSource(self.store, k) for k in self.store.type_indexes], may_decide
        # The same user-group snapshot as the permission check (``ReviewerPolicy.denial``).
        groups = self.reviewers.usergroups.groups_of(viewer)
        sources: list[_Source] = [
            _IndexSource(self.store, self.store.keys.pending_by_reviewer(reviewer))
            for reviewer in [viewer, *groups]
        ]
        defaults = self.reviewers.default_reviewers
        # Handoffs naming no reviewers are the default reviewers', or (when allowed) those of
        # the members of their channel: ``may_decide`` keeps only the viewer's channels.
        if (
            viewer in defaults
            or any(group in defaults for group in groups)
            or (not defaults and self.reviewers.allow_any_channel_member)
        ):
            ceiling = self.unassigned.refresh()
            sources.append(_IndexSource(self.store, self.unassigned.key, ceiling=ceiling))
        return sources, may_decide

    # -- paging -------------------------------------------------------------------------

    def _collect(
        self,
        listing: ListFilter,
        sources: Sequence[_Source],
        accept: Callable[[Handoff], bool] | None,
        cursor: str | None,
        *,
        forward: bool,
        limit: int,
    ) -> Listing:
        found: list[Handoff] = []
        position = cursor
        exhausted = False
        for _ in range(MAX_ROUNDS):
            ids, bound = merge(sources, position, forward=forward, want=limit + 1)
            found.extend(self._pending_among(ids, accept))
            if bound is None:
                exhausted = True
                break
            if position is not None and (bound <= position if forward else bound >= position):
                break  # a source not sorted that far yet: continue on a later read
            position = bound
            if len(found) > limit:
                break
        shown = found[:limit]
        more = len(found) > limit or not exhausted
        beyond = (shown[-1].id if len(found) > limit else position) if more else None
        if forward:
            return Listing(
                listing,
                shown,
                prev_cursor=shown[0].id if cursor is not None and shown else None,
                next_cursor=beyond,
            )
        shown.reverse()
        return Listing(
            listing, shown, prev_cursor=beyond, next_cursor=shown[-1].id if shown else None
        )

    def _pending_among(
        self, ids: list[str], accept: Callable[[Handoff], bool] | None
    ) -> list[Handoff]:
        if not ids:
            return []
        loaded = self.store.get_many(ids)
        gone = set(ids) - {h.id for h in loaded if h.is_pending}
        if gone:
            # Decided since it was indexed (or since the index was read): the store has
            # already dropped it from its indexes; drop it from ours.
            self.store.redis.zrem(self.unassigned.key, *gone)
        return [h for h in loaded if h.is_pending and (accept is None or accept(h))]

    def _failed_page(
        self, listing: ListFilter, *, after: str | None, before: str | None, limit: int
    ) -> Listing:
        ids = self.store.failed_handoff_ids()
        if before is not None:
            end = bisect.bisect_left(ids, before)
            start = max(0, end - limit)
            if start == end:  # everything before it was retried meanwhile: start over
                start, end = 0, min(limit, len(ids))
        else:
            start = bisect.bisect_right(ids, after) if after is not None else 0
            end = min(start + limit, len(ids))
        shown = self.store.get_many(ids[start:end])
        return Listing(
            listing,
            shown,
            prev_cursor=ids[start] if start > 0 else None,
            next_cursor=ids[end - 1] if end < len(ids) else None,
            total=len(ids),
            offset=start,
        )

    def _with_position(self, page: Listing, keys: list[str]) -> Listing:
        """The page with its total and offset, summed over ``keys`` (indexes that hold each
        handoff at most once between them)."""
        first = page.items[0].id if page.items else None
        total, offset = self.store.index_positions(keys, first)
        return Listing(
            page.filter,
            page.items,
            # Exact here: an index says whether anything sorts before this page.
            prev_cursor=page.items[0].id if page.items and offset > 0 else None,
            next_cursor=page.next_cursor,
            total=total,
            offset=offset,
        )
