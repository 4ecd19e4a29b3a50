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

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Set before CrewAI is imported: nothing here needs the network.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai.flow import Flow, human_feedback, listen, start
from crewai.flow.async_feedback import HumanFeedbackPending, PendingFeedbackContext
from crewai.flow.persistence import SQLiteFlowPersistence

from bench import adapter_resume
from bench.adapter_resume import ResumeReport, Samples
from bench.common import RedisServer
from worker.adapters.crewai import SlackFeedbackProvider, resume_flow
from worker.client import Handoffs

STOPS = 2
"""Feedback steps each run pauses at before it finishes."""
FIGURE = "CrewAI Flow resume, adapter / direct (median)"
TITLE = "CrewAI Flow resume: through the adapter vs Flow.from_pending(...).resume(...)"


@dataclass(frozen=True)
class Options(adapter_resume.Options):
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


def time_resumes(handoffs: Handoffs, rounds: int, warmup: int, db: Path) -> tuple[Samples, Samples]:
    """Time ``rounds`` runs' resumes each way (after ``warmup`` runs), alternating: each
    run pauses ``STOPS`` times, so half the resumes pause at the next step and half finish
    the run."""
    slack._handoffs = handoffs
    persistence = SQLiteFlowPersistence(str(db))
    direct, through_adapter = Samples(), Samples()
    try:
        for i in range(rounds + warmup):
            timed = i >= warmup
            outcome: Any = DirectFlow(persistence=persistence).kickoff()
            while isinstance(outcome, HumanFeedbackPending):
                with direct.timing(timed):
                    flow = DirectFlow.from_pending(outcome.context.flow_id, persistence)
                    outcome = flow.resume("fine")
            if outcome != "done: fine":
                raise AssertionError(f"the direct run ended {outcome!r}")

            paused = AdapterFlow(persistence=persistence).kickoff()
            flow_id = paused.context.flow_id  # type: ignore[union-attr]
            adapter_resume.decide_and_resume_each(
                handoffs, flow_id, through_adapter, timed, resume_flow, "answered", answer="fine"
            )
            if slack.final_output(flow_id) != "done: fine":
                raise AssertionError(
                    f"flow {flow_id} did not finish: {slack.final_output(flow_id)}"
                )
        return direct, through_adapter
    finally:
        slack._handoffs = None


def run(server: RedisServer, options: Options) -> ResumeReport:
    """Time both ways on ``server``."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-crewai-") as tmp,
        adapter_resume.handoffs_of_run(server, "benchcw") as handoffs,
    ):
        direct, adapter = time_resumes(
            handoffs, options.rounds, options.warmup, Path(tmp) / "flows.db"
        )
    details = [adapter_resume.runs_line(options, STOPS, "flow hands the next step to a person")]
    return ResumeReport(server.description, options, direct, adapter, FIGURE, TITLE, details)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return adapter_resume.main(argv, __doc__ or "", Options, run, counted="runs")


if __name__ == "__main__":
    # Run as bench.crewai_resume, not __main__: a worker finds a flow's class by its module
    # (the adapter refuses classes of __main__).
    from bench import crewai_resume

    sys.exit(crewai_resume.main())
