"""Pydantic AI adapter: run an agent, hand its deferred tool calls to people, and continue
the run in a worker, exactly once, when all of them are decided.

Install with ``pip install 'slack-handoff[pydantic-ai]'`` (``pydantic-ai-slim``, plus the
provider extra your model needs). Name the function that builds the agent as
``"module:function"`` (the agent and every worker call it)::

    # myagent/agent.py
    from pydantic_ai import Agent, DeferredToolRequests
    from worker.adapters.pydantic_ai import ask_human_tool

    def build_agent() -> Agent[None, str | DeferredToolRequests]:
        agent = Agent(
            "openai:gpt-5.2",
            output_type=[str, DeferredToolRequests],
            tools=[ask_human_tool()],
        )

        @agent.tool_plain(requires_approval=True)
        def issue_refund(order_id: str, amount_usd: int) -> str:
            \"\"\"Refund part of an order.\"\"\"
            ...

        return agent

    # the agent process
    adapter = PydanticAIHandoffs(handoffs, agent="myagent.agent:build_agent", channel="C0123")
    outcome = await adapter.run("Refund order A-1001", run_id="ticket-42")

How it works: a run that calls a tool with ``requires_approval=True`` (or whose tool raises
``ApprovalRequired``), or a deferred tool (``CallDeferred``, an ``ExternalToolset`` tool,
``ask_human_tool``), ends with a ``DeferredToolRequests`` output. Each of its calls becomes a
handoff: an approval for ``approvals``, a question for ``calls``. The run's message history
is kept in Redis (``ModelMessagesTypeAdapter`` JSON). When every handoff of that stop is
decided, a worker builds ``DeferredToolResults`` from the decisions and continues with
``agent.run(message_history=..., deferred_tool_results=...)``; the calls it stops at next
are handed off the same way.

- An approval becomes ``ToolApproved(override_args=...)`` with the arguments the reviewer
  approved (the request's, with any edits laid over): the tool runs with exactly those,
  whatever the stored history says, and Pydantic AI validates them against the tool's
  schema as it does the model's. A stored call that no longer names the approved tool is
  denied, not run.
- A rejection, an expiry, a cancellation or an undeliverable handoff becomes
  ``ToolDenied(message)`` with the reviewer's reason: the model reads it instead of the
  tool's result.
- A question's answer is the deferred call's return value; no answer becomes
  ``ToolFailed(message)``, a failed tool result the model adapts to.

Pydantic AI runs the approved calls again each time it is given the same history and
results, so the handoff store decides when that happens: once. A worker that dies while
continuing a run is replaced by another attempt, which continues from the same stored
history: an approved call that already ran returns its recorded result instead of running
again (``{ns}:pai:call:...``). Tools that need no approval may run again in that case.

The adapter hooks into each run with ``HandoffCapability``; an agent built with one
(``Agent(..., capabilities=[HandoffCapability()])``) gets none added to its runs, which
Pydantic AI makes cheaper.
"""

from __future__ import annotations

import asyncio
import json
import logging
import types
import typing
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Unpack

import anyio
from pydantic import BaseModel, Field
from pydantic_ai import (
    Agent,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    Tool,
    ToolDenied,
)
from pydantic_ai.agent import AbstractAgent, AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    ToolCallPart,
)
from pydantic_ai.tools import RunContext, ToolApproved, ToolDefinition
from pydantic_core import to_jsonable_python
from redis import Redis

from store.models import Handoff, Status
from worker.adapters import pausing_runs
from worker.adapters.pauses import (
    HandoffOptions,
    PauseKeys,
    PauseState,
    ReadyPause,
    build_from_factory,
    edited_args,
    load_object,
    proposed_action,
    refusal_message,
    stable_id,
)
from worker.client import Handoffs

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.pydantic_ai:resume_run"
"""The resume target of every handoff this adapter creates."""

METADATA_KEY = "pydantic_ai"
"""Where in a handoff's metadata the adapter keeps what the worker needs."""

QUESTION_TOOL_NAME = "ask_human"
"""Default name of the tool made by ``ask_human_tool``."""


class CallKind(StrEnum):
    """What a deferred tool call waits for (Pydantic AI's ``DeferredToolRequests.kind``)."""

    APPROVAL = "approval"  # requires_approval=True or ApprovalRequired: a person approves
    QUESTION = "question"  # CallDeferred(kind="question"), ask_human_tool: a person answers
    EXTERNAL = "external"  # CallDeferred(), ExternalToolset: a person supplies the result


