"""OpenAI Agents SDK adapter: run an agent, hand its tool approvals to people, and continue
the run in a worker, exactly once, when all of them are decided.

Install with ``pip install 'slack-handoff[openai-agents]'``. Name the function that builds
the agent as ``"module:function"`` (the agent and every worker call it)::

    # myagent/agent.py
    @approval_tool
    def issue_refund(order_id: str, amount_usd: int) -> str:
        \"\"\"Refund part of an order.\"\"\"
        ...

    def build_agent() -> Agent:
        return Agent(name="support", tools=[issue_refund, ask_human_tool()])

    # the agent process
    adapter = OpenAIAgentsHandoffs(handoffs, agent="myagent.agent:build_agent", channel="C0123")
    outcome = await adapter.run("Refund order A-1001", run_id="ticket-42")

How it works: ``result.interruptions`` (``ToolApprovalItem``) become approval handoffs and
the run's serialized ``RunState`` is kept in Redis. When every approval of that stop is
decided, a worker loads the state, applies ``approve`` / ``reject(rejection_message=...)``
and continues with ``Runner.run(agent, state)``; new approvals are handed off the same way.
The SDK resumes a stored state as often as it is asked to (each time running the approved
tools again), so the handoff store decides when it happens: once.

The SDK has no "edit the arguments" or "ask a question" decision, so two tool wrappers add
them, keyed by the tool call's ``call_id``:

- ``approval_tool`` (instead of ``function_tool(needs_approval=True)``): the reviewer may
  edit the arguments, and the tool runs at most once per call id (a repeated resume after
  a worker died returns the recorded result instead of running the tool again). An edit
  to a plain ``function_tool(needs_approval=True)`` is refused (the call is rejected with
  a message naming the edit), never run with the model's arguments.
- ``ask_human_tool()``: a tool the model calls to ask a person; each call becomes a
  question handoff and the answer is the tool's result.

Runs must be resumable by the SDK: a ``context`` must be a JSON mapping (or None).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, overload

from agents import Agent, FunctionTool, Runner, RunState, function_tool
from agents.items import ToolApprovalItem
from agents.result import RunResult
from agents.tool_context import ToolContext
from redis import Redis

from store.models import Handoff, Status
from worker.adapters import pausing_runs
from worker.adapters.pauses import (
    PauseKeys,
    PauseState,
    ReadyPause,
    edited_args,
    refusal_message,
    stable_id,
)
from worker.client import Handoffs

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.openai_agents:resume_run"
"""The resume target of every handoff this adapter creates."""

METADATA_KEY = "openai_agents"
"""Where in a handoff's metadata the adapter keeps what the worker needs."""

QUESTION_TOOL_NAME = "ask_human"
"""Default name of the tool made by ``ask_human_tool``."""

_KIND_ATTRIBUTE = "_slack_handoff_kind"
_QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The question, in one or two sentences."},
        "choices": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "Answers to offer, or null for a free-form answer.",
        },
    },
    "required": ["question", "choices"],
    "additionalProperties": False,
}


class ToolKind(StrEnum):
    """How a tool's approvals are handed to people."""

    PLAIN = "plain"  # function_tool(needs_approval=True): approve or reject only
    EDITABLE = "editable"  # approval_tool: arguments can be edited
    QUESTION = "question"  # ask_human_tool: the answer is the result


