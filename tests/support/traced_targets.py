"""A resume target that goes on with the agent's work in a span of its own, as an agent
traced with OpenTelemetry does after a resume; it reports that span's ids to a Redis list
(its process is the worker's resume process, whose spans the test cannot read)."""

from __future__ import annotations

import json
import os
from typing import Any

from opentelemetry import trace
from redis import Redis

from store.models import Handoff

CONTINUED = "test:traced:continued"


def continue_run(handoff: Handoff, *, attempt: int, idempotency_key: str) -> None:
    """Start the agent's next span, and report its trace id and its parent's span id."""
    with trace.get_tracer("agent").start_as_current_span("agent.after_resume") as span:
        context = span.get_span_context()
        parent = getattr(span, "parent", None)
        entry = {
            "handoff_id": handoff.id,
            "recording": span.is_recording(),
            "trace_id": format(context.trace_id, "032x"),
            "span_id": format(context.span_id, "016x"),
            "parent_span_id": format(parent.span_id, "016x") if parent else None,
        }
    Redis.from_url(os.environ["REDIS_URL"]).rpush(CONTINUED, json.dumps(entry))


def continued(redis: Redis) -> list[dict[str, Any]]:
    """What ``continue_run`` reported, oldest first."""
    return [json.loads(raw) for raw in redis.lrange(CONTINUED, 0, -1)]