class DeferredCall(BaseModel):
    """One deferred tool call of a stop, as handed to a person (kept with the stop, so a
    worker that takes over hands the same calls off again)."""

    call_id: str
    kind: CallKind
    tool_name: str
    args: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The ``metadata`` of ``ApprovalRequired`` / ``CallDeferred``, as JSON."""
    description: str | None = None
    args_schema: dict[str, Any] | None = None


class PydanticAIResume(pausing_runs.RunResume):
    """What a worker needs to continue the run, kept in ``metadata["pydantic_ai"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    agent: str
    deps: str | None = None
    call_id: str
    kind: CallKind


@dataclass(frozen=True)
class AgentOutcome(pausing_runs.RunOutcome):
    """Where a run stands after the adapter ran it.

    ``output`` is the run's output once it finished (None while paused); ``messages`` is
    the run's whole message history at that point (what Pydantic AI's
    ``result.all_messages()`` returns).
    """

    output: Any = None
    messages: list[ModelMessage] = field(default_factory=list)


# -- the capability the adapter runs the agent with ------------------------------------


@dataclass
class _CallRecords:
    """The recorded results of the approved calls of one stop, by tool call id: those an
    earlier attempt recorded are read with the pause's claim (``keys``), then ``arm``
    says which calls the run continues with."""

    redis: Redis
    pause_keys: PauseKeys
    pause_id: str
    call_ids: frozenset[str] = frozenset()
    found: dict[str, bytes] = field(default_factory=dict)
    retention_seconds: int = 0
    siblings: bool = True
    """Whether the step continued has other calls, run side by side (see
    ``HandoffCapability.wrap_tool_execute``); False only when it is known to have none."""

    def key(self, call_id: str) -> str:
        return self.pause_keys.adapter("pai", "call", self.pause_id, call_id)

    def keys(self, call_ids: list[str]) -> list[str]:
        return [self.key(call_id) for call_id in call_ids]

    def arm(
        self, call_ids: frozenset[str], read: dict[str, bytes], retention: int, *, step_calls: int
    ) -> None:
        """The approved calls (``call_ids``), what the claim read (``read``, by key) and how
        many calls the step continued made (``step_calls``)."""
        self.call_ids = call_ids
        self.found = {c: read[self.key(c)] for c in call_ids if self.key(c) in read}
        self.retention_seconds = retention
        self.siblings = step_calls > 1

    def recorded(self, call_id: str) -> tuple[bool, Any]:
        raw = self.found.get(call_id)
        return (False, None) if raw is None else (True, json.loads(raw)["v"])

    def save(self, call_id: str, result: Any) -> None:
        self.redis.set(self.key(call_id), _dump(result), ex=self.retention_seconds)


@dataclass
class _RunState:
    """What the adapter's hooks keep for one run of the agent: the tool definitions the
    model was offered (their descriptions and schemas go to the reviewers) and, when the run
    continues a stop, the records of its approved calls."""

    records: _CallRecords | None = None
    tools: dict[str, ToolDefinition] = field(default_factory=dict)
    agent_run_id: str | None = None
    """Pydantic AI's id of the run these hooks serve, taken by the first hook to see the
    state (the adapter's run: its hooks fire before any of its tools can start another run
    of the same agent, which inherits the context and must not take the state)."""


_ADAPTER_RUN: ContextVar[tuple[AbstractAgent[Any, Any], _RunState] | None] = ContextVar(
    "slack_handoff_pydantic_ai_run", default=None
)
"""The agent the adapter is running in this context and that run's state, for a
``HandoffCapability`` the agent was built with (one instance serves every run)."""


@dataclass
class HandoffCapability(AbstractCapability[Any]):
    """The adapter's hooks into a run: note the tool definitions the model was offered, and
    run each approved call of the stop being continued at most once.

    The adapter adds one to each run it makes. An agent built with one
    (``Agent(..., capabilities=[HandoffCapability()])``) spares that: Pydantic AI sets up
    an agent's own capabilities once, a run's on every run (about 0.3 ms a run here,
    ``bench/pydantic_ai_resume.py``). Outside the adapter's runs it does nothing.
    """

    run_state: _RunState | None = None
    """The state of the one run this instance was made for; None on the agent's own
    instance, which finds the adapter's run in the context (``_ADAPTER_RUN``)."""

    def _state(self, ctx: RunContext[Any]) -> _RunState | None:
        if self.run_state is not None:
            return self.run_state
        current = _ADAPTER_RUN.get()
        # A run of another agent (started by a tool of this one, say) is not the adapter's.
        if current is None or (ctx.agent is not None and ctx.agent is not current[0]):
            return None
        state = current[1]
        if state.agent_run_id is None:
            state.agent_run_id = ctx.run_id
        elif ctx.run_id != state.agent_run_id:
            return None  # a run of the same agent started inside the adapter's run
        return state

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        state = self._state(ctx)
        if state is not None:
            for definition in tool_defs:
                state.tools[definition.name] = definition
        return tool_defs

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Any,
    ) -> Any:
        state = self._state(ctx)
        records = state.records if state is not None else None
        if records is None or call.tool_call_id not in records.call_ids:
            return await handler(args)
        found, result = records.recorded(call.tool_call_id)
        if found:
            logger.info(
                "tool %s already ran for call %s; returning its result",
                call.tool_name,
                call.tool_call_id,
                extra={"pause_id": records.pause_id},
            )
            return result

        async def run_and_record() -> Any:
            result = await handler(args)
            records.save(call.tool_call_id, result)
            return result

        if not records.siblings:
            return await run_and_record()

        # Pydantic AI runs a step's calls side by side and cancels the others when one
        # fails; a sync tool's thread runs on regardless, so a cancelled call may be past
        # its side effects. It finishes and is recorded before the cancellation goes on:
        # the retry of the failed resume returns its result instead of running it again.
        # (A call alone in its step has no sibling to fail: it runs as it is, above, which
        # spares it a task and a shield.)
        running = asyncio.ensure_future(run_and_record())
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await asyncio.wait({running})
            if not running.cancelled():
                running.exception()  # retrieved: the cancellation is what goes on
            raise


