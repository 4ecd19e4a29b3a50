"""Listings and viewers' queues (bot.queries.listings, bot.queries.unassigned) against the test
Redis: every pending handoff is reached exactly once, in id order, both ways, however it is
indexed."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.queries.listings import ListFilter, Listing, Listings, ListKind, merge
from bot.queries.unassigned import UnassignedIndex
from bot.standin import SlackStandIn, StandInUser
from store.ids import new_handoff_id
from store.models import HandoffRequest, TaskKind
from worker.client import Handoffs

ALICE, BOB, ADMIN = "U0ALICE", "U0BOB", "U0ADMIN"
GROUP = "S0TEAM"
CHANNEL, PRIVATE = "C0OPS", "G0PRIVATE"
MINE = ListFilter(ListKind.MINE)


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    users = [StandInUser(u, u.lower()) for u in (ALICE, BOB, ADMIN)]
    with SlackStandIn(signing_secret="s", users=users, usergroups={GROUP: [BOB]}) as standin:
        yield standin


@pytest.fixture
def listings(redis: Redis, handoffs: Handoffs, slack: SlackStandIn) -> Listings:
    return _listings(redis, handoffs, slack, allow_any_channel_member=True)


def _listings(redis: Redis, handoffs: Handoffs, slack: SlackStandIn, **options: object) -> Listings:
    """Listings whose handoffs are posted in ``CHANNEL`` (everyone is in it, unless a test
    sets its members)."""
    client = WebClient(token=slack.bot_token, base_url=slack.api_url)
    policy = ReviewerPolicy(
        client,
        redis,
        handoffs.store.keys,
        admins={ADMIN},
        default_channel=CHANNEL,
        **options,  # type: ignore[arg-type]
    )
    return Listings(handoffs.store, policy)


def _create(handoffs: Handoffs, **options: object) -> str:
    return handoffs.request_approval(run_id="run-q", thread_id="t", action="ship", **options).id


def _walk(listings: Listings, listing: ListFilter, viewer: str, *, limit: int) -> list[Listing]:
    """Every page from the first, following Next."""
    pages = [listings.page(listing, viewer=viewer, limit=limit)]
    while pages[-1].next_cursor:
        pages.append(
            listings.page(listing, viewer=viewer, after=pages[-1].next_cursor, limit=limit)
        )
    return pages


def _ids(pages: list[Listing]) -> list[str]:
    return [h.id for page in pages for h in page.items]


class _List:
    """A merge source over a sorted list, read at most ``want`` at a time like an index."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = sorted(ids)

    def fetch(
        self, cursor: str | None, *, forward: bool, want: int
    ) -> tuple[list[str], str | None]:
        if forward:
            beyond = [i for i in self.ids if cursor is None or i > cursor]
        else:
            beyond = [i for i in reversed(self.ids) if cursor is None or i < cursor]
        got = beyond[:want]
        return got, (got[-1] if len(beyond) > want else None)


def test_merge_is_the_exact_union_page_after_page_both_ways() -> None:
    rng = random.Random(7)
    universe = [f"id{n:04d}" for n in range(400)]
    sources = [_List(rng.sample(universe, k)) for k in (5, 60, 200, 0)]
    expected = sorted({i for s in sources for i in s.ids})
    for forward in (True, False):
        seen: list[str] = []
        cursor = None
        while True:
            ids, bound = merge(sources, cursor, forward=forward, want=7)
            seen.extend(ids)
            if bound is None:
                break
            cursor = bound
        assert seen == (expected if forward else expected[::-1])


def test_list_pages_reach_each_pending_handoff_once_both_ways(
    handoffs: Handoffs, listings: Listings
) -> None:
    created = sorted(_create(handoffs) for _ in range(47))
    pages = _walk(listings, ListFilter(ListKind.PENDING), ADMIN, limit=10)
    assert _ids(pages) == created
    assert [(p.offset, p.total) for p in pages] == [(0, 47), (10, 47), (20, 47), (30, 47), (40, 47)]
    assert pages[0].prev_cursor is None and pages[-1].next_cursor is None
    back = listings.page(
        ListFilter(ListKind.PENDING), viewer=ADMIN, before=pages[2].prev_cursor, limit=10
    )
    assert [h.id for h in back.items] == [h.id for h in pages[1].items]


