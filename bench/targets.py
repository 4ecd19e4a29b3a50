"""The resume target of the lifecycle benchmark: it records each resume in Redis.

The benchmark names where to record in the handoff's ``metadata`` (``bench_key``), which
the store hands back on resume, so one worker can serve the warm-up, the bulk run and the
idle samples without extra configuration. The worker's ``REDIS_URL`` says which server.
"""

from __future__ import annotations

import os
import time

from redis import Redis

from store.models import Handoff

RESUME_TARGET = "bench.targets:count_resume"
"""The ``resume=`` path the benchmark gives its handoffs."""

METADATA_KEY = "bench_key"
"""Metadata field holding the base name of the keys a resume is recorded under."""


def count_key(base: str) -> str:
    """Counter of resumes run (never deduplicated: a second run of a resume shows here)."""
    return f"{base}:count"


def ids_key(base: str) -> str:
    """Set of handoff ids resumed, to tell a duplicate resume from a missing one."""
    return f"{base}:ids"


def latency_key(base: str) -> str:
    """List of click-to-resume latencies in milliseconds, one per resume."""
    return f"{base}:latency_ms"


def count_resume(handoff: Handoff) -> None:
    """Record one resume of ``handoff``: bump the counter, note its id and its latency.

    The latency runs from ``decided_at`` (the Redis server's clock, set by the decision's
    Lua script) to now (this worker's clock); both are the same clock when the benchmark
    runs Redis and the workers on one machine.
    """
    base = handoff.metadata[METADATA_KEY]
    decided_ms = handoff.decided_at.timestamp() * 1000 if handoff.decided_at else 0.0
    latency_ms = time.time() * 1000 - decided_ms
    # A forked RQ work horse runs one job and exits, so a pooled client would not be reused.
    redis = Redis.from_url(os.environ["REDIS_URL"])
    try:
        with redis.pipeline(transaction=True) as pipe:
            pipe.incr(count_key(base))
            pipe.sadd(ids_key(base), handoff.id)
            pipe.rpush(latency_key(base), f"{latency_ms:.1f}")
            pipe.execute()
    finally:
        redis.close()
