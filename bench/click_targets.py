"""The resume target of the click benchmark: it records when each resume starts.

``bench.clicks`` subtracts the moment a click's HTTP response reached the client from the
moment recorded here, so the clock is read first, before any other work of the target.
Like ``bench.targets``, the keys to record under come from the handoff's ``metadata``
(``METADATA_KEY``), and the worker's ``REDIS_URL`` says which server. Only ``redis`` is
imported: RQ forks a work horse per job, and each one imports this module afresh.
"""

from __future__ import annotations

import os
import time

from redis import Redis

from bench.targets import METADATA_KEY, count_key, ids_key
from store.models import Handoff

RESUME_TARGET = "bench.click_targets:record_resume_start"
"""The ``resume=`` path the click benchmark gives its handoffs."""


def started_key(base: str) -> str:
    """Hash of handoff id -> wall-clock time (``time.time()``) its first resume started."""
    return f"{base}:started"


def record_resume_start(handoff: Handoff) -> None:
    """Record that the resume of ``handoff`` started now, and count the run.

    The counter is never deduplicated and the start time is kept from the first run
    (HSETNX), so a duplicate resume shows as a count above the number of distinct ids.
    """
    started = time.time()
    base = handoff.metadata[METADATA_KEY]
    # A forked RQ work horse runs one job and exits, so a pooled client would not be reused.
    redis = Redis.from_url(os.environ["REDIS_URL"])
    try:
        with redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(started_key(base), handoff.id, repr(started))
            pipe.incr(count_key(base))
            pipe.sadd(ids_key(base), handoff.id)
            pipe.execute()
    finally:
        redis.close()
