"""A run's pending index, however it is kept (a field of its bucket for one handoff, a sorted
set from two on, a 0.2 set without a field), against a model: after every step of a random
mix of creates, decisions, cancels, expiries and reassignments over runs with odd ids (and
runs the previous release indexed), every listing of every run, forward and backward, a
page at a time, and its count and position show exactly the run's pending handoffs; at the
end nothing is left indexed."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from redis import Redis

from bot.queries.listings import ListFilter, Listings, ListKind
from store.models import Status
from tests.support.indexes import anything_pending
from tests.support.listings import admin_listings
from tests.test_storage_compact import write_previous_shape
from worker.client import Handoffs

ADMIN, CHANNEL = "U0ADMIN", "C0OPS"
RUNS = [
    "plain",
    "with space and: colon",
    "*",
    "run:*",
    "ünïcödé 😀 run",
    "x" * 256,
    "é" * 256,
    "tab\tnew\nline",
    "pending:run:nested",
    "(run",
    "[run",
    "-",
    "+",
]


@pytest.fixture
def listings(redis: Redis, handoffs: Handoffs) -> Iterator[Listings]:
    with admin_listings(redis, handoffs, admin=ADMIN, channel=CHANNEL) as listings:
        yield listings


def _check(handoffs: Handoffs, listings: Listings, model: dict[str, set[str]]) -> None:
    store = handoffs.store
    for run, pending in model.items():
        expected = sorted(pending)
        index = store.keys.pending_by_run(run)
        assert store.count_pending(index) == len(expected), run
        for limit in (1, 2, 5):
            seen: list[str] = []
            cursor = None
            while True:
                page = handoffs.list_pending(run_id=run, cursor=cursor, limit=limit)
                seen.extend(h.id for h in page.items)
                assert all(h.is_pending and h.run_id == run for h in page.items)
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert seen == expected, (run, limit)
        # The bot's listing, forward then backward from the end.
        run_filter = ListFilter(ListKind.RUN, run)
        pages = [listings.page(run_filter, viewer=ADMIN, limit=2)]
        while pages[-1].next_cursor:
            pages.append(
                listings.page(run_filter, viewer=ADMIN, after=pages[-1].next_cursor, limit=2)
            )
        assert [h.id for p in pages for h in p.items] == expected, run
        assert pages[0].total == len(expected), run
        back = [pages[-1]]
        while back[-1].prev_cursor:
            back.append(
                listings.page(run_filter, viewer=ADMIN, before=back[-1].prev_cursor, limit=2)
            )
        assert [h.id for p in reversed(back) for h in p.items] == expected, run


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_runs_list_exactly_their_pending_handoffs_through_any_mix_of_steps(
    seed: int, redis: Redis, handoffs: Handoffs, listings: Listings
) -> None:
    rng = random.Random(seed)
    store = handoffs.store
    model: dict[str, set[str]] = {run: set() for run in RUNS}
    # Runs the previous release indexed: a set of their own, no field.
    for run in rng.sample([r for r in RUNS if len(r) < 200], 4):
        for _ in range(rng.randint(1, 2)):
            model[run].add(write_previous_shape(redis, store, store.config.tasks, run))
    _check(handoffs, listings, model)
    for _ in range(60):
        run = rng.choice(RUNS)
        step = rng.random()
        if step < 0.45 or not model[run]:
            made = handoffs.request_approval(
                run_id=run, thread_id="t", action="ship", args={"n": rng.random()}
            )
            model[run].add(made.id)
        else:
            target = rng.choice(sorted(model[run]))
            if step < 0.6:
                handoffs.decide(target, rng.choice(["approved", "rejected"]), by=ADMIN)
            elif step < 0.7:
                handoffs.cancel(target, by=ADMIN)
            elif step < 0.8:
                store.expire_now(target, expired_by=ADMIN)
            else:
                store.reassign(target, by=ADMIN, channel=rng.choice(["C0NEW", "C0OTHER"]))
                continue
            model[run].discard(target)
            assert store.get(target).status is not Status.PENDING
        _check(handoffs, listings, model)
    for run in RUNS:
        for target in sorted(model[run]):
            handoffs.cancel(target, by=ADMIN)
        model[run].clear()
    _check(handoffs, listings, model)
    assert anything_pending(redis, store.keys) == []
