"""Pydantic AI resume benchmark: the adapter's resume against a bare deferred-tools resume.

Not a test: it measures and prints figures. One agent (an offline ``FunctionModel``: each
turn calls ``act``, a tool with ``requires_approval=True``, until it acted twice, then
answers) runs conversations both ways in alternating rounds, each stopping at every call
for an approval:

- **direct**: what continuing a stored run takes by hand, as ``bench/agent_framework_resume.py``
  times it for that framework: read the stored history from Redis,
  ``ModelMessagesTypeAdapter.validate_json``, timed ``agent.run(message_history=...,
  deferred_tool_results=...)`` with the call approved (Pydantic AI's own human-in-the-loop
  resume), the new history dumped and stored back (the output, once the run finished). A
  person decides hours later, in another process: the history has to be kept somewhere,
  and this is the least it costs.
- **in memory** (reported under the ratio, not the figure): the same ``agent.run`` given
  the history the last run returned, kept in this process: a resume without a pause worth
  handing to a person.
- **adapter**: the handoff is decided with ``Handoffs.decide`` (untimed: that is the
  person's click), then timed ``worker.adapters.pydantic_ai.resume_run(handoff)`` called in
  this process, which is exactly what a worker runs: the pause claim in Redis, the stored
  history read, the same ``agent.run``, the pause bookkeeping, the history stored again and
  the next call handed to a person (creating its handoff). RQ dispatch and the work-horse
  fork are not timed (``bench/lifecycle.py`` measures those).

Each run stops for two approvals, then the model answers: the first resume of a run hands
the next call to a person, the second finishes the run (and reports its output).

Both sides drive their coroutine on the same event loop (one ``asyncio.Runner``), so neither
pays for creating a loop: a worker's ``asyncio.run`` per resume (about 0.2 ms here) is
dispatch, like the fork, and a direct caller resumes on a loop it already has.

The adapter's figure over the direct one is the overhead ratio; the target is <= 1.5x. It
uses a fresh random namespace and deletes only its keys.

Run from the repository root::

    .venv/bin/python -m bench.pydantic_ai_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from dataclasses import dataclass, field

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis import Redis

from bench import adapter_resume, common
from bench.adapter_resume import ResumeReport, Samples
from bench.common import RedisServer
from worker.adapters.pauses import forget_built
from worker.adapters.pydantic_ai import HandoffCapability, PydanticAIHandoffs, resume_run
from worker.client import Handoffs

AGENT_FACTORY = "bench.pydantic_ai_resume:build_agent"
STOPS = 2
"""Approvals each run stops for before the model answers."""
FIGURE = "Pydantic AI resume, adapter / direct (median)"
TITLE = "Pydantic AI resume: through the adapter vs a stored run continued by hand"


@dataclass(frozen=True)
class Options(adapter_resume.Options):
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
    """The agent the adapter runs, as the adapter's docs suggest building it: with the
    adapter's ``HandoffCapability`` (an approval per turn)."""
    return build_plain_agent(HandoffCapability())


def build_plain_agent(
    *capabilities: AbstractCapability[None],
) -> Agent[None, str | DeferredToolRequests]:
    """The benchmark agent (an approval per turn), with ``capabilities``: the direct side's
    has none, so it pays nothing for the adapter."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(_turn), output_type=[str, DeferredToolRequests], capabilities=capabilities
    )

    @agent.tool_plain(requires_approval=True)
    def act(step: int) -> int:
        """Do one step."""
        return step

    return agent


@dataclass
class Timed:
    """The resume times of a run of the benchmark."""

    direct: Samples = field(default_factory=Samples)
    in_memory: Samples = field(default_factory=Samples)
    adapter: Samples = field(default_factory=Samples)


async def _direct_resume(
    agent: Agent[None, str | DeferredToolRequests],
    redis: Redis,
    key: str,
    approved: dict[str, bool],
) -> AgentRunResult[str | DeferredToolRequests]:
    """Continue the run whose history is stored at ``key`` by hand, and store the new one
    (or, when it finished, its output)."""
    history = ModelMessagesTypeAdapter.validate_json(redis.get(key) or b"[]")
    result = await agent.run(
        message_history=history,
        deferred_tool_results=DeferredToolResults(approvals=approved),
    )
    if isinstance(result.output, DeferredToolRequests):
        redis.set(key, ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    else:  # finished: its output is what is kept, as the adapter keeps it
        redis.set(f"{key}:output", json.dumps(result.output))
    return result


def time_resumes(handoffs: Handoffs, rounds: int, warmup: int) -> Timed:
    """Time ``rounds`` runs' resumes each way (after ``warmup`` runs): each run stops for
    ``STOPS`` approvals, so half the resumes hand the next call to a person and half finish
    the run, as in a run with a couple of approvals."""
    adapter = PydanticAIHandoffs(handoffs, AGENT_FACTORY)
    agent = build_plain_agent()
    stored = common.bench_key(handoffs.store.keys.namespace, "pai:direct")
    timed_runs = Timed()
    with asyncio.Runner() as loop:
        for i in range(rounds + warmup):
            timed = i >= warmup
            result = loop.run(agent.run("go"))
            handoffs.redis.set(stored, ModelMessagesTypeAdapter.dump_json(result.all_messages()))
            while isinstance(requests := result.output, DeferredToolRequests):
                approved = {c.tool_call_id: True for c in requests.approvals}
                with timed_runs.direct.timing(timed):
                    result = loop.run(_direct_resume(agent, handoffs.redis, stored, approved))

            result = loop.run(agent.run("go"))
            while isinstance(requests := result.output, DeferredToolRequests):
                approved = {c.tool_call_id: True for c in requests.approvals}
                with timed_runs.in_memory.timing(timed):
                    result = loop.run(
                        agent.run(
                            message_history=result.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals=approved),
                        )
                    )

            run_id = f"bench-{i}"
            loop.run(adapter.run("go", run_id=run_id))
            adapter_resume.decide_and_resume_each(
                handoffs, run_id, timed_runs.adapter, timed, resume_run, "approved", run=loop.run
            )
        if adapter.final_output(run_id) != f"acted {STOPS} times":
            raise AssertionError(f"run {run_id} did not finish: {adapter.final_output(run_id)}")
    return timed_runs


def run(server: RedisServer, options: Options) -> ResumeReport:
    """Time both ways on ``server``."""
    forget_built()
    try:
        with adapter_resume.handoffs_of_run(server, "benchpa") as handoffs:
            timed = time_resumes(handoffs, options.rounds, options.warmup)
    finally:
        forget_built()
    details = [
        adapter_resume.runs_line(options, STOPS, "run hands the next call to a person"),
        "  direct: the stored history read, agent.run, the new history (or the output) stored",
    ]
    in_memory = adapter_resume.ratio(timed.in_memory, timed.adapter)
    remarks = [
        f"  in memory (agent.run given the last run's history, nothing stored): median "
        f"{adapter_resume.ms(statistics.median(timed.in_memory.wall)).strip()}; "
        f"adapter / in memory {in_memory:.2f}x"
    ]
    return ResumeReport(
        server.description,
        options,
        timed.direct,
        timed.adapter,
        FIGURE,
        TITLE,
        details,
        remarks=remarks,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when the ratio meets the target, 1 otherwise."""
    return adapter_resume.main(argv, __doc__ or "", Options, run)


if __name__ == "__main__":
    sys.exit(main())
