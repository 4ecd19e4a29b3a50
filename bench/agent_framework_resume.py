"""Microsoft Agent Framework resume benchmark: the adapter's resume against the framework's
own, called directly, for an agent and for a workflow.

Not a test: it measures and prints figures. Each side drives its own run of the same
thing, in alternating rounds, in one event loop:

- **agent**: an ``Agent`` with a scripted chat client (no network) that calls a tool with
  ``approval_mode="always_require"`` once per turn. *direct* is what continuing a stored
  run takes by hand: read the stored session and requests from Redis,
  ``AgentSession.from_dict``, ``agent.run(approval responses, session=...)``, store the
  session and the next requests back (``session.to_dict()``). *adapter* is
  ``worker.adapters.agent_framework.agents.resume_run(handoff)``, what a worker runs: the
  pause claim, the same restore and run (with the adapter's function middleware), the
  bookkeeping, and the next request handed to a person (creating its handoff).
- **workflow**: an executor that asks with ``ctx.request_info`` once per step, checkpointed
  to a ``FileCheckpointStorage`` folder. *direct* is a new workflow instance,
  ``workflow.run(responses=..., checkpoint_id=..., checkpoint_storage=...)`` and
  ``resolve_pause_checkpoint_id`` for the next stop; *adapter* is ``resume_workflow(handoff)``.

The decisions themselves (a person's click), RQ dispatch and the work-horse fork are not
timed (``bench/lifecycle.py`` measures those). The adapter's figure over the direct one is
the overhead ratio; the target is <= 1.5x. It uses a fresh random namespace and deletes only
its keys, so it is safe to point at a Redis that holds other data.

Run from the repository root::

    .venv/bin/python -m bench.agent_framework_resume                 # embedded server
    .venv/bin/python -m bench.agent_framework_resume --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatResponse,
    Content,
    Executor,
    FileCheckpointStorage,
    FunctionInvocationLayer,
    Message,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
    tool,
)
from redis import Redis

from bench import adapter_resume, common
from bench.adapter_resume import Options, Samples
from bench.common import Figure, RedisServer
from worker.adapters.agent_framework import AgentFrameworkHandoffs, Question, WorkflowHandoffs
from worker.adapters.agent_framework.agents import resume_run
from worker.adapters.agent_framework.workflows import resume_workflow
from worker.adapters.pauses import forget_built
from worker.client import Handoffs

AGENT_FACTORY = "bench.agent_framework_resume:build_agent"
WORKFLOW_FACTORY = "bench.agent_framework_resume:build_workflow"

STEPS_PER_RUN = 10
"""Approvals in one agent run (each a resume), before the next run starts."""

ACTED: list[tuple[str, int]] = []
"""(lane, step) of every tool run, to check each side ran every step once."""


QUICK = adapter_resume.QUICK
"""A smoke run: seconds, not figures. The rounds of ``Options`` are the resumes each way,
for the agent (in runs of ``STEPS_PER_RUN``) and for the workflow (one run)."""


# -- what is resumed ----------------------------------------------------------------------


@tool(approval_mode="always_require")
def act(lane: str, step: int) -> str:
    """Do one step of the run."""
    ACTED.append((lane, step))
    return f"{lane} step {step} done"


class LoopChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """Calls ``act`` once per turn until the first message's step count is reached."""

    async def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> ChatResponse[Any]:
        lane, limit = messages[0].text.split()
        done = sum(1 for m in messages for c in m.contents if c.type == "function_result")
        if done >= int(limit):
            return ChatResponse(messages=[Message(role="assistant", contents=["all done"])])
        call = Content.from_function_call(
            call_id=f"call_{done}", name="act", arguments={"lane": lane, "step": done}
        )
        return ChatResponse(messages=[Message(role="assistant", contents=[call])])


def build_agent() -> Agent[Any]:
    """The benchmark agent."""
    return Agent(LoopChatClient(), name="bench", tools=[act])


