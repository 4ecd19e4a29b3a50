"""LangGraph resume benchmark: the adapter's resume against a bare ``Command`` resume.

Not a test: it measures and prints figures. One compiled graph (``review`` interrupts for an
approval, ``act`` counts, back to ``review``), one SQLite checkpointer on a temporary file,
``durability="sync"`` for both. Two threads of that graph are driven in alternating rounds:

- **direct**: timed ``graph.invoke(Command(resume={interrupt_id: value}), config)``; the
  next interrupt id comes free with the result.
- **adapter**: the handoff is decided with ``Handoffs.decide`` (untimed: that is the
  person's click), then timed ``worker.adapters.langgraph.resume_thread(handoff)`` called
  in this process, which is exactly what a worker runs: the pause claim in Redis, the
  pending-interrupt check, the same ``graph.invoke(Command(...))``, the pause bookkeeping,
  and handing the next interrupt to a person (creating its handoff). RQ dispatch and the
  work-horse fork are not timed (``bench/lifecycle.py`` measures those).

The adapter's figure over the direct one is the overhead ratio; the target is <= 1.5x.
It uses a fresh random namespace and deletes only its keys, so it is safe to point at a
Redis that holds other data.

Run from the repository root::

    .venv/bin/python -m bench.langgraph_resume                 # embedded server
    .venv/bin/python -m bench.langgraph_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import operator
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from redis import Redis

from bench import common
from bench.common import Figure, RedisServer, Target
from store.models import Handoff
from worker.adapters.langgraph import LangGraphHandoffs, resume_thread
from worker.adapters.pauses import forget_built
from worker.client import Handoffs

RATIO_TARGET = 1.5
"""Adapter resume time over direct resume time that the design aims for (at most)."""

CHECKPOINTS_ENV = "BENCH_LANGGRAPH_CHECKPOINTS"
"""Environment variable naming the SQLite file the benchmark graph checkpoints to."""

GRAPH_FACTORY = "bench.langgraph_resume:build_graph"


@dataclass(frozen=True)
class Options:
    """The sizes of a run."""

    rounds: int = 200
    """Timed resumes each way."""
    warmup: int = 20
    """Untimed resumes first."""


QUICK = Options(rounds=3, warmup=1)
"""A smoke run: seconds, not figures."""


class LoopState(TypedDict, total=False):
    done: Annotated[list[int], operator.add]
    limit: int


def _review(state: LoopState) -> LoopState:
    interrupt({"action": "issue_refund", "args": {"order_id": f"A-{len(state.get('done', []))}"}})
    return {}


def _act(state: LoopState) -> LoopState:
    return {"done": [len(state.get("done", []))]}


def _next(state: LoopState) -> str:
    return END if len(state.get("done", [])) >= state["limit"] else "review"


def build_graph() -> Any:
    """The benchmark graph: review (interrupt) → act → review ... until ``limit`` acts."""
    builder = StateGraph(LoopState)
    builder.add_node("review", _review)
    builder.add_node("act", _act)
    builder.add_edge(START, "review")
    builder.add_edge("review", "act")
    builder.add_conditional_edges("act", _next, ["review", END])
    conn = sqlite3.connect(os.environ[CHECKPOINTS_ENV], check_same_thread=False)
    return builder.compile(checkpointer=SqliteSaver(conn))


@dataclass
class Samples:
    """Seconds per resume, wall-clock and CPU (this process, all threads)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


class TimedHandoffs(Handoffs):
    """``Handoffs`` that adds up the wall time spent creating handoffs (the adapter's
    hand-off of the next interrupt), to break the adapter's figure down."""

    creating = 0.0

    def request(self, *args: Any, **kwargs: Any) -> Handoff:
        started = time.perf_counter()
        try:
            return super().request(*args, **kwargs)
        finally:
            self.creating += time.perf_counter() - started


def time_resumes(redis: Redis, rounds: int, warmup: int) -> tuple[Samples, Samples, list[float]]:
    """Time ``rounds`` resumes each way (after ``warmup``): direct, adapter, and the part
    of each adapter resume spent creating the next handoff."""
    namespace = common.new_namespace("benchlg", 10)
    handoffs = TimedHandoffs(redis, namespace=namespace)
    adapter = LangGraphHandoffs(handoffs, GRAPH_FACTORY)
    total = rounds + warmup
    try:
        graph = adapter.graph
        direct_config = {"configurable": {"thread_id": "direct"}}
        result = graph.invoke({"limit": total}, direct_config, durability="sync")
        interrupt_id = result["__interrupt__"][0].id
        [pending] = adapter.start({"limit": total}, thread_id="adapter").handoffs

        direct, through_adapter, creating = Samples(), Samples(), []
        for i in range(total):
            resume: Command[Any] = Command(resume={interrupt_id: {"type": "approve"}})
            wall, cpu = time.perf_counter(), time.process_time()
            result = graph.invoke(resume, direct_config, durability="sync")
            direct_wall, direct_cpu = time.perf_counter() - wall, time.process_time() - cpu
            if i + 1 < total:
                interrupt_id = result["__interrupt__"][0].id

            decided = handoffs.decide(pending.id, "approved", by="U_BENCH")
            handoffs.creating = 0.0
            wall, cpu = time.perf_counter(), time.process_time()
            resume_thread(decided, handoffs=handoffs)
            adapter_wall, adapter_cpu = time.perf_counter() - wall, time.process_time() - cpu
            if i + 1 < total:
                [pending] = handoffs.list_pending().items

            if i >= warmup:
                direct.wall.append(direct_wall)
                direct.cpu.append(direct_cpu)
                through_adapter.wall.append(adapter_wall)
                through_adapter.cpu.append(adapter_cpu)
                creating.append(handoffs.creating)
        _check_same_run(graph, direct_config, total)
        _check_same_run(graph, {"configurable": {"thread_id": "adapter"}}, total)
        return direct, through_adapter, creating
    finally:
        common.delete_namespace(redis, namespace)


