"""A run's listing says where its page lies among the run's pending handoffs (``Listing.total``
and ``offset``), whether the run keeps its one pending handoff in its bucket or a set."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis

from bot.blockkit.replies import _position
from bot.queries.listings import ListFilter, Listings, ListKind
from tests.support.listings import admin_listings
from worker.client import Handoffs

ADMIN, CHANNEL = "U0ADMIN", "C0OPS"


@pytest.fixture
def listings(redis: Redis, handoffs: Handoffs) -> Iterator[Listings]:
    with admin_listings(redis, handoffs, admin=ADMIN, channel=CHANNEL) as listings:
        yield listings


def test_a_run_with_one_pending_handoff_lists_it_as_one_of_one(
    handoffs: Handoffs, listings: Listings
) -> None:
    only = handoffs.request_approval(run_id="run-one", thread_id="t", action="ship").id
    page = listings.page(ListFilter(ListKind.RUN, "run-one"), viewer=ADMIN)
    assert [h.id for h in page.items] == [only]
    assert (page.total, page.offset) == (1, 0)
    assert _position(page) == "1 to 1 of 1 · oldest first"


def test_a_run_back_to_one_pending_handoff_counts_it(
    handoffs: Handoffs, listings: Listings
) -> None:
    first = handoffs.request_approval(run_id="run-two", thread_id="t", action="ship").id
    second = handoffs.request_approval(run_id="run-two", thread_id="t", action="ship").id
    page = listings.page(ListFilter(ListKind.RUN, "run-two"), viewer=ADMIN, limit=1)
    assert (page.total, page.offset) == (2, 0)
    later = listings.page(page.filter, viewer=ADMIN, after=page.next_cursor, limit=1)
    assert [h.id for h in later.items] == [second]
    assert (later.total, later.offset) == (2, 1)
    handoffs.cancel(first, by="U0ADMIN")
    third = handoffs.request_approval(run_id="run-two", thread_id="t", action="ship").id
    handoffs.cancel(second, by="U0ADMIN")
    page = listings.page(ListFilter(ListKind.RUN, "run-two"), viewer=ADMIN)
    assert [h.id for h in page.items] == [third]
    assert (page.total, page.offset) == (1, 0)
