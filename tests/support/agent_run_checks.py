"""What every agent-run adapter (OpenAI Agents SDK, Pydantic AI, Agent Framework agents)
must do once its run stopped at two refund calls (A-1 for 30 USD, B-2 for 5), checked the
same way for each: ``agents`` is the adapter's test agents module (``tests/support``), which
records the tools' runs and the finished runs in the test Redis."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Protocol

import pytest
from redis import Redis

from store.exceptions import AlreadyDecided
from store.models import Handoff, TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support.adapter_runs import recorded
from tests.support.preloaded_workers import kill_worker_and_horse
from worker.client import Handoffs


class RunAdapter(Protocol):
    def final_output(self, run_id: str) -> Any: ...


def finished(redis: Redis, agents: ModuleType) -> list[dict[str, Any]]:
    """The runs the adapter reported finished (its ``on_finish``), oldest first."""
    return recorded(redis, agents.FINISHED)


def edit_then_reject_continue_the_run_once(
    redis: Redis,
    handoffs: Handoffs,
    adapter: RunAdapter,
    agents: ModuleType,
    calls: tuple[Handoff, Handoff],
    *,
    output: str,
) -> None:
    """The first call approved with an edit, the second rejected with a reason: the run goes
    on once, after both, with the edited call run and ``output`` its answer; a later click
    changes nothing and no second resume shows up."""
    first, second = calls
    handoffs.decide(first.id, "approved", by="U_ALICE", edited_args={"amount_usd": 25})
    wait_until(lambda: handoffs.get(first.id).resume.state is TaskState.COMPLETED)
    assert finished(redis, agents) == [] and agents.tool_runs(redis) == []  # waits for the other
    handoffs.decide(second.id, "rejected", by="U_BOB", comment="B-2 was already refunded")
    wait_until(lambda: len(finished(redis, agents)) == 1, timeout=30)

    assert finished(redis, agents) == [{"run_id": "run-two", "output": output}]
    assert adapter.final_output("run-two") == output
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 25]}]

    with pytest.raises(AlreadyDecided):
        handoffs.decide(second.id, "approved", by="U_CAROL")
    time.sleep(1.0)  # room for a second resume to show up
    assert len(finished(redis, agents)) == 1
    assert len(agents.tool_runs(redis)) == 1


def worker_killed_mid_resume_runs_no_tool_twice(
    redis: Redis,
    workers: WorkerProcesses,
    handoffs: Handoffs,
    agents: ModuleType,
    calls: tuple[Handoff, Handoff],
    *,
    first_edit: dict[str, Any] | None,
    output: str,
) -> None:
    """Both calls approved (the first with ``first_edit``); the model hangs once the tools
    have run, and the worker dies after the side effects: the next attempt finishes the run
    with ``output`` from the recorded results, running no tool again."""
    first, second = calls
    handoffs.decide(first.id, "approved", by="U_ALICE", edited_args=first_edit)
    handoffs.decide(second.id, "approved", by="U_ALICE")
    wait_until(lambda: redis.exists(agents.HUNG), timeout=30)
    kill_worker_and_horse(workers, redis.get(agents.HUNG))
    assert len(agents.tool_runs(redis)) == 2

    wait_until(lambda: len(finished(redis, agents)) == 1, timeout=40)

    assert finished(redis, agents)[0]["output"] == output
    amount = (first_edit or {}).get("amount_usd", 30)
    assert sorted(run["args"] for run in agents.tool_runs(redis)) == [["A-1", amount], ["B-2", 5]]
    resumer = max((handoffs.get(first.id), handoffs.get(second.id)), key=lambda h: h.resume.attempt)
    # Attempt 2 takes over (a third if the second outlives its 3 s timeout on a loaded
    # machine); each later attempt replays the stored run with the recorded results.
    assert resumer.resume.attempt >= 2
    assert workers.logs().count("already ran for call") >= 2