def test_mine_merges_own_group_and_unassigned_handoffs_in_id_order(
    handoffs: Handoffs, listings: Listings
) -> None:
    rng = random.Random(3)
    expected_bob = []
    for _ in range(60):
        kind = rng.choice(["alice", "bob", "group", "anyone", "own"])
        if kind == "alice":
            _create(handoffs, reviewers=[ALICE])
        elif kind == "bob":
            expected_bob.append(_create(handoffs, reviewers=[BOB]))
        elif kind == "group":
            expected_bob.append(_create(handoffs, reviewers=[GROUP]))
        elif kind == "anyone":
            expected_bob.append(_create(handoffs))
        else:
            _create(handoffs, requester=BOB)  # BOB may not decide his own request
    assert _ids(_walk(listings, MINE, BOB, limit=4)) == sorted(expected_bob)
    # An admin's queue is everything but their own requests.
    assert len(_ids(_walk(listings, MINE, ADMIN, limit=25))) == 60


def test_a_queue_mostly_filtered_out_still_pages_through_everything(
    handoffs: Handoffs, listings: Listings
) -> None:
    for _ in range(130):
        _create(handoffs, requester=BOB)
    last = _create(handoffs)
    pages = _walk(listings, MINE, BOB, limit=5)
    assert _ids(pages) == [last]
    assert len(pages) > 1  # short pages with a cursor, rather than one unbounded read


def test_unassigned_index_follows_creations_decisions_and_reassignments(
    redis: Redis, handoffs: Handoffs, listings: Listings
) -> None:
    index = listings.unassigned
    early = _create(handoffs)
    assert index.refresh() is None and index.is_complete()
    # An agent host whose clock is behind: its id sorts before ids already indexed.
    request = HandoffRequest.model_validate(
        {
            "run_id": "r",
            "thread_id": "t",
            "request_type": "approval",
            "payload": {"kind": "approval", "action": {"name": "ship"}},
        }
    )
    skewed = new_handoff_id(now_ms=int(time.time() * 1000) - 60_000)
    handoffs.store.create(request, handoff_id=skewed)
    assigned = _create(handoffs)
    handoffs.store.reassign(assigned, by=ADMIN, reviewers=[ALICE])
    index.refresh()
    assert [i.decode() for i in redis.zrange(index.key, 0, -1)] == sorted([early, skewed])

    handoffs.decide(early, "approved", by=ALICE)
    assert _ids(_walk(listings, MINE, BOB, limit=10)) == [skewed]
    assert redis.zscore(index.key, early) is None  # dropped once found decided


