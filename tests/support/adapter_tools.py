"""Module-level tools guarded by ``require_approval``, for the decorator tests' durable
calls: a worker imports this module to make the approved call."""

from __future__ import annotations

import json
import os
from typing import Any

from redis import Redis

from store.models import Handoff
from worker.adapters.decorators import current_handoff, require_approval
from worker.client import Handoffs

CALLS = "test:tools:calls"
THEN = "test:tools:then"


def _redis() -> Redis:
    return Redis.from_url(os.environ["REDIS_URL"])


@require_approval(handoffs=Handoffs.from_env, then="tests.support.adapter_tools:after_refund")
def issue_refund(order_id: str, amount_usd: int = 10, *, note: str | None = None) -> str:
    """Refund part of an order."""
    handoff = current_handoff()
    call = {"args": [order_id, amount_usd, note], "handoff_id": handoff.id if handoff else None}
    _redis().rpush(CALLS, json.dumps(call))
    return f"refunded {amount_usd} USD on {order_id}"


def after_refund(handoff: Handoff, result: Any) -> None:
    """``then`` target: note how the durable call ended."""
    _redis().rpush(THEN, json.dumps({"status": handoff.status.value, "result": result}))
