"""Pydantic AI resume benchmark: the adapter's resume against a bare deferred-tools resume.

Not a test: it measures and prints figures. One agent (an offline ``FunctionModel``: each
turn calls ``act``, a tool with ``requires_approval=True``, until it acted twice, then
answers) runs conversations both ways in alternating rounds, each stopping at every call
for an approval:

- **direct**: timed ``agent.run(message_history=..., deferred_tool_results=...)`` with the
  call approved, what Pydantic AI's own human-in-the-loop resume is; the next stop's
  history comes with the result.

Each run stops for two approvals, then the model answers: the first resume of a run hands
the next call to a person, the second finishes the run (and reports its output).
- **adapter**: the handoff is decided with ``Handoffs.decide`` (untimed: that is the
  person's click), then timed ``worker.adapters.pydantic_ai.resume_run(handoff)`` called in
  this process, which is exactly what a worker runs: the pause claim in Redis, the stored
  history read, the same ``agent.run``, the pause bookkeeping, the history stored again and
  the next call handed to a person (creating its handoff). RQ dispatch and the work-horse
  fork are not timed (``bench/lifecycle.py`` measures those).

The adapter's figure over the direct one is the overhead ratio; the target is <= 1.5x. It
uses a fresh random namespace and deletes only its keys.

Run from the repository root::

    .venv/bin/python -m bench.pydantic_ai_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass, field

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis import Redis

from bench import common
from bench.common import Figure, RedisServer, Target
from worker.adapters.pauses import forget_built
from worker.adapters.pydantic_ai import PydanticAIHandoffs, resume_run
from worker.client import Handoffs

RATIO_TARGET = 1.5
"""Adapter resume time over direct resume time that the design aims for (at most)."""

AGENT_FACTORY = "bench.pydantic_ai_resume:build_agent"
STOPS = 2
"""Approvals each run stops for before the model answers."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run."""

    rounds: int = 100
    """Timed runs each way (``STOPS`` resumes each)."""
    warmup: int = 10
    """Untimed runs first."""


QUICK = Options(rounds=3, warmup=1)
"""A smoke run: seconds, not figures."""


def _turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the LLM: one more ``act`` call each turn (a fresh call id), ``STOPS`` times."""
    done = sum(
        1
        for message in messages
        for part in getattr(message, "parts", [])
        if getattr(part, "part_kind", "") == "tool-return"
    )
    if done >= STOPS:
        return ModelResponse(parts=[TextPart(f"acted {done} times")])
    return ModelResponse(parts=[ToolCallPart("act", {"step": done}, f"call_{done}")])


def build_agent() -> Agent[None, str | DeferredToolRequests]:
    """The benchmark agent (an approval per turn)."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(_turn), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def act(step: int) -> int:
        """Do one step."""
        return step

    return agent


@dataclass
class Samples:
    """Seconds per resume, wall-clock and CPU (this process)."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)


def time_resumes(redis: Redis, rounds: int, warmup: int) -> tuple[Samples, Samples]:
    """Time ``rounds`` runs' resumes each way (after ``warmup`` runs): each run stops for
    ``STOPS`` approvals, so half the resumes hand the next call to a person and half finish
    the run, as in a run with a couple of approvals."""
    namespace = common.new_namespace("benchpa", 10)
    handoffs = Handoffs(redis, namespace=namespace)
    adapter = PydanticAIHandoffs(handoffs, AGENT_FACTORY)
    agent = adapter.agent
    direct, through_adapter = Samples(), Samples()
    try:
        for i in range(rounds + warmup):
            timed = i >= warmup
            result = agent.run_sync("go")
            while isinstance(requests := result.output, DeferredToolRequests):
                approved = {c.tool_call_id: True for c in requests.approvals}
                wall, cpu = time.perf_counter(), time.process_time()
                result = agent.run_sync(
                    message_history=result.all_messages(),
                    deferred_tool_results=DeferredToolResults(approvals=approved),
                )
                if timed:
                    direct.add(time.perf_counter() - wall, time.process_time() - cpu)

            run_id = f"bench-{i}"
            pending = adapter.run_sync("go", run_id=run_id).handoffs
            while pending:
                decided = handoffs.decide(pending[0].id, "approved", by="U_BENCH")
                wall, cpu = time.perf_counter(), time.process_time()
                asyncio.run(resume_run(decided, handoffs=handoffs))
                if timed:
                    through_adapter.add(time.perf_counter() - wall, time.process_time() - cpu)
                pending = handoffs.list_pending(run_id=run_id).items
            if adapter.final_output(run_id) != f"acted {STOPS} times":
                raise AssertionError(f"run {run_id} did not finish: {adapter.final_output(run_id)}")
        return direct, through_adapter
    finally:
        common.delete_namespace(redis, namespace)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


@dataclass
class PydanticAIReport:
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
                "Pydantic AI resume, adapter / direct (median)",
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

        print("Pydantic AI resume: through the adapter vs agent.run(deferred_tool_results=...)")
        print(f"  redis: {self.server}; load average {common.load_average()}")
        print(
            f"  runs: {self.options.rounds} each way ({STOPS} resumes each), after "
            f"{self.options.warmup} warm-up runs; an adapter resume that does not finish the "
            "run hands the next call to a person"
        )
        print(f"  {'':<8}{'median':>10}  {'p90':>10}  {'cpu median':>10}")
        print(row("direct", self.direct))
        print(row("adapter", self.adapter))
        verdict = "OK" if self.ratio <= RATIO_TARGET else "ABOVE TARGET"
        print(f"  ratio adapter/direct: {self.ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})")


def run(server: RedisServer, options: Options) -> PydanticAIReport:
    """Time both ways on ``server``."""
    forget_built()
    redis = server.client()
    try:
        direct, adapter = time_resumes(redis, options.rounds, options.warmup)
    finally:
        redis.close()
        forget_built()
    return PydanticAIReport(server.description, options, direct, adapter)


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