# -- the question tool ------------------------------------------------------------------


def ask_human_tool(
    *, name: str = QUESTION_TOOL_NAME, description: str = pausing_runs.QUESTION_TOOL_DESCRIPTION
) -> Tool[Any]:
    """A tool the model calls to ask a person. Each call is deferred as a question
    (``CallDeferred(kind="question")``); under the adapter it becomes a question handoff
    and the person's answer is the tool's result. Outside the adapter the run ends with a
    ``DeferredToolRequests`` as for any deferred tool.

    Example::

        agent = Agent(model, output_type=[str, DeferredToolRequests], tools=[ask_human_tool()])
    """

    async def ask_human(question: str, choices: list[str] | None = None) -> str:
        """Ask a person.

        Args:
            question: The question, in one or two sentences.
            choices: Answers to offer, or null for a free-form answer.
        """
        raise CallDeferred(kind="question")

    return Tool(ask_human, name=name, description=description, takes_ctx=False)


# -- the adapter ------------------------------------------------------------------------


class PydanticAIHandoffs(pausing_runs.AgentRunAdapter[PydanticAIResume]):
    """Run a Pydantic AI agent with its deferred tool calls handed to people.

    ``agent`` names a zero-argument function returning the ``Agent`` (called once per
    process, by the agent and by each worker); its ``output_type`` must include
    ``DeferredToolRequests``. ``deps`` optionally names a function called as
    ``fn(run_id=...)`` before every run of the agent, here and in each worker, that returns
    the run's dependencies (``deps``); a run without it gets None. ``on_finish`` optionally
    names a function called in the worker as ``fn(output, run_id=...)`` when a resumed run
    completes (again if a worker dies right after it: key side effects on the run id).
    ``options`` (``HandoffOptions``: channel, reviewers, ...) are given to every handoff.

    Example::

        adapter = PydanticAIHandoffs(handoffs, agent="myagent.agent:build_agent")
        outcome = adapter.run_sync("Refund order A-1001", run_id="ticket-42")
        # outcome.status == "paused": a worker continues the run once people decided.
    """

    RESUME = PydanticAIResume
    RESUME_TARGET = RESUME_TARGET
    KEY_PREFIX = "pai"
    STOP_RECORD = "history"  # {ns}:pai:history:<pause_id>: the history at the stop

    def __init__(
        self,
        handoffs: Handoffs,
        agent: str,
        *,
        deps: str | None = None,
        on_finish: str | None = None,
        **options: Unpack[HandoffOptions],
    ) -> None:
        super().__init__(handoffs, agent, on_finish=on_finish, **options)
        if deps:
            load_object(deps)  # fail now, not in a worker days later
        self.deps = deps

    @classmethod
    def for_resume(cls, handoffs: Handoffs, resume: PydanticAIResume) -> PydanticAIHandoffs:
        """The adapter as configured when it created the handoff (what workers use)."""
        adapter = cls(handoffs, resume.agent, deps=resume.deps, on_finish=resume.on_finish)
        return adapter._restored(resume)

    @property
    def agent(self) -> AbstractAgent[Any, Any]:
        """The agent (built once per process by the factory)."""
        agent: AbstractAgent[Any, Any] = self._built_agent(AbstractAgent, "an Agent")
        if not _allows_deferred_tools(agent.output_type):
            raise TypeError(
                f"the agent of {self.agent_path!r} cannot stop for people: add "
                "DeferredToolRequests to its output_type, e.g. "
                "Agent(..., output_type=[str, DeferredToolRequests])"
            )
        return agent

    async def run(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> AgentOutcome:
        """Run the agent until it finishes or stops for deferred tool calls; hand those to
        people.

        ``run_id`` names this run (use a new one per run); the handoffs carry it.
        ``message_history`` continues an earlier conversation, as in ``Agent.run``.
        """
        state = _RunState()
        result = await self._run_agent(
            state, user_prompt, message_history=message_history, deps=self._deps(run_id)
        )
        return self._settle(result, state, run_id)

    def run_sync(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
    ) -> AgentOutcome:
        """``run`` for synchronous code (not from inside a running event loop)."""
        return asyncio.run(self.run(user_prompt, run_id=run_id, message_history=message_history))

    def final_output(self, run_id: str) -> Any:
        """The output of a run that finished (as JSON: a model's fields as a dict); None
        until then."""
        return self._final_output(run_id)

    def history(self, pause_id: str) -> list[ModelMessage]:
        """The message history a run stopped with at ``pause_id`` (the ``pause.pause_id`` of
        a handoff's ``metadata["pydantic_ai"]``)."""
        raw = self._stored_stop(pause_id, "message history")
        return ModelMessagesTypeAdapter.validate_json(raw)

    async def resume(self, handoff: Handoff) -> AgentOutcome | None:
        """Continue the run of a decided handoff once every call of its stop is decided
        (what the worker calls); None while others are pending or when another handoff of
        the stop continues it."""
        resume = PydanticAIResume.of(handoff)
        records = _CallRecords(self.handoffs.redis, self.pauses.keys, resume.pause.pause_id)
        # The pause's items are its calls: what an earlier attempt ran is read with the
        # claim, in the same round trip (as is the stored history).
        ready = self._claim(handoff, resume, also_get=records.keys)
        if ready is None:
            return None
        context = {"handoff_id": handoff.id, "run_id": resume.run_id}
        if ready.state is PauseState.RESUMED:
            # A previous attempt ran the agent and recorded what came next, then died.
            logger.info("run already continued; finishing its hand-off", extra=context)
            return self._redo_settle(ready, resume.run_id)
        raw_history = self._claimed_stop(ready, "message history")
        messages = ModelMessagesTypeAdapter.validate_json(raw_history)
        results = DeferredToolResults()
        calls = _pending_calls(messages)
        for member in ready.members.values():
            _apply(results, member, calls)
        records.arm(
            frozenset(results.approvals),
            ready.values,
            self.pauses.retention_seconds,
            step_calls=len(calls),
        )
        state = _RunState(records=records)
        logger.info("continuing run with %d decisions", len(ready.members), extra=context)
        result = await self._run_agent(
            state,
            message_history=messages,
            deferred_tool_results=results,
            deps=self._deps(resume.run_id),
        )
        return self._settle(result, state, resume.run_id, after=ready.pause_id)

    # -- internals ----------------------------------------------------------------------

    async def _run_agent(self, state: _RunState, *args: Any, **kwargs: Any) -> AgentRunResult[Any]:
        """``agent.run(*args, **kwargs)`` with the adapter's hooks keeping ``state``: through
        the agent's own ``HandoffCapability`` when it was built with one, else one added to
        this run."""
        agent = self.agent
        if not _has_handoff_capability(agent):
            capability = HandoffCapability(run_state=state)
            return await agent.run(*args, capabilities=[capability], **kwargs)
        token = _ADAPTER_RUN.set((agent, state))
        try:
            return await agent.run(*args, **kwargs)
        finally:
            _ADAPTER_RUN.reset(token)

    def _deps(self, run_id: str) -> Any:
        return load_object(self.deps)(run_id=run_id) if self.deps else None

    def _settle(
        self,
        result: AgentRunResult[Any],
        state: _RunState,
        run_id: str,
        *,
        after: str | None = None,
    ) -> AgentOutcome:
        """Record what the run stopped at (deferred calls, or its output) in one transaction
        with the end of the stop it continued, then act on it."""
        messages = result.all_messages()
        output = result.output
        if isinstance(output, DeferredToolRequests):
            calls = _deferred_calls(output, messages, state.tools)
            call_ids = [call.call_id for call in calls]
            pause_id = stable_id("pap", run_id, str(len(messages)), *sorted(call_ids))
            self._open_stop(
                pause_id,
                call_ids,
                after=after,
                stop=ModelMessagesTypeAdapter.dump_json(messages),
                calls=json.dumps([call.model_dump(mode="json") for call in calls]),
            )
            handoffs = self._hand_off(pause_id, calls, run_id)
            return AgentOutcome("paused", handoffs, None, messages)
        self._finish(run_id, _dump(output), after=after, reported=output)
        return AgentOutcome("finished", [], output, messages)

    def _redo_settle(self, ready: ReadyPause, run_id: str) -> AgentOutcome:
        next_pause = ready.fields.get("next")
        if next_pause:
            stored = self.pauses.fields(next_pause).get("calls")
            if stored is None:
                raise LookupError(f"the calls of pause {next_pause} are gone (purged?)")
            calls = [DeferredCall.model_validate(call) for call in json.loads(stored)]
            return AgentOutcome("paused", self._hand_off(next_pause, calls, run_id))
        output = self.final_output(run_id)
        self._report_again(ready, output, run_id)
        return AgentOutcome("finished", [], output)

    def _hand_off(self, pause_id: str, calls: Sequence[DeferredCall], run_id: str) -> list[Handoff]:
        created = []
        count = len(calls)
        agent_name = self.defaults.agent_name or _agent_name(self.agent_path)
        for position, call in enumerate(calls, start=1):
            resume = PydanticAIResume(
                agent=self.agent_path,
                deps=self.deps,
                call_id=call.call_id,
                kind=call.kind,
                **self._run_fields(run_id, pause_id, call.call_id, count),
            )
            verb = "wants to call" if call.kind is CallKind.APPROVAL else "asks, through"
            context = f"Agent {agent_name!r} (run {run_id}) {verb} {call.tool_name}."
            if call.kind is CallKind.EXTERNAL and call.description:
                context += f" {call.tool_name}: {call.description}"
            reason = call.metadata.get("reason")  # ApprovalRequired(metadata={"reason": ...})
            if isinstance(reason, str) and reason.strip():
                context += f" Why: {reason.strip()}"
            options = self._request_options(
                resume,
                context=context,
                position=position,
                key=pausing_runs.key_id(call.call_id, "call"),
            )
            if call.kind is CallKind.APPROVAL:
                handoff = self.handoffs.request_approval(
                    run_id=run_id,
                    thread_id=run_id,
                    action=call.tool_name,
                    args=call.args,
                    description=call.description,
                    args_schema=call.args_schema,
                    **options,
                )
            else:
                question, choices = _question(call)
                handoff = self.handoffs.ask(
                    run_id=run_id, thread_id=run_id, question=question, choices=choices, **options
                )
            created.append(handoff)
        return created


async def resume_run(
    handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None
) -> None:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``).

    Called in a worker once per decided handoff; continues the run when the handoff's whole
    stop is decided. ``handoffs`` defaults to a client configured from the environment on
    the handoff's namespace (tests pass their own).
    """
    await pausing_runs.resume_in_worker(
        PydanticAIHandoffs, handoff, attempt=attempt, handoffs=handoffs
    )


# -- helpers ----------------------------------------------------------------------------


def _apply(results: DeferredToolResults, member: Handoff, calls: dict[str, ToolCallPart]) -> None:
    """Add one decision to the results the run continues with. An approved call runs with
    exactly the arguments the reviewer approved (``override_args``: the request's, with the
    edits laid over), whatever the stored history says, and only if the history still names
    the approved tool."""
    resume = PydanticAIResume.of(member)
    call_id = resume.call_id
    if resume.kind is CallKind.APPROVAL:
        if member.status is not Status.APPROVED:
            results.approvals[call_id] = ToolDenied(refusal_message(member))
            return
        action = proposed_action(member)
        stored = calls.get(call_id)
        if stored is None or stored.tool_name != action.name:
            logger.error(
                "the stored call %s is not the approved %s; not running it",
                call_id,
                action.name,
                extra={"handoff_id": member.id, "run_id": member.run_id},
            )
            results.approvals[call_id] = ToolDenied(
                f"Not run: the stored call is not the {action.name} call that was approved."
            )
            return
        args = edited_args(member) or action.args
        results.approvals[call_id] = ToolApproved(override_args=dict(args))
        return
    decision = member.resume_data
    if member.status is Status.ANSWERED and decision is not None:
        answer = decision.answer_data if decision.answer_data is not None else decision.answer
        results.calls[call_id] = answer
    else:
        results.calls[call_id] = ToolFailed(refusal_message(member, question=True))


def _pending_calls(messages: Sequence[ModelMessage]) -> dict[str, ToolCallPart]:
    """The tool calls of the history's last model response (those a stop waits on), by id."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return {call.tool_call_id: call for call in message.tool_calls}
    return {}


