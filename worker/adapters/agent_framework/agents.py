"""Microsoft Agent Framework agents: tool approvals handed to people, the run continued in a
worker, exactly once, when all of them are decided.

How it works: a run that calls a tool with ``approval_mode="always_require"`` (or a
declaration-only tool such as ``ask_human_tool()``) ends with ``user_input_requests``. Each
becomes a handoff (an approval, or a question), and the run's ``AgentSession``
(``session.to_dict()``: the conversation and the framework's record of the pending
approvals) is kept in Redis with the requests. When every handoff of that stop is decided,
a worker restores the session (``AgentSession.from_dict``) and continues with
``agent.run(responses, session=session)``:

- an approval becomes ``request.to_function_approval_response(True)``;
- a rejection, an expiry, a cancellation or an undeliverable handoff becomes
  ``to_function_approval_response(False)`` (the model reads the framework's "rejected by
  user" result), and the reason follows in a user message, so the model knows why;
- an edit: Agent Framework binds an approval to the arguments it showed, and runs changed
  arguments only once they are approved again (a middleware that changes them gets a
  *replacement approval request*). The adapter's function middleware lays the reviewer's
  arguments over the call, and grants the replacement request the framework then makes,
  since those are exactly the arguments the reviewer approved (anything else is handed to
  people again);
- a question's answer is the declaration-only tool's result (no answer: why, in words).

The framework continues a stored session as often as it is given it (running the approved
tools each time); the handoff store decides when: once. A worker that dies while
continuing a run is replaced by another attempt from the same stored session: an approved
call that already ran returns its recorded result instead of running again. Tools that need
no approval may run again in that case.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agent_framework import (
    Agent,
    AgentResponse,
    AgentSession,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    Message,
)
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python
from redis import Redis

from store.models import Handoff, Status
from worker.adapters import pausing_runs
from worker.adapters.agent_framework import user_input
from worker.adapters.agent_framework.user_input import Asked, RequestKind, canonical
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

RESUME_TARGET = "worker.adapters.agent_framework.agents:resume_run"
"""The resume target of every handoff this adapter creates."""

METADATA_KEY = "agent_framework"
"""Where in a handoff's metadata the adapter keeps what the worker needs."""

QUESTION_TOOL_NAME = "ask_human"
"""Default name of the tool made by ``ask_human_tool``."""

MAX_REPLACEMENTS = 3
"""Rounds of replacement approvals the adapter grants in one continuation: one per edited
call is enough, the rest are the framework asking about changes nobody approved."""


class AgentFrameworkResume(pausing_runs.RunResume):
    """What a worker needs to continue the run, kept in ``metadata["agent_framework"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    agent: str
    request_id: str
    kind: RequestKind


@dataclass(frozen=True)
class AgentOutcome(pausing_runs.RunOutcome):
    """Where a run stands after the adapter ran it."""

    final_output: str | None = None
    """The agent's final text (``AgentResponse.text``) once finished."""


class _QuestionInput(BaseModel):
    question: str = Field(description="The question, in one or two sentences.")
    choices: list[str] | None = Field(
        default=None, description="Answers to offer, or null for a free-form answer."
    )


def ask_human_tool(
    *,
    name: str = QUESTION_TOOL_NAME,
    description: str = pausing_runs.QUESTION_TOOL_DESCRIPTION,
) -> FunctionTool:
    """A declaration-only tool the model calls to ask a person: Agent Framework stops the
    run for its result, the adapter hands each call to a person as a question, and the
    answer is the tool's result."""
    return FunctionTool(name=name, description=description, func=None, input_model=_QuestionInput)


# -- what the continued run records per approved call -------------------------------------


@dataclass(frozen=True)
class _CallRecords:
    """The recorded output of each approved call that ran, by the framework's occurrence
    id (stable in the stored session, so a repeated continuation finds it)."""

    redis: Redis
    keys: PauseKeys
    run_id: str
    retention_seconds: int

    def key(self, occurrence_id: str) -> str:
        return self.keys.adapter("af", "call", self.run_id, occurrence_id)

    def save(self, occurrence_id: str, output: str) -> None:
        key = self.key(occurrence_id)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "output", output)
            pipe.expire(key, self.retention_seconds)
            pipe.execute()


