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

import operator
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from bench import adapter_resume, common
from bench.adapter_resume import Options, ResumeReport, Samples
from bench.common import RedisServer
from store.models import Handoff
from worker.adapters.langgraph import LangGraphHandoffs, resume_thread
from worker.adapters.pauses import forget_built
from worker.client import Handoffs

QUICK = adapter_resume.QUICK
"""A smoke run: seconds, not figures."""

CHECKPOINTS_ENV = "BENCH_LANGGRAPH_CHECKPOINTS"
"""Environment variable naming the SQLite file the benchmark graph checkpoints to."""

GRAPH_FACTORY = "bench.langgraph_resume:build_graph"
FIGURE = "LangGraph resume, adapter / direct (median)"
TITLE = "LangGraph resume: through the adapter vs graph.invoke(Command(resume=...)) directly"


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


def time_resumes(
    handoffs: TimedHandoffs, rounds: int, warmup: int
) -> tuple[Samples, Samples, list[float]]:
    """Time ``rounds`` resumes each way (after ``warmup``): direct, adapter, and the part
    of each adapter resume spent creating the next handoff."""
    adapter = LangGraphHandoffs(handoffs, GRAPH_FACTORY)
    total = rounds + warmup
    graph = adapter.graph
    direct_config = {"configurable": {"thread_id": "direct"}}
    result = graph.invoke({"limit": total}, direct_config, durability="sync")
    interrupt_id = result["__interrupt__"][0].id
    [pending] = adapter.start({"limit": total}, thread_id="adapter").handoffs

    direct, through_adapter, creating = Samples(), Samples(), []
    for i in range(total):
        keep = i >= warmup
        resume: Command[Any] = Command(resume={interrupt_id: {"type": "approve"}})
        with direct.timing(keep):
            result = graph.invoke(resume, direct_config, durability="sync")
        if i + 1 < total:
            interrupt_id = result["__interrupt__"][0].id

        decided = handoffs.decide(pending.id, "approved", by=adapter_resume.DECIDER)
        handoffs.creating = 0.0
        with through_adapter.timing(keep):
            resume_thread(decided, handoffs=handoffs)
        if i + 1 < total:
            [pending] = handoffs.list_pending().items
        if keep:
            creating.append(handoffs.creating)
    _check_same_run(graph, direct_config, total)
    _check_same_run(graph, {"configurable": {"thread_id": "adapter"}}, total)
    return direct, through_adapter, creating


def _check_same_run(graph: Any, config: dict[str, Any], total: int) -> None:
    done = graph.get_state(config).values["done"]
    if done != list(range(total)):
        raise AssertionError(f"thread {config} did not run every step once: {done}")


HOW = [
    "  graph: review (interrupt) -> act -> review ..., two threads, rounds alternate",
    "  timed, per resume, in this process:",
    "    direct  = graph.invoke(Command(resume={interrupt_id: value}), config)",
    "    adapter = resume_thread(decided_handoff): what a worker runs (pause claim,",
    "              pending-interrupt check, the same invoke, bookkeeping, and the next",
    "              interrupt handed to a person); not timed: the decision itself,",
    "              RQ dispatch, the work-horse fork",
]
"""What the report says was timed."""


def breakdown(direct: Samples, adapter: Samples, creating: list[float]) -> list[str]:
    """How much the adapter adds, how much of it creating the next handoff takes
    (``creating``: seconds of each adapter resume), and the ratio by CPU and without that
    creation."""
    median = statistics.median
    added = median(adapter.wall) - median(direct.wall)
    without_handoff = [a - c for a, c in zip(adapter.wall, creating, strict=True)]
    by_cpu = median(adapter.cpu) / median(direct.cpu)
    resume_only = median(without_handoff) / median(direct.wall)
    return [
        f"  adapter adds {added * 1000:.2f} ms per resume (median), of which "
        f"{median(creating) * 1000:.2f} ms create the next handoff",
        f"  ratio by cpu median {by_cpu:.2f}x; by wall median without creating the next "
        f"handoff {resume_only:.2f}x",
    ]


def run(server: RedisServer, options: Options) -> ResumeReport:
    """Time both ways on ``server``, with a SQLite checkpointer in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        checkpoints = Path(folder) / "checkpoints.sqlite"
        os.environ[CHECKPOINTS_ENV] = str(checkpoints)
        forget_built()
        try:
            with common.namespaced_client(server, "benchlg") as (redis, namespace):
                handoffs = TimedHandoffs(redis, namespace=namespace)
                direct, adapter, creating = time_resumes(handoffs, options.rounds, options.warmup)
        finally:
            forget_built()  # the graph's SQLite connection points into the folder
    details = [
        f"  checkpointer: SqliteSaver on {checkpoints}, durability='sync' for both",
        *HOW,
        adapter_resume.rounds_line(options),
    ]
    report = ResumeReport(server.description, options, direct, adapter, FIGURE, TITLE, details)
    report.remarks = breakdown(direct, adapter, creating)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return adapter_resume.main(argv, __doc__ or "", Options, run)


if __name__ == "__main__":
    sys.exit(main())
