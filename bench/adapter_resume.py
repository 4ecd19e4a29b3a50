"""What the adapter-resume benchmarks share (``bench.<framework>_resume``): the rounds they
run, the resume times they sample, the overhead ratio they report and their command line.

Each of them times a framework's own resume (*direct*) against the same resume through our
adapter, in alternating rounds; the adapter's median over the direct one is the overhead
ratio, whose target is ``RATIO_TARGET``. Only the framework-specific setup stays in each.

``bench.crewai_resume`` imports this in the CrewAI side environment (``.venv-crewai``),
which has our package but none of its optional extras: keep the imports to the standard
library, ``bench.common`` and the core of ``store`` and ``worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import common
from bench.common import Figure, RedisServer, Target
from worker.client import Handoffs

RATIO_TARGET = 1.5
"""Adapter resume time over direct resume time that the design aims for (at most)."""

DECIDER = "U_BENCH"
"""Who decides the benchmarks' handoffs (untimed: that is the person's click)."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run; a benchmark whose sizes differ subclasses it with its own
    defaults (``bench.suite`` and ``--help`` read them)."""

    rounds: int = 200
    """Timed resumes each way."""
    warmup: int = 20
    """Untimed resumes first."""


QUICK = Options(rounds=3, warmup=1)
"""A smoke run: seconds, not figures."""


# -- samples -----------------------------------------------------------------------------


@dataclass
class Samples:
    """Seconds per resume, wall-clock and CPU (this process, all threads)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    @contextlib.contextmanager
    def timing(self, keep: bool = True) -> Iterator[None]:
        """Time the block; keep the sample when ``keep`` (warm-up rounds are not kept). A
        block that raises is not sampled."""
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        if keep:
            self.add(time.perf_counter() - wall, time.process_time() - cpu)


def ratio(direct: Samples, adapter: Samples) -> float:
    """Adapter over direct, wall-clock medians."""
    return statistics.median(adapter.wall) / statistics.median(direct.wall)


def ratio_figure(name: str, value: float) -> Figure:
    """The row of an overhead ratio in ``bench/run_all``'s table."""
    return Figure(name, value, "x", Target("<=", RATIO_TARGET))


# -- timing the adapter's side -----------------------------------------------------------


def decide_and_resume_each(
    handoffs: Handoffs,
    run_id: str,
    samples: Samples,
    keep: bool,
    resume: Callable[..., Coroutine[Any, Any, Any]],
    outcome: str,
    *,
    run: Callable[[Coroutine[Any, Any, Any]], Any] = asyncio.run,
    **details: Any,
) -> None:
    """Decide the pending handoff of ``run_id`` (``outcome`` and ``details`` as
    ``Handoffs.decide`` takes them; untimed: that is the person's click), then time
    ``resume(decided, handoffs=...)``, what a worker runs, until the run hands nothing more
    to a person. ``run`` drives the coroutine (a benchmark whose direct side runs on one
    event loop passes that loop's ``asyncio.Runner.run``, so both sides pay the same)."""
    pending = handoffs.list_pending(run_id=run_id).items
    while pending:
        decided = handoffs.decide(pending[0].id, outcome, by=DECIDER, **details)
        with samples.timing(keep):
            run(resume(decided, handoffs=handoffs))
        pending = handoffs.list_pending(run_id=run_id).items


@contextlib.contextmanager
def handoffs_of_run(server: RedisServer, prefix: str) -> Iterator[Handoffs]:
    """A client on ``server`` in a fresh namespace, whose keys are deleted on exit (then
    the client is closed)."""
    with common.namespaced_client(server, prefix) as (redis, namespace):
        yield Handoffs(redis, namespace=namespace)


# -- the report ----------------------------------------------------------------------------


def ms(seconds: float) -> str:
    """``  12.34 ms``: a resume time in the reports' columns."""
    return f"{seconds * 1000:7.2f} ms"


def redis_line(server: str) -> str:
    """Which Redis, and how busy the machine was (it skews wall-clock figures)."""
    return f"  redis: {server}; load average {common.load_average()} on {os.cpu_count()} cores"


def print_table(rows: dict[str, Samples]) -> None:
    """Median, p90, mean and CPU median of each row's samples."""
    print(f"  {'':<8}{'median':>10}  {'p90':>10}  {'mean':>10}  {'cpu median':>10}")
    for name, samples in rows.items():
        median_wall = ms(statistics.median(samples.wall))
        p90 = ms(common.percentile(samples.wall, 0.9))
        mean = ms(statistics.fmean(samples.wall))
        print(f"  {name:<8}{median_wall}  {p90}  {mean}  {ms(statistics.median(samples.cpu))}")


def ratio_line(value: float) -> str:
    """The ratio next to its target."""
    verdict = "OK" if value <= RATIO_TARGET else "ABOVE TARGET"
    return f"  ratio adapter/direct: {value:.2f}x (target <= {RATIO_TARGET}x: {verdict})"


@dataclass
class ResumeReport:
    """Resume times both ways, for one kind of run, and the words around them."""

    server: str
    options: Options
    direct: Samples
    adapter: Samples
    figure: str
    """The row's name in ``bench/run_all``'s table."""
    title: str
    """The first line of the report: what is compared with what."""
    details: list[str]
    """The lines between the Redis line and the table: what was timed, how often."""
    remarks: list[str] = field(default_factory=list)
    """The lines under the ratio (where a benchmark breaks its figure down)."""
    problems: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Adapter over direct, wall-clock medians."""
        return ratio(self.direct, self.adapter)

    def figures(self) -> list[Figure]:
        """The row for ``bench/run_all``'s table."""
        return [ratio_figure(self.figure, self.ratio)]

    def print_report(self) -> None:
        """Both ways' medians, p90, means and CPU; the ratio next to its target."""
        print(self.title)
        print(redis_line(self.server))
        for line in self.details:
            print(line)
        print_table({"direct": self.direct, "adapter": self.adapter})
        print(ratio_line(self.ratio))
        for line in [*self.remarks, *(f"  PROBLEM: {p}" for p in self.problems)]:
            print(line)


def rounds_line(options: Options) -> str:
    """How many rounds each way, after how many warm-up ones."""
    return f"  rounds: {options.rounds} each way, after {options.warmup} warm-up"


def runs_line(options: Options, stops: int, unfinished: str) -> str:
    """The rounds of a benchmark whose runs each pause ``stops`` times: how many runs, and
    what an adapter resume that does not finish the run does (``unfinished``)."""
    return (
        f"  runs: {options.rounds} each way ({stops} resumes each), after {options.warmup} "
        f"warm-up runs; an adapter resume that does not finish the {unfinished}"
    )


# -- the command line --------------------------------------------------------------------


def main(
    argv: list[str] | None,
    doc: str,
    options: type[Options],
    run: Callable[[RedisServer, Any], Any],
    *,
    counted: str = "resumes",
) -> int:
    """A benchmark's ``main``: ``--redis-url``, ``--rounds`` and ``--warmup`` (of
    ``counted``, defaulting to ``options()``), then ``run``; 0 when every ratio meets the
    target, 1 otherwise. ``doc``: the module's docstring, whose first paragraph is the
    description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    common.add_redis_option(parser)
    helps = {"rounds": f"timed {counted} each way", "warmup": f"untimed {counted} first"}
    common.add_options(parser, options(), helps)
    return common.measure_and_print(
        parser.parse_args(argv), options, run, passed=common.all_targets_met
    )
