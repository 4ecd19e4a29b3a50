"""Read the whole test database, to prove that a refused operation wrote nothing."""

from __future__ import annotations

from typing import Any

from redis import Redis


def snapshot(redis: Redis) -> dict[bytes, Any]:
    """Every key of the database with its type and full contents."""
    state: dict[bytes, Any] = {}
    for key in redis.scan_iter(count=1000):
        kind = redis.type(key).decode()
        if kind == "none":
            continue  # expired between the scan and now (a short-lived marker): not there
        if kind == "string":
            value: Any = redis.get(key)
        elif kind == "hash":
            value = redis.hgetall(key)
        elif kind == "list":
            value = redis.lrange(key, 0, -1)
        elif kind == "set":
            value = redis.smembers(key)
        elif kind == "zset":
            value = redis.zrange(key, 0, -1, withscores=True)
        elif kind == "stream":
            value = redis.xrange(key)
        else:
            raise AssertionError(f"unexpected key type {kind} for {key!r}")
        state[key] = (kind, value)
    return state
