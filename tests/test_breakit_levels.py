"""Break-it probes of the lookup hashes in levels (d65954d) and the pending indexes in levels
(4ecacd2). The first test was a finding (fixed: INDEX_RANGE passes the count as sent); the
others are probes that held, kept as differential and regression checks: a naturally grown
index (level 2) read with every kind of ZRANGE BYLEX bound against one plain sorted set, a
lifecycle mixing 0.2-shape handoffs with grown indexes (reassign, decide, cancel, expire),
hostile idempotency keys and run ids across grown lookup levels with SCRIPT FLUSH, and a
run whose 'runs' field is at an old level."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest
from redis import Redis

from bot.queries.stats import compute_stats
from store.ids import new_handoff_id
from store.metrics import FigureReader
from store.models import HandoffRequest, Status
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.support.indexes import anything_pending
from tests.test_index_levels import CHANNEL, REVIEWER
from tests.test_index_levels import grown_request as _request
from tests.test_storage_compact import CHANNEL as PCH
from tests.test_storage_compact import REVIEWER as PRV
from tests.test_storage_compact import write_previous_shape


@pytest.mark.parametrize("limit", [10**17, sys.maxsize])
def test_a_huge_limit_lists_what_is_pending_instead_of_a_redis_error(
    redis: Redis, fast_tasks: TaskPolicy, limit: int
) -> None:
    """A finding, fixed. INDEX_RANGE turned the limit into a Lua number (tonumber(ARGV[4]))
    and handed it back to ZRANGE ... LIMIT 0 <most>: Redis writes a Lua number of 1e17 or more as
    "1e+17", which ZRANGE refuses ("value is not an integer or out of range"). Before
    4ecacd2 the count went to ZRANGE as redis-py's integer and this listed everything.
    Reached by ``handoff list --limit 100000000000000000`` (IntRange(min=1), no maximum:
    prints "Redis refused: ...; check REDIS_URL") and ``Handoffs.list_pending(limit=...)``.
    It lists what is pending: the script passes ARGV[4] itself to LIMIT, and the store caps
    the count at what an index can hold."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    made = store.create(_request(0), handoff_id=new_handoff_id()).handoff.id
    assert [h.id for h in store.list_pending(limit=limit).items] == [made]
    channel = store.keys.pending_by_channel(CHANNEL)
    assert [h.id for h in store.list_pending(channel, limit=limit).items] == [made]
    assert store.pending_ids(limit=limit) == [made]


def test_held_differential_range(redis: Redis, fast_tasks: TaskPolicy) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    keys = store.keys
    ids = [store.create(_request(n), handoff_id=new_handoff_id()).handoff.id for n in range(1200)]
    ids.sort()
    ref = "ref"
    redis.zadd(ref, dict.fromkeys(ids, 0))
    channel = keys.pending_by_channel(CHANNEL)
    rnd = random.Random(1)
    cands = (
        ["-", "+"]
        + [p + i for i in rnd.sample(ids, 30) for p in "(["]
        + ["(ho_", "[ho_0", "(ho_Z", "[", "("]
    )
    bad = 0
    for _ in range(3000):
        lo, hi = rnd.choice(cands), rnd.choice(cands)
        num = rnd.choice([0, 1, 2, 5, 37, 2000])
        desc = rnd.random() < 0.5
        want: list[str] | str
        got: list[str] | str
        try:
            found: Any = redis.zrange(ref, lo, hi, desc=desc, bylex=True, offset=0, num=num)
            want = [x.decode() for x in found]
        except Exception as e:
            want = type(e).__name__
        try:
            got = store.index_range(channel, lo, hi, num, desc=desc)
        except Exception as e:
            got = type(e).__name__
        if got != want:
            bad += 1
            if bad < 10:
                print("MISMATCH", lo[:12], hi[:12], num, desc, str(want)[:80], str(got)[:80])
    assert bad == 0, "index_range differs from ZRANGE on one plain set (see MISMATCH lines)"
    for first in [None, ids[0], ids[500], ids[-1], "ho_", "ho_Z"]:
        tot, before = store.index_positions([channel], first)
        exp_before = redis.zlexcount(ref, "-", f"({first}") if first else 0
        assert (tot, before) == (1200, exp_before), first


