"""Resume targets the worker tests point handoffs at. They report to Redis lists that the
tests read (the worker gets the test database's URL as REDIS_URL)."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from typing import Any

from redis import Redis

from store.connection import open_client
from store.models import Handoff

STARTED = "test:resume:started"
COMPLETED = "test:resume:completed"
FAIL_FLAG = "test:resume:fail"


def _redis() -> Redis:
    # RESUME_WITNESS_URL: a Redis apart from the one a failover test kills; open_client:
    # REDIS_URL may name the master through Sentinel.
    return open_client(os.environ.get("RESUME_WITNESS_URL") or os.environ["REDIS_URL"])


_PUSH_ONCE = """
if not redis.call('LPOS', KEYS[1], ARGV[1]) then redis.call('RPUSH', KEYS[1], ARGV[1]) end
"""
"""RPUSH unless the list holds this very entry. redis-py sends a command again when the
connection drops before the reply (its default retry), so a Redis killed between running an
RPUSH and answering it would record one report twice: a double resume that never was. Each
report carries a token of its own, so a second resume still shows as a second entry."""


def _report(key: str, handoff: Handoff, attempt: int, idempotency_key: str) -> None:
    entry = {
        "report": uuid.uuid4().hex,
        "handoff_id": handoff.id,
        "status": handoff.status.value,
        "resume_data": handoff.resume_data.model_dump(mode="json") if handoff.resume_data else None,
        "attempt": attempt,
        "idempotency_key": idempotency_key,
        "pid": os.getpid(),
        "at": time.time(),
    }
    _redis().eval(_PUSH_ONCE, 1, key, json.dumps(entry))


def recorded(redis: Redis, key: str = COMPLETED) -> list[dict[str, Any]]:
    """The entries the targets reported under ``key`` (``COMPLETED``: the finished
    resumes), oldest first."""
    return [json.loads(raw) for raw in redis.lrange(key, 0, -1)]


def record(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Record the resume and return."""
    _report(STARTED, handoff, attempt, idempotency_key)
    _report(COMPLETED, handoff, attempt, idempotency_key)


def hang_on_first_attempt(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Report the start, then hang on attempt 1 (the test kills the worker meanwhile)."""
    _report(STARTED, handoff, attempt, idempotency_key)
    if attempt == 1:
        time.sleep(120)
    _report(COMPLETED, handoff, attempt, idempotency_key)


def fail_while_flagged(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Raise while the test's fail flag is set; record the resume otherwise."""
    _report(STARTED, handoff, attempt, idempotency_key)
    if _redis().exists(FAIL_FLAG):
        raise RuntimeError(f"downstream unavailable (attempt {attempt})")
    _report(COMPLETED, handoff, attempt, idempotency_key)


def not_callable_with_a_handoff() -> None:
    """A target with the wrong signature, rejected at request time."""


async def record_async(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """An async target; the worker runs it to completion."""
    _report(STARTED, handoff, attempt, idempotency_key)
    _report(COMPLETED, handoff, attempt, idempotency_key)


def record_slowly(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Record the start, work for 0-50 ms, then record the completion: long enough for a
    worker killed at a random moment to die inside the target now and then."""
    _report(STARTED, handoff, attempt, idempotency_key)
    time.sleep(random.uniform(0, 0.05))
    _report(COMPLETED, handoff, attempt, idempotency_key)


def record_after_a_while(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Record the start, work for 0.3 s, then record the completion: keeps the workers
    busy, so that a Redis outage lands in the middle of jobs."""
    _report(STARTED, handoff, attempt, idempotency_key)
    time.sleep(0.3)
    _report(COMPLETED, handoff, attempt, idempotency_key)


TICKS = "test:resume:ticks"


def swallow_the_timeout(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Record the start, then keep working for 4 s whatever is raised into it (RQ's job
    timeout is an ``Exception``), recording a tick every 20 ms while it is alive."""
    _report(STARTED, handoff, attempt, idempotency_key)
    until = time.time() + 4
    while time.time() < until:
        try:
            _redis().rpush(TICKS, json.dumps({"attempt": attempt, "at": time.time()}))
            time.sleep(0.02)
        except Exception:  # what the test is about: it swallows the timeout
            pass
    _report(COMPLETED, handoff, attempt, idempotency_key)
