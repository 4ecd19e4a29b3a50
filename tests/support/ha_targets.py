"""The resume target of the HA tests: it records each call in a witness Redis (the test
machine's, ``HA_WITNESS_URL``), which outlives the servers the tests kill."""

from __future__ import annotations

import json
import os

from redis import Redis

from store.models import Handoff

RESUMED = "test:ha:resumed"


def record(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Record the call (handoff id, status, who decided, attempt) in the witness."""
    decided_by = handoff.resume_data.decided_by if handoff.resume_data else None
    entry = {"id": handoff.id, "status": handoff.status.value, "by": decided_by, "attempt": attempt}
    Redis.from_url(os.environ["HA_WITNESS_URL"]).rpush(RESUMED, json.dumps(entry))