class OpenAIAgentsResume(pausing_runs.RunResume):
    """What a worker needs to continue the run, kept in ``metadata["openai_agents"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    agent: str
    call_id: str
    tool_kind: ToolKind


@dataclass(frozen=True)
class AgentOutcome(pausing_runs.RunOutcome):
    """Where a run stands after the adapter ran it."""

    final_output: Any = None


@dataclass(frozen=True)
class _ToolScope:
    """Where the wrapped tools of the current run find their call records."""

    redis: Redis
    keys: PauseKeys
    run_id: str
    retention_seconds: int

    def call_key(self, call_id: str) -> str:
        return self.keys.adapter("oa", "call", self.run_id, call_id)

    def record(self, call_id: str) -> dict[str, str]:
        raw = self.redis.hgetall(self.call_key(call_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    def save(self, call_id: str, **fields: str) -> None:
        key = self.call_key(call_id)
        with self.redis.pipeline(transaction=True) as pipe:
            for name, value in fields.items():
                pipe.hset(key, name, value)
            pipe.expire(key, self.retention_seconds)
            pipe.execute()


_scope: ContextVar[_ToolScope | None] = ContextVar("slack_handoff_tool_scope", default=None)


# -- tool wrappers ----------------------------------------------------------------------


@overload
def approval_tool(func: Callable[..., Any], /, **options: Any) -> FunctionTool: ...


@overload
def approval_tool(
    func: None = None, /, **options: Any
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def approval_tool(
    func: Callable[..., Any] | None = None, /, **options: Any
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Like ``function_tool(needs_approval=True)``, plus: a reviewer may edit the call's
    arguments, and under the adapter the tool runs at most once per call id.

    ``options`` are those of ``agents.function_tool`` (``name_override``, ``strict_mode``,
    ...), except ``needs_approval``. Use it bare (``@approval_tool``) or with options
    (``@approval_tool(name_override="refund")``).
    """
    if "needs_approval" in options:
        raise TypeError("approval_tool always needs approval; drop needs_approval")

    def build(fn: Callable[..., Any]) -> FunctionTool:
        inner = function_tool(fn, **options)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
            scope = _scope.get()
            if scope is None:  # run outside the adapter: a plain approved tool
                return await inner.on_invoke_tool(ctx, arguments)
            record = scope.record(ctx.tool_call_id)
            if "output" in record:
                logger.info(
                    "tool %s already ran for call %s; returning its result",
                    inner.name,
                    ctx.tool_call_id,
                    extra={"run_id": scope.run_id},
                )
                return json.loads(record["output"])["v"]
            output = await inner.on_invoke_tool(ctx, record.get("edit", arguments))
            scope.save(ctx.tool_call_id, output=_dump_output(output))
            return output

        tool = FunctionTool(
            name=inner.name,
            description=inner.description,
            params_json_schema=inner.params_json_schema,
            on_invoke_tool=invoke,
            strict_json_schema=inner.strict_json_schema,
            needs_approval=True,
        )
        setattr(tool, _KIND_ATTRIBUTE, ToolKind.EDITABLE)
        return tool

    return build(func) if func is not None else build


def ask_human_tool(
    *,
    name: str = QUESTION_TOOL_NAME,
    description: str = pausing_runs.QUESTION_TOOL_DESCRIPTION,
) -> FunctionTool:
    """A tool the model calls to ask a person; under the adapter each call becomes a
    question handoff and the person's answer is the tool's result."""

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        scope = _scope.get()
        if scope is not None:
            answer = scope.record(ctx.tool_call_id).get("answer")
            if answer is not None:
                return answer
        return "Nobody answered this question."

    tool = FunctionTool(
        name=name,
        description=description,
        params_json_schema=_QUESTION_SCHEMA,
        on_invoke_tool=invoke,
        strict_json_schema=True,
        needs_approval=True,
    )
    setattr(tool, _KIND_ATTRIBUTE, ToolKind.QUESTION)
    return tool


# -- the adapter ------------------------------------------------------------------------