def _deferred_calls(
    requests: DeferredToolRequests,
    messages: Sequence[ModelMessage],
    tools: dict[str, ToolDefinition],
) -> list[DeferredCall]:
    """The stop's deferred calls, in the order the model made them."""
    parts = [*requests.approvals, *requests.calls]
    order = _call_order(messages)
    parts.sort(key=lambda part: order.get(part.tool_call_id, len(order)))
    calls = []
    for part in parts:
        definition = tools.get(part.tool_name)
        calls.append(
            DeferredCall(
                call_id=part.tool_call_id,
                kind=CallKind(requests.kind(part.tool_call_id)),
                tool_name=part.tool_name,
                args=_arguments(part),
                metadata=_jsonable(requests.metadata.get(part.tool_call_id) or {}),
                description=definition.description if definition else None,
                args_schema=definition.parameters_json_schema if definition else None,
            )
        )
    return calls


def _call_order(messages: Sequence[ModelMessage]) -> dict[str, int]:
    return {call_id: i for i, call_id in enumerate(_pending_calls(messages))}


def _arguments(part: ToolCallPart) -> dict[str, Any]:
    try:
        return _jsonable(part.args_as_dict())
    except ValueError:  # arguments the model sent as invalid JSON
        return {"arguments": part.args}


def _question(call: DeferredCall) -> tuple[str, list[str] | None]:
    """What a deferred call asks a person: the ``question`` (and ``choices``) of its
    metadata or arguments, else the call itself, whose result the person supplies."""
    for source in (call.metadata, call.args):
        question = source.get("question")
        if isinstance(question, str) and question.strip():
            choices = source.get("choices")
            if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
                return question, list(choices)
            return question, None
    arguments = json.dumps(call.args, ensure_ascii=False, default=str)
    return f"The agent needs the result of {call.tool_name} with {arguments}. Reply with it.", None


