"""CrewAI resume benchmark: the adapter's resume of a Flow against CrewAI's own resume.

Not a test: it measures and prints figures. It needs CrewAI, which cannot share an
environment with the ``mcp`` extra (CrewAI pins mcp 1.x): run it in the side environment
the CrewAI tests build (``.venv-crewai``; ``bench/run_all`` skips it, saying so, where
CrewAI is not installed). Two flows of the same steps, each persisted to SQLite (CrewAI's
``SQLiteFlowPersistence``), pause at two ``@human_feedback`` steps in turn, then finish:

- **direct**: the feedback provider only pauses the flow (raises CrewAI's
  ``HumanFeedbackPending``); timed ``Flow.from_pending(flow_id, persistence)`` then
  ``flow.resume(feedback)``, what CrewAI's own async human feedback resume is. The first
  resume of a run pauses at the next step, the second finishes the run.
- **adapter**: ``SlackFeedbackProvider`` hands each step to people (a question); the
  handoff is decided with ``Handoffs.decide`` (untimed: that is the person's click), then
  timed ``worker.adapters.crewai.resume_flow(handoff)`` called in this process, which is
  what a worker runs: the pause claim in Redis, the pending feedback written back to the
  persistence, the same ``from_pending`` and resume, the pause bookkeeping, and the next
  step handed to a person (creating its handoff). RQ dispatch and the work-horse fork are
  not timed (``bench/lifecycle.py`` measures those).

The steps have no ``emit`` (the feedback is the answer), so no LLM is asked either way.
The adapter's figure over the direct one is the overhead ratio; the target is <= 1.5x. It
uses a fresh random namespace and deletes only its keys.

Run from the repository root::

    .venv-crewai/bin/python -m bench.crewai_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Set before CrewAI is imported: nothing here needs the network.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai.flow import Flow, human_feedback, listen, start
from crewai.flow.async_feedback import HumanFeedbackPending, PendingFeedbackContext
from crewai.flow.persistence import SQLiteFlowPersistence
from redis import Redis

from bench import common
from bench.common import Figure, RedisServer, Target
from worker.adapters.crewai import SlackFeedbackProvider, resume_flow
from worker.client import Handoffs

RATIO_TARGET = 1.5
"""Adapter resume time over direct resume time that the design aims for (at most)."""

STOPS = 2
"""Feedback steps each run pauses at before it finishes."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run."""

    rounds: int = 50
    """Timed runs each way (``STOPS`` resumes each)."""
    warmup: int = 5
    """Untimed runs first."""


QUICK = Options(rounds=2, warmup=1)
"""A smoke run: seconds, not figures."""


class PauseOnly:
    """CrewAI's async feedback provider at its barest: pause the flow, nothing else."""

    def request_feedback(self, context: PendingFeedbackContext, flow: Flow[Any]) -> str:
        raise HumanFeedbackPending(context=context)


slack = SlackFeedbackProvider(channel="C0BENCH")
"""The adapter's provider; ``time_resumes`` gives it the run's client."""


class _Quiet(Flow):  # type: ignore[type-arg]
    # No CrewAI memory (a LanceDB store): nothing here uses it (CrewAI's own internal
    # flows skip it the same way).
    _skip_auto_memory: bool = True


class DirectFlow(_Quiet):
    """Two feedback steps, then a result; paused by ``PauseOnly``."""

    @start()
    @human_feedback(message="First?", provider=PauseOnly())
    def first(self) -> str:
        return "first draft"

    @listen(first)
    @human_feedback(message="Second?", provider=PauseOnly())
    def second(self) -> str:
        return "second draft"

    @listen(second)
    def done(self, result: Any) -> str:
        return f"done: {result.feedback}"


class AdapterFlow(_Quiet):
    """The same steps, handed to people by ``SlackFeedbackProvider``."""

    @start()
    @human_feedback(message="First?", provider=slack)
    def first(self) -> str:
        return "first draft"

    @listen(first)
    @human_feedback(message="Second?", provider=slack)
    def second(self) -> str:
        return "second draft"

    @listen(second)
    def done(self, result: Any) -> str:
        return f"done: {result.feedback}"


