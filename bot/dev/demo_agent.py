"""The demo agent `handoff dev` runs: one approval and one question, resumed in a worker."""

from __future__ import annotations

import json
import os

from redis import Redis

from store.models import Handoff
from worker.client import Handoffs

RESUMED_LIST = "handoff-demo:resumed"
"""Where the demo's resume target reports what it received, for `handoff dev` to print."""


def on_decision(handoff: Handoff, *, attempt: int) -> None:
    """Resume target of the demo run: report the decision the run was resumed with."""
    decision = handoff.resume_data
    report = {
        "handoff_id": handoff.id,
        "run_id": handoff.run_id,
        "request_type": handoff.request_type.value,
        "status": handoff.status.value,
        "decided_by": decision.decided_by if decision else None,
        "answer": decision.answer if decision else None,
        "comment": decision.comment if decision else None,
        "edited_args": decision.edited_args if decision else None,
        "attempt": attempt,
    }
    Redis.from_url(os.environ["REDIS_URL"]).rpush(RESUMED_LIST, json.dumps(report))


def start_demo_run(handoffs: Handoffs, run_id: str, *, channel: str) -> list[Handoff]:
    """Request what the demo agent needs from a person: an approval, then an answer."""
    approval = handoffs.request_approval(
        run_id=run_id,
        thread_id=f"{run_id}-thread",
        action="issue_refund",
        args={"order_id": "A-1001", "amount_usd": 30, "reason": "charged twice"},
        context="Dana Lee was charged twice for order A-1001; I want to refund one charge.",
        channel=channel,
        resume="bot.dev.demo_agent:on_decision",
        agent_name="demo-support-agent",
        idempotency_key=f"{run_id}-refund",
    )
    question = handoffs.ask(
        run_id=run_id,
        thread_id=f"{run_id}-thread",
        question="Two customers reported the outage. Which one should I contact first?",
        choices=["Dana Lee (enterprise)", "Sam Ortiz (trial)"],
        context="Both opened tickets within a minute of each other.",
        channel=channel,
        resume="bot.dev.demo_agent:on_decision",
        agent_name="demo-support-agent",
        idempotency_key=f"{run_id}-question",
    )
    return [approval, question]