def _has_handoff_capability(agent: AbstractAgent[Any, Any]) -> bool:
    """Whether ``agent`` is an ``Agent`` whose runs get a ``HandoffCapability`` of its own
    (a wrapper agent's runs may not reach its wrapped agent's: the adapter adds its own to
    them). Under ``agent.override(capabilities=...)`` the overriding ones are what its runs
    get, which ``agent.root_capability`` does not show."""
    if not isinstance(agent, Agent):
        return False
    effective = getattr(agent, "_effective_root_capability", None)
    root = effective() if callable(effective) else agent.root_capability
    found: list[AbstractCapability[Any]] = []
    root.apply(
        lambda capability: (
            found.append(capability) if isinstance(capability, HandoffCapability) else None
        )
    )
    return bool(found)


def _allows_deferred_tools(output_type: Any) -> bool:
    """Whether an output spec includes ``DeferredToolRequests`` (in a list or a union)."""
    if output_type is DeferredToolRequests:
        return True
    if isinstance(output_type, Sequence) and not isinstance(output_type, str):
        return any(_allows_deferred_tools(item) for item in output_type)
    if typing.get_origin(output_type) in (typing.Union, types.UnionType):
        return any(_allows_deferred_tools(item) for item in typing.get_args(output_type))
    return False


def _agent_name(path: str) -> str:
    built = build_from_factory(path)
    return getattr(built, "name", None) or path.rpartition(":")[2]


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


def _dump(value: Any) -> str:
    return json.dumps({"v": _jsonable(value)})


__all__ = [
    "QUESTION_TOOL_NAME",
    "RESUME_TARGET",
    "AgentOutcome",
    "CallKind",
    "DeferredCall",
    "HandoffCapability",
    "PydanticAIHandoffs",
    "PydanticAIResume",
    "ask_human_tool",
    "resume_run",
]
