"""Dotted paths that are stored in Redis (resume targets) or in queued RQ jobs (job
functions) keep resolving after the code moved: a handoff created before a move is still
resumed by a worker after it."""

from __future__ import annotations

import importlib
import json

import pytest
from redis import Redis

from bot.dev.demo_agent import RESUMED_LIST
from store.models import TaskState
from tests.conftest import WorkerProcesses, wait_until
from worker.client import Handoffs

QUEUED_JOB_FUNCTIONS = [
    "worker.jobs.run_delivery",
    "worker.jobs.run_resume",
    "worker.jobs.run_notify",
    "worker.jobs.run_remind",
    "worker.jobs.run_escalate",
]


@pytest.mark.parametrize("path", QUEUED_JOB_FUNCTIONS)
def test_job_functions_named_in_queued_jobs_still_import(path: str) -> None:
    module, _, name = path.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))


@pytest.mark.parametrize(
    "target",
    [
        "bot.demo:on_decision",  # stored by `handoff dev` before the demo moved
        "bot.dev.demo_agent:on_decision",  # what it stores now
    ],
)
def test_a_demo_handoff_stored_with_its_resume_target_is_resumed_by_a_worker(
    target: str, redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    redis.delete(RESUMED_LIST)
    workers.start()
    handoff = handoffs.request_approval(
        run_id="run-demo",
        thread_id="run-demo-thread",
        action="issue_refund",
        args={"order_id": "A-1001"},
        resume=target,
    )
    assert handoffs.get(handoff.id).resume_target == target

    handoffs.decide(handoff.id, "approved", by="U0DEVREVIEWER")

    wait_until(lambda: handoffs.get(handoff.id).resume.state is TaskState.COMPLETED)
    [report] = [json.loads(raw) for raw in redis.lrange(RESUMED_LIST, 0, -1)]
    assert (report["handoff_id"], report["status"]) == (handoff.id, "approved")
    assert report["decided_by"] == "U0DEVREVIEWER"
