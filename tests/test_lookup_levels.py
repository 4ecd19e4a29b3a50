"""The lookup hashes in levels (``store.keys``: idempotency keys, message links, runs with one
pending handoff): a field is added at its kind's current level and never moves, the level
goes up once a hash fills, and every lookup, update and removal finds a field at whichever
level it was added."""

from __future__ import annotations

from typing import Any

from redis import Redis

from store import defaults
from store.ids import new_handoff_id
from store.keys import LOOKUP_KINDS
from store.models import HandoffRequest, Status, TaskKind
from store.repository import HandoffStore, StoreConfig, TaskPolicy

CHANNEL = "C0LEVELS"
REVIEWER = "U0LEVELS"


def _request(run_id: str, idempotency_key: str) -> HandoffRequest:
    fields: dict[str, Any] = {
        "run_id": run_id,
        "thread_id": f"{run_id}-thread",
        "request_type": "approval",
        "context": "Charged twice",
        "payload": {"kind": "approval", "action": {"name": "refund", "args": {"n": 1}}},
        "channel": CHANNEL,
        "reviewers": [REVIEWER],
        "idempotency_key": idempotency_key,
    }
    return HandoffRequest.model_validate(fields)


def _buckets(redis: Redis, store: HandoffStore, kind: str) -> dict[str, dict[bytes, bytes]]:
    return {
        key.decode(): redis.hgetall(key)
        for key in redis.scan_iter(match=f"{store.keys.prefix}{kind}:*")
    }


def _level(redis: Redis, store: HandoffStore, kind: str) -> int:
    held = redis.hget(store.keys.lookup_levels, kind)
    return int(held) if held is not None else defaults.LOOKUP_FIRST_LEVEL


def test_links_fill_a_level_open_the_next_and_are_all_found(redis: Redis) -> None:
    store = HandoffStore(redis)
    links = {f"1760000000.{n:06d}": new_handoff_id() for n in range(2500)}
    for ts, handoff_id in links.items():
        store.link_message(handoff_id, CHANNEL, ts)

    # 2,500 links do not fit in the first level's 16 hashes of at most LOOKUP_GROW_AT.
    assert _level(redis, store, "msglinks") > defaults.LOOKUP_FIRST_LEVEL
    buckets = _buckets(redis, store, "msglinks")
    assert sum(len(fields) for fields in buckets.values()) == len(links)  # none twice
    for key, fields in buckets.items():
        assert len(fields) <= defaults.LOOKUP_GROW_AT, key
        assert redis.object("encoding", key) == b"listpack", key
    for ts, handoff_id in links.items():
        assert store.handoff_for_message(CHANNEL, ts) == handoff_id
    assert store.handoff_for_message(CHANNEL, "1760000000.999999") is None

    # Linked again (a delivery attempt that finds its post): updated where it is.
    first_ts = next(iter(links))
    store.link_message("ho_relinked", CHANNEL, first_ts)
    assert store.handoff_for_message(CHANNEL, first_ts) == "ho_relinked"
    assert sum(len(f) for f in _buckets(redis, store, "msglinks").values()) == len(links)


def test_fields_added_at_an_older_level_are_found_updated_and_removed(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """Handoffs created at the first level, the level raised as if the hashes had filled,
    then more: the older ones' idempotency keys, run fields and links still answer, are
    updated in place (a run's second handoff) and are removed where they are."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    old = [
        store.create(_request(f"run-old-{n}", f"old-{n}"), handoff_id=new_handoff_id()).handoff
        for n in range(6)
    ]
    for n, handoff in enumerate(old):  # posted, as worker.jobs.run_delivery does
        start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"token-{n}")
        ts = f"1760000001.{n:06d}"
        store.link_message(handoff.id, CHANNEL, ts)
        refs = {"channel": CHANNEL, "ts": ts}
        store.finish_task(handoff.id, TaskKind.DELIVER, attempt=start.attempt, message_refs=refs)
    raised = defaults.LOOKUP_FIRST_LEVEL + 3
    redis.hset(store.keys.lookup_levels, mapping=dict.fromkeys(LOOKUP_KINDS, raised))

    new = store.create(_request("run-new", "new"), handoff_id=new_handoff_id()).handoff
    first_level = defaults.LOOKUP_FIRST_LEVEL
    assert redis.hget(store.keys.lookup_bucket("idemkeys", "new", raised), "new") == new.id.encode()
    assert redis.hget(store.keys.lookup_bucket("idemkeys", "old-0", first_level), "old-0")
    for n, handoff in enumerate(old):
        assert store.created_under(f"old-{n}") == handoff.id
        assert store.handoff_for_message(CHANNEL, f"1760000001.{n:06d}") == handoff.id
        assert store.index_range(store.keys.pending_by_run(f"run-old-{n}"), "-", "+", 5) == [
            handoff.id
        ]
    # Created again under an old key: the handoff of the first time, nothing new.
    again = store.create(_request("run-old-0", "old-0"), handoff_id=new_handoff_id())
    assert not again.created and again.handoff.id == old[0].id

    # A second handoff of an old run: its field (at the old level) says '*', no new field.
    second = store.create(_request("run-old-1", "old-1-b"), handoff_id=new_handoff_id()).handoff
    run_key = store.keys.pending_by_run("run-old-1")
    assert store.looked_up("runs", ["run-old-1"]) == ["*"]
    assert store.index_range(run_key, "-", "+", 5) == sorted([old[1].id, second.id])
    assert not redis.hexists(store.keys.lookup_bucket("runs", "run-old-1", raised), "run-old-1")

    # Decided: the run fields go, wherever they were.
    for handoff_id in (old[1].id, second.id, old[2].id, new.id):
        store.decide(handoff_id, Status.REJECTED, decided_by=REVIEWER)
    assert store.looked_up("runs", ["run-old-1", "run-old-2", "run-new"]) == [None] * 3
    assert store.index_size(run_key) == 0 and not redis.exists(run_key)

    # Purged: the idempotency keys and message links go too, at either level.
    assert store.purge_decided() == 4
    assert store.created_under("old-2") is None and store.created_under("new") is None
    assert store.handoff_for_message(CHANNEL, "1760000001.000002") is None
    assert store.created_under("old-3") == old[3].id  # pending ones are kept
    assert store.index_positions([store.keys.pending_by_run("run-old-3")], None) == (1, 0)