class OpenAIAgentsHandoffs(pausing_runs.AgentRunAdapter[OpenAIAgentsResume]):
    """Run an OpenAI Agents SDK agent with its tool approvals handed to people.

    ``agent`` names a zero-argument function returning the ``Agent`` (called once per
    process, by the agent and by each worker). ``on_finish`` optionally names a function
    called in the worker as ``fn(final_output, run_id=...)`` when a resumed run completes
    (again if a worker dies right after it: key side effects on the run id). ``options``
    (``HandoffOptions``: channel, reviewers, ...) are given to every handoff.

    Example::

        adapter = OpenAIAgentsHandoffs(handoffs, agent="myagent.agent:build_agent")
        outcome = adapter.run_sync("Refund order A-1001", run_id="ticket-42")
        # outcome.status == "paused": a worker continues the run once people decided.
    """

    RESUME = OpenAIAgentsResume
    RESUME_TARGET = RESUME_TARGET
    KEY_PREFIX = "oa"
    STOP_RECORD = "state"  # {ns}:oa:state:<pause_id>: the stop's RunState JSON

    @classmethod
    def for_resume(cls, handoffs: Handoffs, resume: OpenAIAgentsResume) -> OpenAIAgentsHandoffs:
        """The adapter as configured when it created the handoff (what workers use)."""
        return cls(handoffs, resume.agent, on_finish=resume.on_finish)._restored(resume)

    @property
    def agent(self) -> Agent[Any]:
        """The agent (built once per process by the factory)."""
        return self._built_agent(Agent, "an Agent")

    async def run(
        self,
        input: str | list[Any],
        *,
        run_id: str,
        context: dict[str, Any] | None = None,
        max_turns: int | None = None,
    ) -> AgentOutcome:
        """Run the agent until it finishes or stops for approvals; hand those to people.

        ``run_id`` names this run (use a new one per run); the handoffs carry it.
        """
        extra: dict[str, Any] = {} if max_turns is None else {"max_turns": max_turns}
        with self._tool_scope(run_id):
            result = await Runner.run(self.agent, input, context=context, **extra)
        return await self._settle(result, run_id)

    def run_sync(
        self,
        input: str | list[Any],
        *,
        run_id: str,
        context: dict[str, Any] | None = None,
        max_turns: int | None = None,
    ) -> AgentOutcome:
        """``run`` for synchronous code (not from inside a running event loop)."""
        return asyncio.run(self.run(input, run_id=run_id, context=context, max_turns=max_turns))

    def final_output(self, run_id: str) -> Any:
        """The final output of a run that finished in a worker (None until then)."""
        return self._final_output(run_id)

    async def resume(self, handoff: Handoff) -> AgentOutcome | None:
        """Continue the run of a decided handoff once every approval of its stop is decided
        (what the worker calls); None while others are pending or when another handoff of
        the stop continues it."""
        resume = OpenAIAgentsResume.of(handoff)
        ready = self._claim(handoff, resume)
        if ready is None:
            return None
        context = {"handoff_id": handoff.id, "run_id": resume.run_id}
        if ready.state is PauseState.RESUMED:
            # A previous attempt ran the agent and recorded what came next, then died.
            logger.info("run already continued; finishing its hand-off", extra=context)
            return await self._redo_settle(ready, resume.run_id)
        raw_state = self._claimed_stop(ready, "run state")
        agent = self.agent
        state = await RunState.from_json(agent, json.loads(raw_state))
        scope = self._scope(resume.run_id)
        by_call = {OpenAIAgentsResume.of(m).call_id: m for m in ready.members.values()}
        for item in state.get_interruptions():
            member = by_call.get(_call_id(item))
            if member is None:  # not handed off: stays pending and is asked again
                continue
            self._apply(state, item, member, scope)
        logger.info("continuing run with %d decisions", len(by_call), extra=context)
        with self._tool_scope(resume.run_id):
            result = await Runner.run(agent, state)
        return await self._settle(result, resume.run_id, after=ready.pause_id)

    # -- internals ----------------------------------------------------------------------

    def _apply(
        self, state: RunState[Any, Any], item: ToolApprovalItem, member: Handoff, scope: _ToolScope
    ) -> None:
        """Apply one decision to the stored run, recording edits and answers by call id."""
        resume = OpenAIAgentsResume.of(member)
        decision = member.resume_data
        if member.status is Status.ANSWERED and decision is not None and decision.answer:
            scope.save(resume.call_id, answer=decision.answer)
            state.approve(item)
        elif member.status is Status.APPROVED:
            edited = edited_args(member)
            if edited is None:
                state.approve(item)
            elif resume.tool_kind is ToolKind.EDITABLE:
                scope.save(resume.call_id, edit=json.dumps(edited))
                state.approve(item)
            else:
                state.reject(
                    item,
                    rejection_message=(
                        "Not run: the reviewer changed the arguments to "
                        f"{json.dumps(edited, default=str)}, but this tool does not accept "
                        "edited arguments. Call it again with these arguments if they are right."
                    ),
                )
        else:
            question = resume.tool_kind is ToolKind.QUESTION
            state.reject(item, rejection_message=refusal_message(member, question=question))

    async def _settle(
        self, result: RunResult, run_id: str, *, after: str | None = None
    ) -> AgentOutcome:
        """Record what the run stopped at (new approvals with the run state, or its final
        output) in one transaction with the end of the pause it continued, then act on it."""
        if result.interruptions:
            state_json = result.to_state().to_json()
            call_ids = sorted(_call_id(item) for item in result.interruptions)
            turn = str(state_json.get("current_turn", ""))
            pause_id = stable_id("oap", run_id, turn, *call_ids)
            self._open_stop(pause_id, call_ids, after=after, stop=json.dumps(state_json))
            handoffs = self._hand_off(pause_id, result.interruptions, run_id)
            return AgentOutcome("paused", handoffs)
        output = result.final_output
        self._finish(run_id, _dump_output(output), after=after, reported=output)
        return AgentOutcome("finished", [], output)

    async def _redo_settle(self, ready: ReadyPause, run_id: str) -> AgentOutcome:
        next_pause = ready.fields.get("next")
        if next_pause:
            raw = self._stored_stop(next_pause, "run state")
            state = await RunState.from_json(self.agent, json.loads(raw))
            handoffs = self._hand_off(next_pause, state.get_interruptions(), run_id)
            return AgentOutcome("paused", handoffs)
        output = self.final_output(run_id)
        self._report_again(ready, output, run_id)
        return AgentOutcome("finished", [], output)

    def _hand_off(
        self, pause_id: str, interruptions: Sequence[ToolApprovalItem], run_id: str
    ) -> list[Handoff]:
        created = []
        count = len(interruptions)
        for position, item in enumerate(interruptions, start=1):
            call_id = _call_id(item)
            name = item.name or "tool"
            args = _arguments(item)
            tool = _find_tool(item.agent, name)
            kind = getattr(tool, _KIND_ATTRIBUTE, ToolKind.PLAIN) if tool else ToolKind.PLAIN
            resume = OpenAIAgentsResume(
                agent=self.agent_path,
                call_id=call_id,
                tool_kind=kind,
                **self._run_fields(run_id, pause_id, call_id, count),
            )
            options = self._request_options(
                resume,
                context=f"Agent {item.agent.name!r} (run {run_id}) wants to call {name}.",
                position=position,
                key=pausing_runs.key_id(call_id, "call"),
            )
            if kind is ToolKind.QUESTION:
                choices = args.get("choices")
                handoff = self.handoffs.ask(
                    run_id=run_id,
                    thread_id=run_id,
                    question=str(args.get("question") or "The agent has a question."),
                    choices=choices if isinstance(choices, list) and choices else None,
                    **options,
                )
            else:
                handoff = self.handoffs.request_approval(
                    run_id=run_id,
                    thread_id=run_id,
                    action=name,
                    args=args,
                    description=tool.description if tool else None,
                    args_schema=tool.params_json_schema if tool else None,
                    **options,
                )
            created.append(handoff)
        return created

    def _scope(self, run_id: str) -> _ToolScope:
        return _ToolScope(
            redis=self.handoffs.redis,
            keys=self.pauses.keys,
            run_id=run_id,
            retention_seconds=self.pauses.retention_seconds,
        )

    @contextmanager
    def _tool_scope(self, run_id: str) -> Iterator[None]:
        token = _scope.set(self._scope(run_id))
        try:
            yield
        finally:
            _scope.reset(token)