def _check_same_run(graph: Any, config: dict[str, Any], total: int) -> None:
    done = graph.get_state(config).values["done"]
    if done != list(range(total)):
        raise AssertionError(f"thread {config} did not run every step once: {done}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


@dataclass
class LangGraphReport:
    """Resume times both ways, and where the adapter's extra time goes."""

    server: str
    checkpoints: Path
    options: Options
    direct: Samples
    adapter: Samples
    creating: list[float]
    """Seconds of each adapter resume spent creating the next handoff."""
    problems: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Adapter over direct, wall-clock medians."""
        return statistics.median(self.adapter.wall) / statistics.median(self.direct.wall)

    def figures(self) -> list[Figure]:
        """The row for ``bench/run_all``'s table."""
        return [
            Figure(
                "LangGraph resume, adapter / direct (median)",
                self.ratio,
                "x",
                Target("<=", RATIO_TARGET),
            )
        ]

    def print_report(self) -> None:
        """Both ways' medians, p90, means and CPU; the ratio next to its target."""
        _print_report(self)


def run(server: RedisServer, options: Options) -> LangGraphReport:
    """Time both ways on ``server``, with a SQLite checkpointer in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        checkpoints = Path(folder) / "checkpoints.sqlite"
        os.environ[CHECKPOINTS_ENV] = str(checkpoints)
        forget_built()
        redis = server.client()
        try:
            direct, adapter, creating = time_resumes(redis, options.rounds, options.warmup)
        finally:
            redis.close()
            forget_built()  # the graph's SQLite connection points into the folder
    return LangGraphReport(server.description, checkpoints, options, direct, adapter, creating)


def _print_report(result: LangGraphReport) -> None:
    """Print the figures."""
    direct, adapter, creating = result.direct, result.adapter, result.creating
    rounds, warmup = result.options.rounds, result.options.warmup
    median = statistics.median

    def row(name: str, samples: Samples) -> str:
        ordered = sorted(samples.wall)
        p90 = ordered[int(0.9 * (len(ordered) - 1))]
        return (
            f"  {name:<8}{_ms(median(samples.wall))}  {_ms(p90)}  "
            f"{_ms(statistics.fmean(samples.wall))}  {_ms(median(samples.cpu))}"
        )

    ratio = result.ratio
    ratio_cpu = median(adapter.cpu) / median(direct.cpu)
    without_handoff = [a - c for a, c in zip(adapter.wall, creating, strict=True)]
    ratio_resume_only = median(without_handoff) / median(direct.wall)
    ok = ratio <= RATIO_TARGET
    print("LangGraph resume: through the adapter vs graph.invoke(Command(resume=...)) directly")
    print(
        f"  redis: {result.server}; load average {common.load_average()} on {os.cpu_count()} cores"
    )
    print(f"  checkpointer: SqliteSaver on {result.checkpoints}, durability='sync' for both")
    print("  graph: review (interrupt) -> act -> review ..., two threads, rounds alternate")
    print("  timed, per resume, in this process:")
    print("    direct  = graph.invoke(Command(resume={interrupt_id: value}), config)")
    print("    adapter = resume_thread(decided_handoff): what a worker runs (pause claim,")
    print("              pending-interrupt check, the same invoke, bookkeeping, and the next")
    print("              interrupt handed to a person); not timed: the decision itself,")
    print("              RQ dispatch, the work-horse fork")
    print(f"  rounds: {rounds} each way, after {warmup} warm-up rounds")
    print(f"  {'':<8}{'median':>10}  {'p90':>10}  {'mean':>10}  {'cpu median':>10}")
    print(row("direct", direct))
    print(row("adapter", adapter))
    print(
        f"  adapter adds {(median(adapter.wall) - median(direct.wall)) * 1000:.2f} ms per "
        f"resume (median), of which {median(creating) * 1000:.2f} ms create the next handoff"
    )
    verdict = "OK" if ok else "ABOVE TARGET"
    print(
        f"  ratio adapter/direct: {ratio:.2f}x wall median   (target <= {RATIO_TARGET}x: {verdict})"
    )
    print(
        f"                        {ratio_cpu:.2f}x cpu median, {ratio_resume_only:.2f}x wall "
        "median without creating the next handoff"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_redis_option(parser)
    common.add_options(
        parser, Options(), {"rounds": "timed resumes each way", "warmup": "untimed resumes first"}
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return common.measure_and_print(parse_args(argv), Options, run, passed=common.all_targets_met)


if __name__ == "__main__":
    sys.exit(main())
