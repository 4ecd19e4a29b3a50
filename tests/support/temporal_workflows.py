"""Temporal workflows for the adapter's tests and benchmark, loaded by Temporal's workflow
sandbox (so this module imports only Temporal, the standard library and, passed through,
the adapter)."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from worker.adapters.temporal import (
        CREATE_ACTIVITY,
        Decision,
        HandoffActivities,
        HandoffRequest,
        ask_human,
        request_approval,
        wait_for_decision,
    )


@dataclass
class Plan:
    """What ``AskingWorkflow`` asks, all at once: each entry is ``request_approval``'s or
    ``ask_human``'s arguments (``"question"`` picks the latter)."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    hold: bool = False
    """After the decisions, wait for the ``release`` signal before returning."""


@workflow.defn
class AskingWorkflow:
    """Asks everything its plan says at once and returns the decisions, in order."""

    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self, plan: Plan) -> list[dict[str, Any]]:
        decisions = await asyncio.gather(*(self._ask(dict(r)) for r in plan.requests))
        if plan.hold:
            await workflow.wait_condition(lambda: self.released)
        return [asdict(decision) for decision in decisions]

    @workflow.signal
    def release(self) -> None:
        self.released = True

    async def _ask(self, request: dict[str, Any]) -> Decision:
        if "question" in request:
            return await ask_human(request.pop("question"), **request)
        return await request_approval(request.pop("action"), request.pop("args", None), **request)


@workflow.defn
class LateListenerWorkflow:
    """Creates its handoff by running the create activity itself, and only starts
    listening for the decision (registers the handlers) once signalled ``listen``."""

    def __init__(self) -> None:
        self.listening = False

    @workflow.run
    async def run(self, action: str) -> dict[str, Any]:
        handoff_id: str = await workflow.execute_activity(
            CREATE_ACTIVITY,
            HandoffRequest(kind="approval", action=action, args={}),
            start_to_close_timeout=timedelta(seconds=30),
            result_type=str,
        )
        await workflow.wait_condition(lambda: self.listening)
        return asdict(await wait_for_decision(handoff_id))

    @workflow.signal
    def listen(self) -> None:
        self.listening = True


@workflow.defn
class RepeatingWorkflow:
    """Asks for an approval ``rounds`` times, one after the other; returns how many were
    approved (``bench/temporal_resume.py``)."""

    @workflow.run
    async def run(self, rounds: int) -> int:
        approved = 0
        for i in range(rounds):
            decision = await request_approval("issue_refund", {"order_id": f"A-{i}"})
            approved += decision.approved
        return approved


def losing_first_reply(activities: HandoffActivities) -> Any:
    """The create activity, with the reply of its first attempt lost after the handoff
    was created (so Temporal retries it)."""

    @activity.defn(name=CREATE_ACTIVITY)
    async def create_handoff(request: HandoffRequest) -> str:
        handoff_id = await activities.create_handoff(request)
        if activity.info().attempt == 1:
            raise RuntimeError(f"the reply of attempt 1 was lost (handoff {handoff_id})")
        return handoff_id

    return create_handoff
