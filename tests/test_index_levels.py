"""Pending indexes that grow in levels (``store.keys``): a channel's, a reviewer's and a
type's index is one sorted set up to ``LOOKUP_GROW_AT`` ids, then more sets; every reader
(pages both ways, counts, positions, stats, metrics) sees the one index they make together,
and a decision takes each id out of whichever set holds it."""

from __future__ import annotations

from typing import Any

from redis import Redis

from bot.queries.stats import compute_stats
from store import defaults
from store.ids import new_handoff_id
from store.keys import KeySpace
from store.metrics import FigureReader
from store.models import HandoffRequest, Status
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.support.indexes import anything_pending, indexed_under

CHANNEL = "C0GROWN"
REVIEWER = "U0GROWN"


def grown_request(n: int, run: str | None = None, idem: str | None = None) -> HandoffRequest:
    """The ``n``-th approval of the channel ``CHANNEL`` for ``REVIEWER`` (its own run unless
    ``run``)."""
    fields: dict[str, Any] = {
        "run_id": run or f"run-grown-{n}",
        "thread_id": f"thread-{n}",
        "request_type": "approval",
        "context": "Charged twice",
        "payload": {"kind": "approval", "action": {"name": "refund", "args": {"n": n}}},
        "channel": CHANNEL,
        "reviewers": [REVIEWER],
    }
    if idem:
        fields["idempotency_key"] = idem
    return HandoffRequest.model_validate(fields)


def _sets(redis: Redis, keys: KeySpace, index: str) -> list[str]:
    """The sorted sets an index is made of now: its own key, its levels' sets."""
    rest = index.removeprefix(keys.pending + ":")
    sets = [index] if redis.exists(index) else []
    for key in redis.scan_iter(match=f"{keys.prefix}ix:*:*:{rest}", _type="zset"):
        sets.append(key.decode())
    return sets


def _all_pages(store: HandoffStore, index: str, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list_pending(index, cursor=cursor, limit=limit)
        ids.extend(h.id for h in page.items)
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def test_a_grown_index_reads_as_one_and_empties_as_decided(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    keys = store.keys
    channel, reviewer = keys.pending_by_channel(CHANNEL), keys.pending_by_reviewer(REVIEWER)
    approvals = keys.pending_by_type("approval")
    ids = [
        store.create(grown_request(n), handoff_id=new_handoff_id()).handoff.id for n in range(400)
    ]
    # Grown past one set; then raised a level more, as if its sets had filled.
    for index in (channel, reviewer, approvals):
        level = redis.hget(keys.lookup_levels, index.removeprefix(keys.prefix))
        assert level == b"1", index
    redis.hset(keys.lookup_levels, channel.removeprefix(keys.prefix), 2)
    ids += [
        store.create(grown_request(n), handoff_id=new_handoff_id()).handoff.id
        for n in range(400, 600)
    ]
    ids.sort()

    for index in (channel, reviewer, approvals):
        sets = _sets(redis, keys, index)
        assert len(sets) > 1, index
        held = [member.decode() for key in sets for member in redis.zrange(key, 0, -1)]
        assert sorted(held) == ids, index  # each id in one set, none lost, none twice
        for key in sets:
            assert redis.object("encoding", key) == b"listpack", key
            assert redis.zcard(key) <= defaults.LOOKUP_GROW_AT, key
    assert len(_sets(redis, keys, channel)) > len(_sets(redis, keys, reviewer))

    # Read as one index: pages in id order both ways, counts, positions.
    assert _all_pages(store, channel, 37) == ids
    assert store.pending_ids(limit=1000) == ids
    assert store.pending_ids(ids[99], limit=5) == ids[100:105]
    assert store.index_range(channel, "+", f"({ids[300]}", 4, desc=True) == ids[-1:-5:-1]
    assert store.index_range(channel, f"({ids[-5]}", "+", 10) == ids[-4:]
    assert store.index_range(channel, f"[{ids[10]}", f"[{ids[12]}", 10) == ids[10:13]
    assert store.index_sizes([channel, reviewer, approvals]) == [600, 600, 600]
    assert store.count_pending() == 600
    assert store.index_positions([channel, reviewer], ids[250]) == (1200, 500)
    assert indexed_under(redis, keys, ids[444]) >= {channel, reviewer, approvals}
    assert compute_stats(store).pending_by_channel == {CHANNEL: 600}
    assert FigureReader(redis, keys).read().pending["approval"] == 600

    # Decided: out of whichever set held each id.
    for handoff_id in ids[::2]:
        store.decide(handoff_id, Status.REJECTED, decided_by=REVIEWER)
    assert _all_pages(store, reviewer, 50) == ids[1::2]
    assert store.index_sizes([channel, approvals]) == [300, 300]
    for handoff_id in ids[1::2]:
        store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER)
    assert store.count_pending() == 0 and store.pending_ids() == []
    assert anything_pending(redis, keys) == []
    assert compute_stats(store).pending_by_channel == {}


def test_a_handoff_moved_out_of_a_grown_index_and_back_is_held_once(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """Added at the first level, the index raised, reassigned elsewhere and back: out of
    the set that held it, then into the current level's, one set at a time."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    keys = store.keys
    channel = keys.pending_by_channel(CHANNEL)
    first = store.create(grown_request(0), handoff_id=new_handoff_id()).handoff.id
    redis.hset(keys.lookup_levels, channel.removeprefix(keys.prefix), 2)

    store.reassign(first, by="U0ADMIN", channel="C0ELSEWHERE")
    assert store.index_size(channel) == 0 and _sets(redis, keys, channel) == []
    store.reassign(first, by="U0ADMIN", channel=CHANNEL)
    assert store.index_range(channel, "-", "+", 10) == [first]
    holding = [key for key in _sets(redis, keys, channel) if redis.zscore(key, first) is not None]
    assert len(holding) == 1 and holding[0].startswith(keys.prefix + "ix:2:")
    assert store.index_size(channel) == 1