class LoopStep(Executor):
    """Asks once per step until ``limit`` steps are answered."""

    @handler
    async def start(self, limit: int, ctx: WorkflowContext) -> None:
        ctx.set_state("limit", limit)
        ctx.set_state("done", 0)
        await ctx.request_info(Question("step 0?"), str)

    @response_handler
    async def on_answer(self, asked: Question, answer: str, ctx: WorkflowContext[Any, int]) -> None:
        done = ctx.get_state("done") + 1
        ctx.set_state("done", done)
        if done < ctx.get_state("limit"):
            await ctx.request_info(Question(f"step {done}?"), str)
        else:
            await ctx.yield_output(done)


def build_workflow() -> Workflow:
    """A new benchmark workflow."""
    # Each answered step is a superstep; the framework's default allows 100 per run.
    builder = WorkflowBuilder(
        start_executor=LoopStep(id="step"), name="bench-loop", max_iterations=10_000
    )
    return builder.build()


# -- timing ---------------------------------------------------------------------------------


async def time_agent(handoffs: Handoffs, rounds: int, warmup: int) -> tuple[Samples, Samples]:
    """``rounds`` agent resumes each way (after ``warmup``), in runs of ``STEPS_PER_RUN``
    approvals: a run's conversation grows with every step, and a long one would measure the
    framework's handling of history rather than a resume."""
    redis = handoffs.redis
    stored = common.bench_key(handoffs.store.keys.namespace, "af:direct")
    agent = build_agent()
    adapter = AgentFrameworkHandoffs(handoffs, AGENT_FACTORY)

    async def direct() -> None:
        stop = json.loads(redis.get(stored) or b"{}")
        session = AgentSession.from_dict(stop["session"])
        requests = [Content.from_dict(request) for request in stop["requests"]]
        answers = [request.to_function_approval_response(True) for request in requests]
        response = await agent.run(Message(role="user", contents=answers), session=session)
        _store(redis, stored, session, response.user_input_requests)

    direct_samples, adapter_samples = Samples(), Samples()
    done = 0
    for run in range(math.ceil((rounds + warmup) / STEPS_PER_RUN)):
        session = agent.create_session()
        response = await agent.run(f"direct-{run} {STEPS_PER_RUN}", session=session)
        _store(redis, stored, session, response.user_input_requests)
        run_id = f"bench-agent-{run}"
        [pending] = (await adapter.run(f"adapter-{run} {STEPS_PER_RUN}", run_id=run_id)).handoffs
        for step in range(STEPS_PER_RUN):
            keep = done >= warmup
            with direct_samples.timing(keep):
                await direct()
            decided = handoffs.decide(pending.id, "approved", by=adapter_resume.DECIDER)
            with adapter_samples.timing(keep):
                await resume_run(decided, handoffs=handoffs)
            done += 1
            if step + 1 < STEPS_PER_RUN:
                [pending] = handoffs.list_pending(run_id=run_id).items
        if adapter.final_output(run_id) != "all done":
            raise AssertionError(f"the adapter's agent run {run_id} did not finish")
    return direct_samples, adapter_samples


def _store(redis: Redis, key: str, session: AgentSession, requests: list[Content]) -> None:
    stop = {"session": session.to_dict(), "requests": [r.to_dict() for r in requests]}
    redis.set(key, json.dumps(stop))