class ApprovedCallMiddleware(FunctionMiddleware):
    """The adapter's function middleware in a continued run: an approved call runs with the
    reviewer's edited arguments (Agent Framework then asks for their approval, which the
    adapter grants), and at most once (a repeated continuation returns its recorded
    result). Calls that needed no approval pass through untouched.

    ``edits`` and ``outputs`` (recorded outputs, read with the pause's claim) are keyed by
    the call's occurrence id, which is the id of its approval request.
    """

    def __init__(
        self,
        records: _CallRecords,
        edits: dict[str, dict[str, Any]],
        outputs: dict[str, str],
    ) -> None:
        self.records = records
        self.edits = edits
        self.outputs = outputs

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        occurrence = context.metadata.get("function_call_occurrence_id") or context.metadata.get(
            "call_id"
        )
        if "approval_response" not in context.metadata or not isinstance(occurrence, str):
            await call_next()
            return
        edit = self.edits.get(occurrence)
        if edit is not None and canonical(_jsonable(context.arguments)) != canonical(edit):
            # Changed after approval: the framework stops and asks for a replacement
            # approval of these arguments instead of running anything.
            context.arguments = dict(edit)
            await call_next()
            return
        if occurrence in self.outputs:
            logger.info(
                "tool %s already ran for call %s; returning its result",
                context.function.name,
                occurrence,
                extra={"run_id": self.records.run_id},
            )
            context.result = _load_result(self.outputs[occurrence])
            return
        await call_next()
        output = _dump_result(context.result)
        self.records.save(occurrence, output)
        self.outputs[occurrence] = output


# -- the adapter --------------------------------------------------------------------------