async def resume_run(
    handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None
) -> None:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``).

    Called in a worker once per decided handoff; continues the run when the handoff's whole
    stop is decided. ``handoffs`` defaults to a client configured from the environment on
    the handoff's namespace (tests pass their own).
    """
    await pausing_runs.resume_in_worker(
        OpenAIAgentsHandoffs, handoff, attempt=attempt, handoffs=handoffs
    )


# -- helpers ----------------------------------------------------------------------------


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    for name in ("call_id", "id"):
        value = raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)
        if isinstance(value, str) and value:
            return value
    raise ValueError(f"tool approval for {item.name!r} has no call id; cannot track it")


def _arguments(item: ToolApprovalItem) -> dict[str, Any]:
    raw = item.raw_item
    arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {"arguments": arguments}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return dict(arguments) if isinstance(arguments, dict) else {}


def _find_tool(agent: Any, name: str) -> FunctionTool | None:
    for tool in getattr(agent, "tools", None) or []:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None


def _dump_output(output: Any) -> str:
    try:
        return json.dumps({"v": output})
    except TypeError:
        return json.dumps({"v": str(output)})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = [
    "QUESTION_TOOL_NAME",
    "RESUME_TARGET",
    "AgentOutcome",
    "OpenAIAgentsHandoffs",
    "OpenAIAgentsResume",
    "ToolKind",
    "approval_tool",
    "ask_human_tool",
    "resume_run",
]