async def time_workflow(
    handoffs: Handoffs, folder: str, rounds: int, warmup: int
) -> tuple[Samples, Samples]:
    """``rounds`` workflow resumes each way (after ``warmup``)."""
    total = rounds + warmup
    storage = FileCheckpointStorage(folder)
    workflow = build_workflow()
    result = await workflow.run(total, checkpoint_storage=storage)
    [event] = result.get_request_info_events()
    ids = [event.request_id]
    checkpoint = await workflow.resolve_pause_checkpoint_id(ids, checkpoint_storage=storage)
    adapter = WorkflowHandoffs(handoffs, WORKFLOW_FACTORY, checkpoint_dir=folder)
    [pending] = (await adapter.run(total, run_id="bench-workflow")).handoffs
    outputs: list[Any] = []

    async def direct() -> None:
        nonlocal ids, checkpoint
        workflow = build_workflow()
        responses = {ids[0]: "yes"}
        result = await workflow.run(
            responses=responses, checkpoint_id=checkpoint, checkpoint_storage=storage
        )
        ids = [event.request_id for event in result.get_request_info_events()]
        outputs.extend(result.get_outputs())
        if ids:
            checkpoint = await workflow.resolve_pause_checkpoint_id(ids, checkpoint_storage=storage)

    direct_samples, adapter_samples = Samples(), Samples()
    for i in range(total):
        with direct_samples.timing(i >= warmup):
            await direct()
        decided = handoffs.decide(pending.id, "answered", by=adapter_resume.DECIDER, answer="yes")
        with adapter_samples.timing(i >= warmup):
            await resume_workflow(decided, handoffs=handoffs)
        if i + 1 < total:
            [pending] = handoffs.list_pending(run_id="bench-workflow").items
    if outputs != [total] or adapter.outputs("bench-workflow") != [total]:
        raise AssertionError("a workflow run did not answer every step once")
    return direct_samples, adapter_samples


def _check_acted() -> None:
    lanes: dict[str, list[int]] = {}
    for lane, step in ACTED:
        lanes.setdefault(lane, []).append(step)
    for lane, steps in lanes.items():
        if steps != list(range(STEPS_PER_RUN)):
            raise AssertionError(f"the agent run {lane} did not run every step once: {steps}")


# -- report ---------------------------------------------------------------------------------


@dataclass
class AgentFrameworkReport:
    """Resume times both ways, for the agent and the workflow."""

    server: str
    options: Options
    agent: tuple[Samples, Samples]
    workflow: tuple[Samples, Samples]
    problems: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table."""
        return [
            adapter_resume.ratio_figure(
                "Agent Framework agent resume, adapter / direct (median)",
                adapter_resume.ratio(*self.agent),
            ),
            adapter_resume.ratio_figure(
                "Agent Framework workflow resume, adapter / direct (median)",
                adapter_resume.ratio(*self.workflow),
            ),
        ]

    def print_report(self) -> None:
        """Both ways' medians, p90, means and CPU, per kind of run; the ratios next to the
        target."""
        rounds, warmup = self.options.rounds, self.options.warmup
        print("Agent Framework resume: through the adapter vs the framework's own, directly")
        print(adapter_resume.redis_line(self.server))
        print(f"  rounds: {rounds} each way, after {warmup} warm-up rounds, alternating")
        for name, (direct, adapter), direct_is in (
            ("agent", self.agent, "from_dict + agent.run(responses) + to_dict, in Redis"),
            ("workflow", self.workflow, "workflow.run(responses, checkpoint_id) + next checkpoint"),
        ):
            print(f"  {name}: direct = {direct_is}")
            adapter_resume.print_table({"direct": direct, "adapter": adapter})
            print(adapter_resume.ratio_line(adapter_resume.ratio(direct, adapter)))


def run(server: RedisServer, options: Options) -> AgentFrameworkReport:
    """Time both ways for both kinds of run on ``server``, checkpoints in a temporary folder."""
    ACTED.clear()
    forget_built()
    with (
        adapter_resume.handoffs_of_run(server, "benchaf") as handoffs,
        tempfile.TemporaryDirectory() as folder,
    ):

        async def measure() -> tuple[tuple[Samples, Samples], tuple[Samples, Samples]]:
            agent = await time_agent(handoffs, options.rounds, options.warmup)
            flow = await time_workflow(handoffs, folder, options.rounds, options.warmup)
            return agent, flow

        agent, flow = asyncio.run(measure())
    forget_built()
    _check_acted()
    return AgentFrameworkReport(server.description, options, agent, flow)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when both ratios meet the target, 1 otherwise."""
    return adapter_resume.main(argv, __doc__ or "", Options, run)


if __name__ == "__main__":
    # Run as the module the factories name, so its tool records steps where they are read.
    from bench.agent_framework_resume import main as module_main

    sys.exit(module_main())