def test_unassigned_index_is_built_in_steps_with_a_ceiling(
    handoffs: Handoffs, listings: Listings, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = sorted(_create(handoffs) for _ in range(25))
    monkeypatch.setattr("bot.queries.unassigned.BATCH", 10)
    index = UnassignedIndex(handoffs.store)
    assert index.refresh(walk_budget=10) == created[9]
    assert not index.is_complete()
    # Until the walk is done, a queue only goes as far as the ceiling, then continues.
    monkeypatch.setattr("bot.queries.unassigned.WALK_BUDGET", 10)
    assert _ids(_walk(listings, MINE, BOB, limit=50)) == created
    assert index.is_complete()


def test_unassigned_index_starts_over_when_its_read_position_expired(
    redis: Redis, handoffs: Handoffs, listings: Listings
) -> None:
    first = _create(handoffs)
    listings.unassigned.refresh()
    redis.delete(listings.keys.unassigned_read)  # as if nobody read for half the retention
    second = _create(handoffs)
    assert _ids(_walk(listings, MINE, BOB, limit=10)) == sorted([first, second])


def test_unassigned_handoffs_are_only_in_the_queues_of_their_channels_members(
    redis: Redis, handoffs: Handoffs, listings: Listings, slack: SlackStandIn
) -> None:
    slack.set_channel_members(PRIVATE, [ALICE, slack.bot_user_id])  # the bot was invited
    public = _create(handoffs)
    private = _create(handoffs, channel=PRIVATE)

    assert _ids(_walk(listings, MINE, ALICE, limit=10)) == [public, private]
    assert _ids(_walk(listings, MINE, BOB, limit=10)) == [public]
    assert _ids(_walk(listings, MINE, ADMIN, limit=10)) == [public, private]


def test_by_default_unassigned_handoffs_are_only_in_admins_queues(
    redis: Redis, handoffs: Handoffs, slack: SlackStandIn
) -> None:
    listings = _listings(redis, handoffs, slack)
    unassigned = _create(handoffs)
    bobs = _create(handoffs, reviewers=[BOB])

    assert _ids(_walk(listings, MINE, BOB, limit=10)) == [bobs]
    assert _ids(_walk(listings, MINE, ALICE, limit=10)) == []
    assert _ids(_walk(listings, MINE, ADMIN, limit=10)) == [unassigned, bobs]


def test_unassigned_index_drops_closed_handoffs_nobody_pages_to(
    redis: Redis, handoffs: Handoffs, listings: Listings
) -> None:
    index = listings.unassigned
    decided, cancelled, expired, kept = (_create(handoffs) for _ in range(4))
    index.refresh()
    assert redis.zcard(index.key) == 4

    handoffs.decide(decided, "approved", by=ALICE)
    handoffs.store.cancel(cancelled, cancelled_by=ADMIN)
    handoffs.store.expire_now(expired, expired_by=ADMIN)
    index.refresh()  # no listing read: only the audit stream's events

    assert [i.decode() for i in redis.zrange(index.key, 0, -1)] == [kept]


def _fail_delivery_for_good(handoffs: Handoffs, handoff_id: str) -> None:
    store = handoffs.store
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=new_handoff_id())
    assert start.action == "run"
    verdict = store.finish_task(
        handoff_id, TaskKind.DELIVER, attempt=start.attempt, error="is_archived", permanent=True
    )
    assert verdict == "undeliverable"


def test_failed_listing_pages_through_every_handoff_whose_work_gave_up_both_ways(
    handoffs: Handoffs, listings: Listings
) -> None:
    created = [_create(handoffs) for _ in range(27)]
    failed = sorted(random.Random(5).sample(created, 23))
    for handoff_id in reversed(failed):  # gave up in another order than their ids'
        _fail_delivery_for_good(handoffs, handoff_id)

    listing = ListFilter(ListKind.FAILED)
    pages = _walk(listings, listing, ADMIN, limit=10)

    assert _ids(pages) == failed
    assert [(p.offset, p.total) for p in pages] == [(0, 23), (10, 23), (20, 23)]
    assert all(h.status.value == "undeliverable" for page in pages for h in page.items)
    assert pages[0].prev_cursor is None and pages[-1].next_cursor is None
    back = listings.page(listing, viewer=ADMIN, before=pages[2].prev_cursor, limit=10)
    assert [h.id for h in back.items] == [h.id for h in pages[1].items]
    # Handoffs still pending are not in it.
    assert listings.page(ListFilter(ListKind.PENDING), viewer=ADMIN).total == 4


def test_a_reminder_that_gave_up_does_not_list_its_handoff_as_failed(
    handoffs: Handoffs, listings: Listings
) -> None:
    # Found by the break-it review: it was listed with no failure to show, and `retry`
    # had nothing to retry. The reminder's failure stays in the handoff's audit trail.
    store = handoffs.store
    handoff_id = _create(handoffs)
    store.redis.zadd(store.keys.failed, {f"remind:{handoff_id}": 1})

    assert store.failed_handoff_ids() == []
    assert listings.page(ListFilter(ListKind.FAILED), viewer=ADMIN).items == []