@dataclass
class Samples:
    """Seconds per resume, wall-clock and CPU (this process)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)


def time_resumes(redis: Redis, rounds: int, warmup: int, db: Path) -> tuple[Samples, Samples]:
    """Time ``rounds`` runs' resumes each way (after ``warmup`` runs), alternating: each
    run pauses ``STOPS`` times, so half the resumes pause at the next step and half finish
    the run."""
    namespace = common.new_namespace("benchcw", 10)
    handoffs = Handoffs(redis, namespace=namespace)
    slack._handoffs = handoffs
    persistence = SQLiteFlowPersistence(str(db))
    direct, through_adapter = Samples(), Samples()
    try:
        for i in range(rounds + warmup):
            timed = i >= warmup
            outcome: Any = DirectFlow(persistence=persistence).kickoff()
            while isinstance(outcome, HumanFeedbackPending):
                wall, cpu = time.perf_counter(), time.process_time()
                flow = DirectFlow.from_pending(outcome.context.flow_id, persistence)
                outcome = flow.resume("fine")
                if timed:
                    direct.add(time.perf_counter() - wall, time.process_time() - cpu)
            if outcome != "done: fine":
                raise AssertionError(f"the direct run ended {outcome!r}")

            paused = AdapterFlow(persistence=persistence).kickoff()
            flow_id = paused.context.flow_id  # type: ignore[union-attr]
            pending = handoffs.list_pending(run_id=flow_id).items
            while pending:
                decided = handoffs.decide(pending[0].id, "answered", by="U_BENCH", answer="fine")
                wall, cpu = time.perf_counter(), time.process_time()
                asyncio.run(resume_flow(decided, handoffs=handoffs))
                if timed:
                    through_adapter.add(time.perf_counter() - wall, time.process_time() - cpu)
                pending = handoffs.list_pending(run_id=flow_id).items
            if slack.final_output(flow_id) != "done: fine":
                raise AssertionError(
                    f"flow {flow_id} did not finish: {slack.final_output(flow_id)}"
                )
        return direct, through_adapter
    finally:
        slack._handoffs = None
        common.delete_namespace(redis, namespace)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


@dataclass
class CrewAIReport:
    """Resume times both ways."""

    server: str
    options: Options
    direct: Samples
    adapter: Samples
    problems: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Adapter over direct, wall-clock medians."""
        return statistics.median(self.adapter.wall) / statistics.median(self.direct.wall)

    def figures(self) -> list[Figure]:
        """The row for ``bench/run_all``'s table."""
        return [
            Figure(
                "CrewAI Flow resume, adapter / direct (median)",
                self.ratio,
                "x",
                Target("<=", RATIO_TARGET),
            )
        ]

    def print_report(self) -> None:
        """Both ways' medians, p90 and CPU; the ratio next to its target."""
        median = statistics.median

        def row(name: str, samples: Samples) -> str:
            ordered = sorted(samples.wall)
            p90 = ordered[int(0.9 * (len(ordered) - 1))]
            return f"  {name:<8}{_ms(median(samples.wall))}  {_ms(p90)}  {_ms(median(samples.cpu))}"

        print("CrewAI Flow resume: through the adapter vs Flow.from_pending(...).resume(...)")
        print(f"  redis: {self.server}; load average {common.load_average()}")
        print(
            f"  runs: {self.options.rounds} each way ({STOPS} resumes each), after "
            f"{self.options.warmup} warm-up runs; an adapter resume that does not finish the "
            "flow hands the next step to a person"
        )
        print(f"  {'':<8}{'median':>10}  {'p90':>10}  {'cpu median':>10}")
        print(row("direct", self.direct))
        print(row("adapter", self.adapter))
        verdict = "OK" if self.ratio <= RATIO_TARGET else "ABOVE TARGET"
        print(f"  ratio adapter/direct: {self.ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})")


def run(server: RedisServer, options: Options) -> CrewAIReport:
    """Time both ways on ``server``."""
    redis = server.client()
    with tempfile.TemporaryDirectory(prefix="bench-crewai-") as tmp:
        try:
            direct, adapter = time_resumes(
                redis, options.rounds, options.warmup, Path(tmp) / "flows.db"
            )
        finally:
            redis.close()
    return CrewAIReport(server.description, options, direct, adapter)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_redis_option(parser)
    common.add_options(
        parser, Options(), {"rounds": "timed runs each way", "warmup": "untimed runs first"}
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return common.measure_and_print(parse_args(argv), Options, run, passed=common.all_targets_met)


if __name__ == "__main__":
    # Run as bench.crewai_resume, not __main__: a worker finds a flow's class by its module
    # (the adapter refuses classes of __main__).
    from bench import crewai_resume

    sys.exit(crewai_resume.main())