class AgentFrameworkHandoffs(pausing_runs.AgentRunAdapter[AgentFrameworkResume]):
    """Run an Agent Framework agent with its tool approvals handed to people.

    ``agent`` names a zero-argument function returning the ``Agent`` (the adapter gives
    its continued runs a function middleware, ``ApprovedCallMiddleware``); it is called
    once per process, by the agent and by each worker. ``on_finish`` optionally names a function
    called in the worker as ``fn(final_output, run_id=...)`` when a resumed run completes
    (again if a worker dies right after it: key side effects on the run id). ``options``
    (``HandoffOptions``: channel, reviewers, ...) are given to every handoff.

    Example::

        adapter = AgentFrameworkHandoffs(handoffs, agent="myagent.agent:build_agent")
        outcome = await adapter.run("Refund order A-1001", run_id="ticket-42")
        # outcome.status == "paused": a worker continues the run once people decided.
    """

    RESUME = AgentFrameworkResume
    RESUME_TARGET = RESUME_TARGET
    KEY_PREFIX = "af"
    STOP_RECORD = "stop"  # {ns}:af:stop:<pause_id>: the session and its requests

    @classmethod
    def for_resume(cls, handoffs: Handoffs, resume: AgentFrameworkResume) -> AgentFrameworkHandoffs:
        """The adapter as configured when it created the handoff (what workers use)."""
        return cls(handoffs, resume.agent, on_finish=resume.on_finish)._restored(resume)

    @property
    def agent(self) -> Agent[Any]:
        """The agent (built once per process by the factory)."""
        return self._built_agent(Agent, "an agent_framework.Agent")

    async def run(
        self,
        messages: str | Message | Sequence[str | Message],
        *,
        run_id: str,
        session: AgentSession | None = None,
    ) -> AgentOutcome:
        """Run the agent until it finishes or stops for people; hand those requests off.

        ``run_id`` names this run (use a new one per run); the handoffs carry it. The run
        uses ``session`` (a conversation to go on with), else a new one with ``run_id`` as
        its id; the adapter stores it at every stop.
        """
        agent = self.agent
        session = session or agent.create_session(session_id=run_id)
        response = await agent.run(messages, session=session)
        return await self._settle(response, session, run_id)

    def run_sync(
        self,
        messages: str | Message | Sequence[str | Message],
        *,
        run_id: str,
        session: AgentSession | None = None,
    ) -> AgentOutcome:
        """``run`` for synchronous code (not from inside a running event loop)."""
        return asyncio.run(self.run(messages, run_id=run_id, session=session))

    def final_output(self, run_id: str) -> str | None:
        """The final text of a run that finished in a worker (None until then)."""
        return self._final_output(run_id)

    async def resume(self, handoff: Handoff) -> AgentOutcome | None:
        """Continue the run of a decided handoff once every request of its stop is decided
        (what the worker calls); None while others are pending or when another handoff of
        the stop continues it."""
        resume = AgentFrameworkResume.of(handoff)
        records = self._records(resume.run_id)
        ready = self._claim(
            handoff,
            resume,
            # The pause's items are its calls: what an earlier attempt ran is read with the
            # claim, in the same round trip.
            also_read=lambda items: {records.key(item): ["output"] for item in items},
        )
        if ready is None:
            return None
        context = {"handoff_id": handoff.id, "run_id": resume.run_id}
        if ready.state is PauseState.RESUMED:
            # A previous attempt continued the run and recorded what came next, then died.
            logger.info("run already continued; finishing its hand-off", extra=context)
            return self._redo_settle(ready, resume.run_id)
        session, requests = _stop(self._claimed_stop(ready, "session"))
        by_request = {AgentFrameworkResume.of(m).request_id: m for m in ready.members.values()}
        responses, notes, edits = [], [], {}
        for request in requests:
            member = by_request.get(user_input.asked(request).request_id)
            if member is None:
                raise LookupError(
                    f"request {request.id} of pause {ready.pause_id} was not handed off"
                )
            answer, note, edit = _answer(request, member)
            responses.append(answer)
            if note:
                notes.append(note)
            if edit is not None:
                edits[user_input.asked(request).occurrence] = edit
        logger.info("continuing run with %d decisions", len(responses), extra=context)
        agent = self.agent
        outputs = {
            item: recorded["output"]
            for item in ready.members
            if "output" in (recorded := ready.extra.get(records.key(item), {}))
        }
        middleware = [ApprovedCallMiddleware(records, edits, outputs)]
        response = await agent.run(
            _reply_messages(responses, notes), session=session, middleware=middleware
        )
        for _ in range(MAX_REPLACEMENTS):
            granted = _grant_replacements(response.user_input_requests, edits)
            if granted is None:
                break
            response = await agent.run(
                Message(role="user", contents=granted), session=session, middleware=middleware
            )
        return await self._settle(response, session, resume.run_id, after=ready.pause_id)

    # -- internals ----------------------------------------------------------------------

    async def _settle(
        self,
        response: AgentResponse[Any],
        session: AgentSession,
        run_id: str,
        *,
        after: str | None = None,
    ) -> AgentOutcome:
        """Record what the run stopped at (new requests with the session, or its final
        text) in one transaction with the end of the pause it continued, then act on it."""
        requests = list(response.user_input_requests)
        if requests:
            asked = [user_input.asked(request) for request in requests]  # refuse others now
            occurrences = [a.occurrence for a in asked]
            pause_id = stable_id("afp", run_id, *sorted(occurrences))
            stop = {
                "session": session.to_dict(),
                "requests": [request.to_dict() for request in requests],
            }
            self._open_stop(pause_id, occurrences, after=after, stop=_dump_stop(stop, run_id))
            return AgentOutcome("paused", self._hand_off(pause_id, asked, run_id))
        text = response.text
        self._finish(run_id, json.dumps({"v": text}), after=after, reported=text)
        return AgentOutcome("finished", [], text)

    def _redo_settle(self, ready: ReadyPause, run_id: str) -> AgentOutcome:
        next_pause = ready.fields.get("next")
        if next_pause:
            _, requests = _stop(self._stored_stop(next_pause, "session"))
            asked = [user_input.asked(request) for request in requests]
            return AgentOutcome("paused", self._hand_off(next_pause, asked, run_id))
        output = self.final_output(run_id)
        self._report_again(ready, output, run_id)
        return AgentOutcome("finished", [], output)

    def _hand_off(self, pause_id: str, asked: Sequence[Asked], run_id: str) -> list[Handoff]:
        created = []
        count = len(asked)
        agent = self.agent
        name = getattr(agent, "name", None) or "agent"
        for position, request in enumerate(asked, start=1):
            tool = _find_tool(agent, request.tool)
            resume = AgentFrameworkResume(
                agent=self.agent_path,
                request_id=request.request_id,
                kind=request.kind,
                **self._run_fields(run_id, pause_id, request.occurrence, count),
            )
            context = f"Agent {name!r} (run {run_id}) wants to call {request.tool}."
            if request.kind is RequestKind.QUESTION:
                context = f"Agent {name!r} (run {run_id}) asks a question."
            # The request id as it is, as before: stops already handed off keep their keys.
            options = self._request_options(
                resume, context=context, position=position, key=request.request_id
            )
            if request.kind is RequestKind.QUESTION:
                handoff = self.handoffs.ask(
                    run_id=run_id,
                    thread_id=run_id,
                    question=request.question,
                    choices=request.choices,
                    **options,
                )
            else:
                handoff = self.handoffs.request_approval(
                    run_id=run_id,
                    thread_id=run_id,
                    action=request.tool,
                    args=request.args,
                    description=tool.description if tool else None,
                    args_schema=tool.parameters() if tool else None,
                    **options,
                )
            created.append(handoff)
        return created

    def _records(self, run_id: str) -> _CallRecords:
        return _CallRecords(
            redis=self.handoffs.redis,
            keys=self.pauses.keys,
            run_id=run_id,
            retention_seconds=self.pauses.retention_seconds,
        )


