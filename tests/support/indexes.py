"""Where a handoff is indexed as pending, read off Redis for tests: every pending index's
sorted sets (its own key, and the sets of its levels once it grew: ``{ns}:ix:<l>:<n>:...``),
and the run lookups that name a run's one pending handoff (``store.keys``)."""

from __future__ import annotations

from redis import Redis

from store.keys import KeySpace


def _index_of(keys: KeySpace, set_key: str) -> str:
    """The pending index a sorted set belongs to: itself, or the index of a level's set."""
    level_prefix = keys.prefix + "ix:"
    if not set_key.startswith(level_prefix):
        return set_key
    _level, _n, rest = set_key.removeprefix(level_prefix).split(":", 2)
    return f"{keys.pending}:{rest}"


def _index_sets(redis: Redis, keys: KeySpace) -> list[str]:
    return [
        key.decode()
        for pattern in (keys.pending + "*", keys.prefix + "ix:*")
        for key in redis.scan_iter(match=pattern, _type="zset")
    ]


def indexed_under(redis: Redis, keys: KeySpace, handoff_id: str) -> set[str]:
    """The pending index keys that hold ``handoff_id`` (a run's by its ``pending_by_run``
    name, wherever the run keeps it)."""
    found = {
        _index_of(keys, key)
        for key in _index_sets(redis, keys)
        if redis.zscore(key, handoff_id) is not None
    }
    for bucket in redis.scan_iter(match=keys.prefix + "runs:*"):
        for run_id, held in redis.hgetall(bucket).items():
            if held.decode() == handoff_id:
                found.add(keys.pending_by_run(run_id.decode()))
    return found


def anything_pending(redis: Redis, keys: KeySpace) -> list[str]:
    """The pending indexes that hold anything: sorted sets, and runs named in a lookup."""
    left = [_index_of(keys, key) for key in _index_sets(redis, keys) if redis.zcard(key)]
    for bucket in redis.scan_iter(match=keys.prefix + "runs:*"):
        left.extend(keys.pending_by_run(run.decode()) for run in redis.hkeys(bucket))
    return left
