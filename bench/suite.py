"""Every benchmark in one run, and one table of figures: what ``bench/run_all`` runs.

Each benchmark module exposes ``Options`` (the issue's sizes), ``QUICK`` (smoke sizes)
and ``run(server, options)``, whose report gives its figures (see ``bench.common``). This
runs them one after the other on one Redis (``--redis-url``, default an embedded server)
and prints one table: figure, measured value, target, met or not. A benchmark that fails
to run, or whose checks break (a resume ran twice, a click got an error), is listed under
the table and makes the exit status 1; a missed target does not (the figures are noisy
on a shared machine: read them, they are not a test).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bench.common import Figure, RedisServer, load_average, progress, redis_server, run_main

BENCHMARKS = {
    "lifecycle": "create + decide against raw round trips; the full lifecycle through workers",
    "clicks": "signed clicks: handoff serve against a bare Bolt app; click -> resume started",
    "resume_latency": "click -> agent running again: Handoffs.wait() against polling",
    "memory": "Redis memory per pending handoff",
    "listing": "/handoff list and the App Home with many pending handoffs",
    "langgraph_resume": "a LangGraph resume through the adapter against a direct one",
    "pydantic_ai_resume": "a Pydantic AI resume through the adapter against a direct one",
    "agent_framework_resume": (
        "an Agent Framework agent and workflow resume through the adapter against direct ones"
    ),
    "temporal_resume": "a decision delivered to a Temporal workflow: adapter vs execute_update",
    "crewai_resume": "a CrewAI Flow resume through the adapter against a direct one",
    "api": "create+decide over HTTP against the Python client; 1,000 held ?wait= requests",
    "post_latency": "request_approval returning -> message posted, idle and under a burst",
    "peers": "slack-handoff against awaithumans (--quick: our side only, the peer not installed)",
}
"""Module of ``bench`` -> what it measures, in the order they run."""

SIDE_ENVIRONMENT = {
    "crewai_resume": (
        "crewai",
        "CrewAI is not installed here (it pins mcp 1.x, so it cannot share an environment "
        "with the mcp extra): run .venv-crewai/bin/python -m bench.crewai_resume (the "
        "CrewAI tests build .venv-crewai)",
    ),
}
"""Benchmarks of a framework that lives in an environment of its own: skipped, with the
reason, where its package is not installed."""


@dataclass
class Section:
    """One benchmark's part of the table."""

    name: str
    seconds: float = 0.0
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What a report says besides its figures (``notes``, optional): a part it skipped and
    why, a target missed by how much. Printed under the table; not failures."""
    skipped: str | None = None
    """Why it did not run (not a problem: its framework is not installed here)."""


def skip_reason(name: str) -> str | None:
    """Why ``bench.<name>`` cannot run in this environment, if it cannot."""
    package, reason = SIDE_ENVIRONMENT.get(name, (None, ""))
    if package is not None and importlib.util.find_spec(package) is None:
        return reason
    return None


def run_benchmark(name: str, server: RedisServer, *, quick: bool, details: bool) -> Section:
    """Run ``bench.<name>`` at the issue's sizes (or its ``QUICK`` ones); an exception
    becomes a problem of its section, so the other benchmarks still run."""
    section = Section(name)
    if (reason := skip_reason(name)) is not None:
        section.skipped = reason
        return section
    started = time.monotonic()
    progress(f"{name}: {BENCHMARKS[name]}")
    try:
        module = importlib.import_module(f"bench.{name}")
        options = module.QUICK if quick else module.Options()
        report = module.run(server, options)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        section.problems.append(f"did not run: {type(exc).__name__}: {exc}")
    else:
        section.figures = report.figures()
        section.problems = list(report.problems)
        section.notes = list(getattr(report, "notes", []))
        if details:
            report.print_report()
    section.seconds = time.monotonic() - started
    return section


def print_table(sections: list[Section], server: RedisServer, *, quick: bool) -> None:
    """The one table, then every problem."""
    sizes = "smoke sizes (--quick): the figures mean nothing" if quick else "the issue's sizes"
    figures = [figure for section in sections for figure in section.figures]
    width = max([len("figure"), *(len(figure.name) + 2 for figure in figures)]) + 2
    print(f"\nslack-handoff benchmarks — {server.description}")
    print(f"  {os.cpu_count()} CPUs; load average at the end {load_average()}; {sizes}\n")
    print(f"{'figure':<{width}}{'measured':>14}{'target':>14}   met")
    for section in sections:
        if section.skipped is not None:
            print(f"{section.name} (bench/{section.name}.py): skipped: {section.skipped}")
            continue
        print(f"{section.name} (bench/{section.name}.py, {section.seconds:.0f} s)")
        for figure in section.figures:
            print(
                f"  {figure.name:<{width - 2}}{figure.shown_value():>14}"
                f"{figure.shown_target():>14}   {figure.verdict()}"
            )
    for section in sections:
        for note in section.notes:
            print(f"NOTE {section.name}: {note}")
    problems = [(s.name, p) for s in sections for p in s.problems]
    for name, problem in problems:
        print(f"FAIL {name}: {problem}")
    missed = sum(1 for figure in figures if figure.met is False)
    print(
        f"\n{len(figures)} figures, {sum(1 for f in figures if f.met)} targets met, "
        f"{missed} not met; {len(problems)} failed checks"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="bench/run_all",
        description="Run every benchmark and print one table of figures, next to their targets.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke run in seconds, not figures"
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="Redis to use (default: an embedded server); only the runs' own keys are "
        "written and deleted, nothing is flushed",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only these: {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--details", action="store_true", help="also print each benchmark's own report"
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the benchmarks at the same time (for smoke runs: they disturb each "
        "other's figures)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; 0 unless one failed to run or broke a check."""
    args = parse_args(argv)

    def run_all() -> int:
        names = args.only or list(BENCHMARKS)
        with redis_server(args.redis_url) as server:

            def run_one(name: str) -> Section:
                return run_benchmark(name, server, quick=args.quick, details=args.details)

            if args.parallel:
                # Imported one after the other first: threads importing the same packages
                # (rq) at once can deadlock on Python's import locks.
                for name in names:
                    if skip_reason(name) is None:
                        importlib.import_module(f"bench.{name}")
                with ThreadPoolExecutor(len(names)) as pool:
                    sections = list(pool.map(run_one, names))
            else:
                sections = [run_one(name) for name in names]
            print_table(sections, server, quick=args.quick)
        return 1 if any(section.problems for section in sections) else 0

    return run_main(run_all)
