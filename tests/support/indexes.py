"""Where a handoff is indexed as pending, read off Redis for tests: every pending index's
sorted set, and the run buckets that name a run's one pending handoff (``store.keys``)."""

from __future__ import annotations

from redis import Redis

from store.keys import KeySpace


def indexed_under(redis: Redis, keys: KeySpace, handoff_id: str) -> set[str]:
    """The pending index keys that hold ``handoff_id`` (a run's by its ``pending_by_run``
    name, wherever the run keeps it)."""
    found = {
        key.decode()
        for key in redis.scan_iter(match=keys.pending + "*", _type="zset")
        if redis.zscore(key, handoff_id) is not None
    }
    for bucket in redis.scan_iter(match=keys.prefix + "runs:*"):
        for run_id, held in redis.hgetall(bucket).items():
            if held.decode() == handoff_id:
                found.add(keys.pending_by_run(run_id.decode()))
    return found


def anything_pending(redis: Redis, keys: KeySpace) -> list[str]:
    """The pending indexes that hold anything: sorted sets, and runs named in a bucket."""
    left = [key.decode() for key in redis.scan_iter(match=keys.pending + "*") if redis.zcard(key)]
    for bucket in redis.scan_iter(match=keys.prefix + "runs:*"):
        left.extend(keys.pending_by_run(run.decode()) for run in redis.hkeys(bucket))
    return left