def test_held_lifecycle_mixed_with_previous_shapes(redis: Redis, fast_tasks: TaskPolicy) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    keys = store.keys

    def req(n: int, ch: str, rv: list[str], **extra: Any) -> HandoffRequest:
        fields: dict[str, Any] = {
            "run_id": extra.pop("run", f"run-{n % 7}"),
            "thread_id": f"t-{n}",
            "request_type": "approval",
            "context": "x",
            "payload": {"kind": "approval", "action": {"name": "refund", "args": {"n": n}}},
            "channel": ch,
            "reviewers": rv,
            "api_key": "ci-bot",
            **extra,
        }
        return HandoffRequest.model_validate(fields)

    prev = [write_previous_shape(redis, store, fast_tasks, f"run-prev-{n}") for n in range(50)]
    ids = [
        store.create(req(n, PCH, [PRV, "U0OTHER"]), handoff_id=new_handoff_id()).handoff.id
        for n in range(900)
    ]
    prev += [write_previous_shape(redis, store, fast_tasks, f"run-prev-b{n}") for n in range(50)]
    allids = sorted(ids + prev)
    ch = keys.pending_by_channel(PCH)
    assert store.index_size(ch) == 1000
    assert store.count_pending() == 1000
    got = []
    cur = None
    while True:
        p = store.list_pending(ch, cursor=cur, limit=33)
        got += [h.id for h in p.items]
        if not p.next_cursor:
            break
        cur = p.next_cursor
    assert got == allids
    # reassign half elsewhere and back, some to reviewers only
    for i, h in enumerate(allids[::3]):
        store.reassign(h, by="U0ADMIN", channel="C0ELSE")
        if i % 2:
            store.reassign(h, by="U0ADMIN", channel=PCH, reviewers=["U0THIRD"])
    for i, h in enumerate(allids):
        if i % 4 == 0:
            store.decide(h, Status.REJECTED, decided_by=PRV, respect_claim=False)
        elif i % 4 == 1:
            store.cancel(h, cancelled_by="U0ADMIN", resume=False)
        elif i % 4 == 2:
            store.expire_now(h, expired_by="U0ADMIN")
        else:
            store.decide(h, Status.APPROVED, decided_by="U0ADMIN", respect_claim=False)
    assert anything_pending(redis, keys) == []
    assert store.count_pending() == 0
    assert compute_stats(store).pending_by_channel == {}
    assert sum(FigureReader(redis, keys).read().pending.values()) == 0


def test_held_hostile_lookup_names_across_levels(redis: Redis, fast_tasks: TaskPolicy) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    keys = store.keys
    hostile = [
        "a:b",
        "{x}",
        "*",
        " sp ace ",
        "ünï©ødé",
        "k" * 256,
        "idemkeys",
        "runs",
        "pending:channel:C1",
        "",
        "\x00nul",
        "}{",
        "levels",
    ]
    made = {}
    runs = {}
    for n in range(3000):
        name = hostile[n] if n < len(hostile) and hostile[n] else f"idem-{n}"
        run = f"R{n % 1500}" if n >= len(hostile) else (hostile[n] or "r")
        runs[name] = run
        made[name] = store.create(
            _request(n, run=run, idem=name), handoff_id=new_handoff_id()
        ).handoff.id
        if n % 5 == 0:
            store.link_message(made[name], "C0X", f"17.{n}")
    for name, hid in made.items():
        again = store.create(_request(1, run=runs[name], idem=name), handoff_id=new_handoff_id())
        assert again.handoff.id == hid, name
        assert store.created_under(name) == hid
    for n, hid in enumerate(made.values()):
        if n % 5 == 0:
            assert store.handoff_for_message("C0X", f"17.{n}") == hid
    assert store.count_pending() == 3000
    # run index sizes
    for r in range(20, 40):
        assert store.index_size(keys.pending_by_run(f"R{r}")) == 2
    redis.script_flush()
    for h in list(made.values()):
        store.decide(h, Status.REJECTED, decided_by=REVIEWER, respect_claim=False)
    assert anything_pending(redis, keys) == []


def test_held_run_field_at_an_old_level(redis: Redis, fast_tasks: TaskPolicy) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    keys = store.keys
    a = store.create(_request(0, run="RUN-OLD"), handoff_id=new_handoff_id()).handoff.id
    # natural growth of runs
    others = [
        store.create(_request(n, run=f"other-{n}"), handoff_id=new_handoff_id()).handoff.id
        for n in range(1, 2000)
    ]
    lv = int(redis.hget(keys.lookup_levels, "runs") or 0)
    assert lv > 4
    prev = write_previous_shape(redis, store, fast_tasks, "RUN-OLD")
    b = store.create(_request(5000, run="RUN-OLD"), handoff_id=new_handoff_id()).handoff.id
    run = keys.pending_by_run("RUN-OLD")
    assert store.index_range(run, "-", "+", 10) == sorted([a, prev, b])
    assert store.index_size(run) == 3
    ch = keys.pending_by_channel(CHANNEL)
    allc = sorted([a, b, *others])  # prev is in the previous shape's channel
    tot, before = store.index_positions([run, ch], b)
    assert tot == 3 + len(allc)
    assert before == sum(1 for i in [a, prev, b, *allc] if i < b)
    redis.script_flush()
    store.decide(a, Status.REJECTED, decided_by=REVIEWER, respect_claim=False)
    redis.script_flush()
    assert store.index_range(run, "-", "+", 10) == sorted([prev, b])
    store.decide(prev, Status.REJECTED, decided_by=PRV, respect_claim=False)
    assert store.index_range(run, "-", "+", 10) == [b]
    assert store.index_size(run) == 1
    store.decide(b, Status.REJECTED, decided_by=REVIEWER, respect_claim=False)
    assert store.index_size(run) == 0
    for h in others:
        store.cancel(h, cancelled_by="U0A", resume=False)
    assert anything_pending(redis, keys) == []
    # msglinks natural growth and purge
    ids = []
    for n in range(2000):
        h = store.create(_request(n, run=f"m-{n}"), handoff_id=new_handoff_id()).handoff.id
        store.link_message(h, "C0M", f"1.{n}")
        ids.append(h)
    assert int(redis.hget(keys.lookup_levels, "msglinks") or 0) > 4
    for n, h in enumerate(ids):
        assert store.handoff_for_message("C0M", f"1.{n}") == h