async def resume_run(
    handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None
) -> None:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``).

    Called in a worker once per decided handoff; continues the run when the handoff's whole
    stop is decided. ``handoffs`` defaults to a client configured from the environment on
    the handoff's namespace (tests pass their own).
    """
    await pausing_runs.resume_in_worker(
        AgentFrameworkHandoffs, handoff, attempt=attempt, handoffs=handoffs
    )


# -- helpers ------------------------------------------------------------------------------


def _answer(request: Content, member: Handoff) -> tuple[Content, str | None, dict[str, Any] | None]:
    """The framework's answer to one request, a note for the model (why it was refused),
    and the reviewer's edited arguments (to run once the framework asks again)."""
    asked = user_input.asked(request)
    if asked.kind is RequestKind.QUESTION:
        return user_input.tool_result(request, user_input.answer_text(member)), None, None
    if member.status is not Status.APPROVED:
        note = f"{_call(asked)}: {refusal_message(member)}"
        return user_input.approval(request, False), note, None
    edited = edited_args(member)
    if edited is None:
        return user_input.approval(request, True), None, None
    if asked.hosted:  # run by the provider: the arguments it was shown are the ones it runs
        note = (
            f"{_call(asked)}: not run: the reviewer changed the arguments to "
            f"{json.dumps(edited, default=str)}, but this tool does not accept edited "
            "arguments. Call it again with these arguments if they are right."
        )
        return user_input.approval(request, False), note, None
    return user_input.approval(request, True), None, edited


def _call(asked: Asked) -> str:
    """A tool call as the model can tell it from the others of its turn."""
    return f"{asked.tool} {json.dumps(asked.args, default=str)}"


def _reply_messages(responses: list[Content], notes: list[str]) -> list[Message]:
    """The user's turn: the answers, then (as its own message, after the tool results the
    framework places next to the calls) why any request was refused."""
    messages = [Message(role="user", contents=list(responses))]
    if notes:
        messages.append(Message(role="user", contents=["\n".join(notes)]))
    return messages


def _grant_replacements(
    requests: Sequence[Content], edits: dict[str, dict[str, Any]]
) -> list[Content] | None:
    """Approvals of the replacement requests the framework made for edited calls, when
    every pending request is one whose arguments are exactly the reviewer's; else None
    (the requests go to people)."""
    if not requests:
        return None
    granted = []
    for request in requests:
        call = request.function_call
        edit = (
            edits.get(user_input.asked(request).occurrence)
            if request.type == "function_approval_request" and call
            else None
        )
        if (
            call is None
            or edit is None
            or canonical(call.parse_arguments() or {}) != canonical(edit)
        ):
            return None
        granted.append(user_input.approval(request, True))
    return granted


def _find_tool(agent: Any, name: str) -> FunctionTool | None:
    options = getattr(agent, "default_options", None) or {}
    for tool in options.get("tools") or []:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None


def _jsonable(arguments: Any) -> Any:
    if isinstance(arguments, BaseModel):
        return arguments.model_dump(mode="json")
    return to_jsonable_python(dict(arguments))


def _dump_result(result: Any) -> str:
    if isinstance(result, list) and all(isinstance(item, Content) for item in result):
        return json.dumps({"contents": [item.to_dict() for item in result]})
    return json.dumps({"v": result}, default=str)


def _load_result(raw: str) -> Any:
    stored = json.loads(raw)
    if "contents" in stored:
        return [Content.from_dict(item) for item in stored["contents"]]
    return stored["v"]


def _dump_stop(stop: dict[str, Any], run_id: str) -> str:
    try:
        return json.dumps(stop)
    except TypeError as exc:
        raise TypeError(
            f"the session of run {run_id} does not serialize to JSON ({exc}); keep only JSON "
            "values (or registered types) in session.state so a worker can continue it"
        ) from exc


def _stop(raw: bytes | str) -> tuple[AgentSession, list[Content]]:
    """The session and the requests of a stored stop (``_dump_stop``)."""
    stop = json.loads(raw)
    session = AgentSession.from_dict(stop["session"])
    return session, [Content.from_dict(request) for request in stop["requests"]]


__all__ = [
    "METADATA_KEY",
    "QUESTION_TOOL_NAME",
    "RESUME_TARGET",
    "AgentFrameworkHandoffs",
    "AgentFrameworkResume",
    "AgentOutcome",
    "ApprovedCallMiddleware",
    "ask_human_tool",
    "resume_run",
]
