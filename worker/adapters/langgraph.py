"""LangGraph adapter: run a graph until it interrupts, hand every pending interrupt to a
person, and resume the thread in a worker, exactly once, when all of them are decided.

Install with ``pip install 'slack-handoff[langgraph]'``. The graph must be compiled with a
durable checkpointer that the agent and the workers share (for example ``SqliteSaver`` on
a file, or a Postgres saver): the worker resumes the thread from the checkpoint, possibly
days later, in another process. Name the function that builds it as ``"module:function"``::

    # myagent/graph.py
    def build_graph():
        conn = sqlite3.connect("/var/lib/myagent/checkpoints.sqlite", check_same_thread=False)
        return builder.compile(checkpointer=SqliteSaver(conn))

    # the agent
    adapter = LangGraphHandoffs(handoffs, graph="myagent.graph:build_graph", channel="C0123")
    outcome = adapter.start({"messages": [...]}, thread_id="ticket-42")
    # outcome.status == "paused"; outcome.handoffs: one per request. A worker resumes the
    # thread when they are all decided, and hands the next interrupts over the same way.

What an interrupt becomes, by the shape of its value:

- ``HumanInTheLoopMiddleware`` (LangChain agents), batched mode (``{"action_requests",
  "review_configs"}``): one approval per tool call; resumed with ``{"decisions": [...]}``
  in order. Per-call mode (``{"type": "tool_approval", ...}``): one approval per call,
  resumed with one decision; the tool's argument schema checks the reviewer's edits.
  A call whose only allowed decision is ``respond`` becomes a question.
- Agent Inbox ``HumanInterrupt`` (``{"action_request", "config", "description"}``, alone or
  in a list): an approval (``allow_accept``/``allow_edit``) or a question (``allow_respond``
  only); resumed with ``HumanResponse`` values (a list when the interrupt held a list).
- Raw ``interrupt(value)``: a string or ``{"question": ..., "choices": [...]}`` is a
  question, ``{"draft": ..., "instructions": ...}`` a correction, ``{"action": ..., "args":
  {...}}`` an approval, anything else a question showing the value. The node receives a
  ``HumanDecision`` dict: ``{"type": "approve" | "edit" | "reject" | "respond", "args" |
  "draft" | "message": ..., "outcome", "decided_by", "handoff_id"}`` (the handoff id is a
  stable idempotency key for the node's side effects).

A refusal (reject, expiry, cancellation) is sent as the framework's way of saying no, with
the reviewer's reason. An edit to an action that does not accept edits is never run as
approved: it is sent as a refusal that names the edited arguments (fail closed).

The adapter drives the graph with the synchronous ``invoke`` (in the agent and in workers),
so the checkpointer must support it (``SqliteSaver``, ``PostgresSaver``; not the async-only
savers). Interrupts raised inside subgraphs surface on the parent thread and are resumed by
id like the others.

Traps handled: a resume is always a map keyed by interrupt id (so several pending
interrupts resume together, and a value that happens to be a dict is never misread as a
map); no resume value is ``None``; an interrupt that is no longer pending in the
checkpoint (someone resumed the thread elsewhere) is never sent again; handoff ids are
never 32 hex characters.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Unpack

from langgraph.types import Command, GraphOutput, Interrupt, StateSnapshot
from redis.client import Pipeline

from store.exceptions import HandoffError
from store.models import CorrectionPayload, Handoff, RequestType, Status
from worker.adapters.pauses import (
    AdapterMetadata,
    HandoffOptions,
    PauseRef,
    Pauses,
    PauseState,
    RequestDefaults,
    build_from_factory,
    decision_note,
    edited_args,
    load_object,
    option_names,
    proposed_action,
    stable_id,
    worker_handoffs,
)
from worker.client import Handoffs, RequestOptions, reject_unknown_options

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.langgraph:resume_thread"
"""The resume target of every handoff this adapter creates."""

METADATA_KEY = "langgraph"
"""Where in a handoff's metadata the adapter keeps what the worker needs."""

HITL_DECISIONS = ("approve", "edit", "reject", "respond")
"""Decision types of ``HumanInTheLoopMiddleware``, in the order it lists them."""

Durability = Literal["sync", "async", "exit"]

# LangGraph reads a resume dict as an interrupt-id map only if every key looks like this.
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")
_QUESTION_LIMIT = 3000


class UnresumableDecision(HandoffError, ValueError):
    """The decision cannot be expressed with the decisions the graph allows (for example a
    rejection where the graph allows only ``approve``)."""


class InterruptShape(StrEnum):
    """What kind of value an interrupt carried, which decides the resume value's shape."""

    RAW = "raw"
    HITL_BATCHED = "hitl_batched"
    HITL_PER_CALL = "hitl_per_call"
    AGENT_INBOX = "agent_inbox"
    AGENT_INBOX_LIST = "agent_inbox_list"


@dataclass(frozen=True)
class ReviewItem:
    """One thing a person decides for an interrupt; a batched HITL interrupt has one per
    tool call."""

    interrupt_id: str
    index: int
    shape: InterruptShape
    request_type: RequestType
    request: dict[str, Any]
    """Keyword arguments of the ``Handoffs`` method that creates the handoff."""
    allowed: tuple[str, ...] = ()
    """The framework's decision types allowed for this item (empty for raw interrupts)."""

    @property
    def key(self) -> str:
        """The item's key within its pause."""
        return f"{self.interrupt_id}/{self.index}"


class LangGraphResume(AdapterMetadata):
    """What a worker needs to resume the thread, kept in ``metadata["langgraph"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    graph: str
    configurable: dict[str, Any]
    namespace: str
    pause: PauseRef
    interrupt_id: str
    index: int
    shape: InterruptShape
    allowed: list[str]
    defaults: RequestDefaults
    on_finish: str | None = None
    durability: Durability = "sync"


@dataclass(frozen=True)
class GraphOutcome:
    """Where a thread stands after the adapter ran it."""

    status: Literal["paused", "finished", "stopped"]
    """``paused``: waiting for ``handoffs``; ``finished``: nothing left to run; ``stopped``:
    halted without an interrupt (a static breakpoint), nothing handed off."""
    handoffs: list[Handoff] = field(default_factory=list)
    values: Any = None
    """The thread's state values."""


class LangGraphHandoffs:
    """Run a compiled LangGraph graph with its interrupts handed to people.

    ``graph`` names a zero-argument function that returns the compiled graph with its
    durable checkpointer; the agent and every worker call it (once per process).
    ``on_finish`` optionally names a function called in the worker as
    ``fn(values, thread_id=..., run_id=...)`` when a resumed thread completes; it may be
    called again if a worker dies right after it, so key its side effects on the thread id.
    ``options`` (``HandoffOptions``: channel, reviewers, ...) are given to every handoff.

    Example::

        adapter = LangGraphHandoffs(handoffs, graph="myagent.graph:build_graph",
                                    channel="C0123", reviewers=["U0ALICE"])
        outcome = adapter.start({"messages": [("user", "refund A-1")]}, thread_id="t-42")
    """

    def __init__(
        self,
        handoffs: Handoffs,
        graph: str,
        *,
        on_finish: str | None = None,
        durability: Durability = "sync",
        **options: Unpack[HandoffOptions],
    ) -> None:
        reject_unknown_options("LangGraphHandoffs", options, option_names(HandoffOptions))
        self.handoffs = handoffs
        self.graph_path = graph
        self.defaults = RequestDefaults.build(**options)
        if on_finish:
            load_object(on_finish)  # fail now, not in a worker days later
        self.on_finish = on_finish
        self.durability: Durability = durability
        self.pauses = Pauses(handoffs)

    @classmethod
    def for_resume(cls, handoffs: Handoffs, resume: LangGraphResume) -> LangGraphHandoffs:
        """The adapter as configured when it created the handoff (what workers use)."""
        adapter = cls(
            handoffs, resume.graph, on_finish=resume.on_finish, durability=resume.durability
        )
        adapter.defaults = resume.defaults
        return adapter

    @property
    def graph(self) -> Any:
        """The compiled graph (built once per process by the factory)."""
        return build_from_factory(self.graph_path)

    # -- running ------------------------------------------------------------------------

    def start(
        self,
        input: Any,
        *,
        thread_id: str,
        run_id: str | None = None,
        configurable: Mapping[str, Any] | None = None,
    ) -> GraphOutcome:
        """Run the graph on ``input`` in thread ``thread_id`` until it finishes or
        interrupts, and hand its interrupts to people.

        ``run_id`` groups the handoffs in listings (default: the thread id);
        ``configurable`` adds JSON-serializable keys to the thread's config.
        """
        config = _config(thread_id, configurable)
        output = self.graph.invoke(input, config, durability=self.durability, version="v2")
        return self._after_run(output, config, run_id or thread_id)

    def settle(
        self,
        *,
        thread_id: str,
        run_id: str | None = None,
        configurable: Mapping[str, Any] | None = None,
        pipeline: Pipeline | None = None,
    ) -> GraphOutcome:
        """Hand the thread's pending interrupts to people, or report it finished.

        Safe to repeat: interrupts already handed off return their existing handoffs. Use
        it after running the graph yourself, or to finish a hand-off that crashed midway.
        Writes queued on ``pipeline`` are executed with the first write of the hand-off.
        """
        config = _config(thread_id, configurable)
        snapshot: StateSnapshot = self.graph.get_state(config)
        if snapshot.interrupts:
            handoffs = self._hand_off(snapshot.interrupts, config, run_id or thread_id, pipeline)
            return GraphOutcome("paused", handoffs, snapshot.values)
        if pipeline is not None:
            pipeline.execute()
        if snapshot.next:
            logger.warning(
                "thread %s stopped before %s without an interrupt; nothing handed off",
                thread_id,
                ", ".join(snapshot.next),
            )
            return GraphOutcome("stopped", [], snapshot.values)
        return GraphOutcome("finished", [], snapshot.values)

    def resume(self, handoff: Handoff) -> GraphOutcome | None:
        """Continue the thread of a decided handoff once every handoff of its pause is
        decided (what the worker calls). Returns None while others are still pending,
        when another handoff of the pause resumes it, or when the graph no longer waits
        for these interrupts (stale: nothing is sent)."""
        resume = LangGraphResume.of(handoff)
        thread_id = str(resume.configurable["thread_id"])
        config = _config(thread_id, resume.configurable)
        context = {"handoff_id": handoff.id, "run_id": handoff.run_id, "thread_id": thread_id}
        graph = self.graph
        resumed_key = self._resumed_key(resume.configurable)
        pending: set[str] = set()

        def resumed_markers(items: list[str]) -> dict[str, list[str]]:
            return {resumed_key: sorted({item.partition("/")[0] for item in items})}

        def starting(members: dict[str, Handoff]) -> bool:
            # Checked before the claim, so that the claim itself records whether the
            # answers are about to be sent (a retried attempt needs to know).
            pending.update(interrupt.id for interrupt in graph.get_state(config).interrupts)
            return any(LangGraphResume.of(m).interrupt_id in pending for m in members.values())

        ready = self.pauses.claim_if_ready(
            handoff, resume.pause, also_read=resumed_markers, starting=starting
        )
        if ready is None or ready.state is PauseState.STALE:
            return None
        if ready.state is PauseState.RESUMED:
            # A previous attempt resumed the graph and died before it finished handing
            # off what followed: only do that part again.
            outcome = self.settle(
                thread_id=thread_id, run_id=handoff.run_id, configurable=resume.configurable
            )
            if ready.fields.get("reported") != "1":
                self._report(outcome, ready.pause_id, thread_id, handoff.run_id)
            return outcome
        answers = _answers(ready.members.values())
        done = set(ready.extra[resumed_key])
        to_send = {iid: value for iid, value in answers.items() if iid in pending - done}
        output: GraphOutput[Any] | None = None
        if to_send:
            if len(to_send) < len(answers):
                logger.warning(
                    "interrupts %s were answered elsewhere; resuming with the others",
                    sorted(set(answers) - set(to_send)),
                    extra=context,
                )
            logger.info("resuming thread with %d answers", len(to_send), extra=context)
            output = graph.invoke(
                Command(resume=to_send), config, durability=self.durability, version="v2"
            )
        elif ready.started_before:
            # The answers reached the graph in an attempt that died before it finished:
            # run the steps it had left from the last checkpoint, without answering again.
            snapshot = graph.get_state(config)
            if snapshot.next and not snapshot.interrupts:
                logger.info("finishing the steps a dead attempt began", extra=context)
                output = graph.invoke(None, config, durability=self.durability, version="v2")
        else:
            logger.warning(
                "interrupts %s are no longer pending; not resuming", sorted(answers), extra=context
            )
            self.pauses.mark(ready.pause_id, PauseState.STALE)
            return None
        with self.handoffs.redis.pipeline(transaction=True) as pipe:
            self._mark_interrupts_resumed(resume.configurable, answers, ready.pause_id, pipe)
            self.pauses.mark(ready.pause_id, PauseState.RESUMED, pipeline=pipe)
            if output is not None:
                outcome = self._after_run(output, config, handoff.run_id, pipe)
            else:
                outcome = self.settle(
                    thread_id=thread_id,
                    run_id=handoff.run_id,
                    configurable=resume.configurable,
                    pipeline=pipe,
                )
        self._report(outcome, ready.pause_id, thread_id, handoff.run_id)
        return outcome

    # -- internals ----------------------------------------------------------------------

    def _after_run(
        self,
        output: GraphOutput[Any],
        config: dict[str, Any],
        run_id: str,
        pipeline: Pipeline | None = None,
    ) -> GraphOutcome:
        """Hand off the interrupts a run stopped at. The run's output lists exactly the
        interrupts now pending (those it answered are gone, the others were raised again),
        so the checkpoint is read only when there are none: finished, or stopped."""
        if output.interrupts:
            handoffs = self._hand_off(output.interrupts, config, run_id, pipeline)
            return GraphOutcome("paused", handoffs, output.value)
        configurable = config["configurable"]
        return self.settle(
            thread_id=configurable["thread_id"],
            run_id=run_id,
            configurable=configurable,
            pipeline=pipeline,
        )

    def _hand_off(
        self,
        interrupts: Sequence[Interrupt],
        config: dict[str, Any],
        run_id: str,
        pipeline: Pipeline | None = None,
    ) -> list[Handoff]:
        configurable = config["configurable"]
        thread_key = _thread_key(configurable)
        items = [item for interrupt in interrupts for item in review_items(interrupt)]
        pause_id = stable_id("lgp", thread_key, *sorted(i.id for i in interrupts))
        # The pause and its items exist before any of its handoffs can be decided.
        pipe = pipeline if pipeline is not None else self.handoffs.redis.pipeline(True)
        self.pauses.open(
            pause_id, [item.key for item in items], pipeline=pipe, adapter=METADATA_KEY
        )
        pipe.execute()
        created: list[Handoff] = []
        for item in items:
            resume = LangGraphResume(
                graph=self.graph_path,
                configurable=dict(configurable),
                namespace=self.handoffs.store.keys.namespace,
                pause=PauseRef(pause_id=pause_id, item=item.key, size=len(items)),
                interrupt_id=item.interrupt_id,
                index=item.index,
                shape=item.shape,
                allowed=list(item.allowed),
                defaults=self.defaults,
                on_finish=self.on_finish,
                durability=self.durability,
            )
            context = f"LangGraph thread {configurable['thread_id']} is paused."
            if len(items) > 1:
                context += f" Request {len(created) + 1} of {len(items)}; the run continues "
                context += "when all are decided."
            options = self.defaults.options(
                context=context,
                idempotency_key=f"lg:{thread_key}:{item.key}",
                resume=RESUME_TARGET,
                metadata={METADATA_KEY: resume.model_dump(mode="json")},
            )
            handoff = _request(
                self.handoffs,
                item,
                run_id=run_id,
                thread_id=str(configurable["thread_id"]),
                options=options,
            )
            created.append(handoff)
        return created

    def _resumed_key(self, configurable: Mapping[str, Any]) -> str:
        return self.pauses.keys.adapter("lg", "resumed", _thread_key(configurable))

    def _mark_interrupts_resumed(
        self,
        configurable: Mapping[str, Any],
        interrupt_ids: Mapping[str, Any],
        pause_id: str,
        pipeline: Pipeline,
    ) -> None:
        # Besides the pause's own state: an interrupt resumed once is never sent again,
        # even if a later pause (a repeated settle) lists it too.
        key = self._resumed_key(configurable)
        pipeline.hset(key, mapping=dict.fromkeys(interrupt_ids, pause_id))
        pipeline.expire(key, self.pauses.retention_seconds)

    def _report(self, outcome: GraphOutcome, pause_id: str, thread_id: str, run_id: str) -> None:
        """Call ``on_finish`` for a finished thread, and note that it was called (a worker
        that dies in between calls it again: at least once)."""
        if outcome.status == "finished" and self.on_finish:
            load_object(self.on_finish)(outcome.values, thread_id=thread_id, run_id=run_id)
            self.pauses.mark(pause_id, PauseState.RESUMED, reported="1")


def resume_thread(handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None) -> None:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``).

    Called in a worker once per decided handoff; resumes the thread when the handoff's
    whole pause is decided. ``handoffs`` defaults to a client configured from the
    environment on the handoff's namespace (tests and benchmarks pass their own).
    """
    resume = LangGraphResume.of(handoff)
    client = handoffs or worker_handoffs(resume.namespace)
    logger.debug("resume attempt %d", attempt, extra={"handoff_id": handoff.id})
    LangGraphHandoffs.for_resume(client, resume).resume(handoff)


# -- reading interrupts -----------------------------------------------------------------


def review_items(interrupt: Interrupt) -> list[ReviewItem]:
    """What people must decide for one interrupt, read from the shape of its value."""
    value, iid = interrupt.value, interrupt.id
    if _is_hitl_request(value):
        requests, configs = value["action_requests"], value["review_configs"]
        by_name = {c.get("action_name"): c for c in configs if isinstance(c, dict)}
        items = []
        for index, request in enumerate(requests):
            config = (
                configs[index] if len(configs) == len(requests) else by_name.get(request["name"])
            )
            allowed = tuple((config or {}).get("allowed_decisions") or HITL_DECISIONS)
            items.append(_tool_call_item(iid, index, InterruptShape.HITL_BATCHED, request, allowed))
        return items
    if isinstance(value, dict) and value.get("type") == "tool_approval" and "name" in value:
        schema = getattr(interrupt, "response_schema", None)
        allowed = _allowed_from_schema(schema)
        args_schema = _edit_args_schema(schema) if "edit" in allowed else None
        return [
            _tool_call_item(
                iid, 0, InterruptShape.HITL_PER_CALL, value, allowed, args_schema=args_schema
            )
        ]
    if _is_human_interrupt(value):
        return [_inbox_item(iid, 0, InterruptShape.AGENT_INBOX, value)]
    if isinstance(value, list) and value and all(_is_human_interrupt(v) for v in value):
        return [
            _inbox_item(iid, index, InterruptShape.AGENT_INBOX_LIST, v)
            for index, v in enumerate(value)
        ]
    return [_raw_item(iid, value)]


def _is_hitl_request(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("action_requests"), list)
        and isinstance(value.get("review_configs"), list)
        and all(isinstance(r, dict) and "name" in r for r in value["action_requests"])
    )


def _is_human_interrupt(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("action_request"), dict)
        and "action" in value["action_request"]
        and isinstance(value.get("config"), dict)
    )


def _tool_call_item(
    iid: str,
    index: int,
    shape: InterruptShape,
    call: dict[str, Any],
    allowed: tuple[str, ...],
    *,
    args_schema: dict[str, Any] | None = None,
) -> ReviewItem:
    name, args = str(call["name"]), call.get("args") or {}
    description = call.get("description") or None
    if not {"approve", "edit", "reject"} & set(allowed):
        # Only "respond": an ask-the-user tool whose real implementation is the answer.
        question = args.get("question") if isinstance(args.get("question"), str) else None
        text = question or description or f"{name}: {json.dumps(args, default=str)}"
        return ReviewItem(iid, index, shape, RequestType.QUESTION, {"question": text}, allowed)
    request = {
        "action": name,
        "args": dict(args),
        "description": description,
        "args_schema": args_schema,
    }
    return ReviewItem(iid, index, shape, RequestType.APPROVAL, request, allowed)


def _inbox_item(iid: str, index: int, shape: InterruptShape, value: dict[str, Any]) -> ReviewItem:
    config, action = value["config"], value["action_request"]
    flags = (
        ("accept", "allow_accept"),
        ("edit", "allow_edit"),
        ("response", "allow_respond"),
        ("ignore", "allow_ignore"),
    )
    allowed = tuple(name for name, flag in flags if config.get(flag))
    description = value.get("description") or None
    if not {"accept", "edit"} & set(allowed):
        text = description or str(action["action"])
        return ReviewItem(iid, index, shape, RequestType.QUESTION, {"question": text}, allowed)
    request = {
        "action": str(action["action"]),
        "args": dict(action.get("args") or {}),
        "description": description,
    }
    return ReviewItem(iid, index, shape, RequestType.APPROVAL, request, allowed)


def _raw_item(iid: str, value: Any) -> ReviewItem:
    shape, kind = InterruptShape.RAW, RequestType.QUESTION
    if isinstance(value, dict):
        choices = value.get("choices")
        if isinstance(value.get("question"), str) and value["question"].strip():
            if not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
                choices = None
            return ReviewItem(
                iid, 0, shape, kind, {"question": value["question"], "choices": choices}
            )
        if isinstance(value.get("draft"), str) and value["draft"].strip():
            request = {"draft": value["draft"], "instructions": value.get("instructions")}
            return ReviewItem(iid, 0, shape, RequestType.CORRECTION, request)
        action = value.get("action") or value.get("name")
        if isinstance(action, str) and action and isinstance(value.get("args", {}), dict):
            schema = value.get("args_schema")
            request = {
                "action": action,
                "args": dict(value.get("args") or {}),
                "description": value.get("description"),
                "args_schema": schema if isinstance(schema, dict) else None,
            }
            return ReviewItem(iid, 0, shape, RequestType.APPROVAL, request)
    text = value if isinstance(value, str) else json.dumps(value, default=str, indent=2)
    if not text.strip():
        text = "The agent is waiting for your input to continue."
    if len(text) > _QUESTION_LIMIT:
        text = text[: _QUESTION_LIMIT - 1] + "…"
    return ReviewItem(iid, 0, shape, kind, {"question": text})


def _allowed_from_schema(schema: Any) -> tuple[str, ...]:
    """The decision types a per-call ``response_schema`` accepts (all four without one)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            const = (node.get("properties") or {}).get("type", {})
            if isinstance(const, dict) and const.get("const") in HITL_DECISIONS:
                found.add(const["const"])
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    return tuple(d for d in HITL_DECISIONS if d in found) or HITL_DECISIONS


def _edit_args_schema(schema: Any) -> dict[str, Any] | None:
    """The tool's argument schema inside a per-call ``response_schema``, for the reviewer's
    edit form (so Slack checks edits the way the middleware will)."""
    if not isinstance(schema, dict):
        return None
    defs = schema.get("$defs") or {}

    def resolve(node: Any) -> Any:
        ref = node.get("$ref") if isinstance(node, dict) else None
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return defs.get(ref.removeprefix("#/$defs/"))
        return node

    for definition in defs.values():
        edited = (definition.get("properties") or {}).get("edited_action")
        if edited is None:
            continue
        action = resolve(edited) or {}
        args = resolve((action.get("properties") or {}).get("args"))
        if isinstance(args, dict) and args.get("type") == "object":
            if "$ref" in json.dumps(args):
                return {**args, "$defs": defs}
            return dict(args)
    return None


# -- building resume values -------------------------------------------------------------


def _answers(members: Any) -> dict[str, Any]:
    """The resume map of a pause: one value per interrupt id, built from its handoffs."""
    by_interrupt: dict[str, list[tuple[LangGraphResume, Handoff]]] = {}
    for handoff in members:
        resume = LangGraphResume.of(handoff)
        by_interrupt.setdefault(resume.interrupt_id, []).append((resume, handoff))
    answers = {}
    for iid, group in by_interrupt.items():
        if not _INTERRUPT_ID.fullmatch(iid):
            raise ValueError(
                f"interrupt id {iid!r} is not 32 hex characters, so LangGraph would not read "
                "the resume as an id map; this LangGraph version is not supported"
            )
        group.sort(key=lambda pair: pair[0].index)
        answers[iid] = resume_value(group[0][0].shape, group)
    return answers


def resume_value(shape: InterruptShape, group: list[tuple[LangGraphResume, Handoff]]) -> Any:
    """The value one interrupt is resumed with, from its decided handoffs (in item order)."""
    hitl, inbox = _HumanInTheLoop(), _AgentInbox()
    if shape is InterruptShape.HITL_BATCHED:
        value: Any = {
            "decisions": [_framework_decision(h, tuple(r.allowed), hitl) for r, h in group]
        }
    elif shape is InterruptShape.HITL_PER_CALL:
        value = _framework_decision(group[0][1], tuple(group[0][0].allowed), hitl)
    elif shape is InterruptShape.AGENT_INBOX:
        value = _framework_decision(group[0][1], tuple(group[0][0].allowed), inbox)
    elif shape is InterruptShape.AGENT_INBOX_LIST:
        value = [_framework_decision(h, tuple(r.allowed), inbox) for r, h in group]
    else:
        value = human_decision(group[0][1])
    if value is None:  # LangGraph cannot tell a None resume from no resume at all
        raise ValueError(f"interrupt {group[0][0].interrupt_id} would be resumed with None")
    return value


def human_decision(handoff: Handoff) -> dict[str, Any]:
    """The ``HumanDecision`` a raw ``interrupt(value)`` returns, from a decided handoff."""
    decision = handoff.resume_data
    base = {
        "outcome": handoff.status.value,
        "decided_by": decision.decided_by if decision else None,
        "handoff_id": handoff.id,
    }
    payload = handoff.payload
    if handoff.status is Status.ANSWERED and decision is not None:
        return {"type": "respond", "message": decision.answer, **base}
    if handoff.status is Status.APPROVED and handoff.request_type is RequestType.APPROVAL:
        edited = edited_args(handoff)
        if edited is not None:
            return {"type": "edit", "args": edited, **base}
        return {"type": "approve", "args": proposed_action(handoff).args, **base}
    if handoff.status is Status.APPROVED and isinstance(payload, CorrectionPayload):
        corrected = decision.corrected_draft if decision else None
        if corrected is not None and corrected != payload.draft:
            return {"type": "edit", "draft": corrected, **base}
        return {"type": "approve", "draft": payload.draft, **base}
    return {"type": "reject", "message": decision_note(handoff), **base}


class _Vocabulary:
    """How one framework spells a reviewer's decision (subclasses per framework)."""

    approve_type = "approve"

    def approve(self) -> dict[str, Any]:
        raise NotImplementedError

    def edit(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def refuse(
        self, handoff: Handoff, allowed: tuple[str, ...], note: str | None
    ) -> dict[str, Any]:
        raise NotImplementedError


class _HumanInTheLoop(_Vocabulary):
    """``HumanInTheLoopMiddleware`` decisions."""

    def approve(self) -> dict[str, Any]:
        return {"type": "approve"}

    def edit(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"type": "edit", "edited_action": {"name": name, "args": args}}

    def answer(self, text: str) -> dict[str, Any]:
        return {"type": "respond", "message": text}

    def refuse(
        self, handoff: Handoff, allowed: tuple[str, ...], note: str | None
    ) -> dict[str, Any]:
        if "reject" in allowed:
            return {"type": "reject", "message": note} if note else {"type": "reject"}
        if "respond" in allowed:
            return self.answer(note or "The reviewer declined.")
        raise UnresumableDecision(
            f"handoff {handoff.id} was {handoff.status.value}, but the graph allows only "
            f"{', '.join(allowed)}; allow 'reject' for this tool"
        )


class _AgentInbox(_Vocabulary):
    """Agent Inbox ``HumanResponse`` values."""

    approve_type = "accept"

    def approve(self) -> dict[str, Any]:
        return {"type": "accept", "args": None}

    def edit(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"type": "edit", "args": {"action": name, "args": args}}

    def answer(self, text: str) -> dict[str, Any]:
        return {"type": "response", "args": text}

    def refuse(
        self, handoff: Handoff, allowed: tuple[str, ...], note: str | None
    ) -> dict[str, Any]:
        if "response" in allowed and note:
            return self.answer(note)
        if "ignore" in allowed:
            return {"type": "ignore", "args": None}
        if "response" in allowed:
            return self.answer("The reviewer declined.")
        raise UnresumableDecision(
            f"handoff {handoff.id} was {handoff.status.value}, but the interrupt allows only "
            f"{', '.join(allowed)}; set allow_ignore or allow_respond"
        )


def _framework_decision(
    handoff: Handoff, allowed: tuple[str, ...], words: _Vocabulary
) -> dict[str, Any]:
    """The framework's decision value for a decided handoff, using only ``allowed`` types.

    An edit where edits are not allowed is refused with a note naming it (fail closed:
    never run what the reviewer did not approve as it stands).
    """
    decision = handoff.resume_data
    if handoff.request_type is RequestType.QUESTION:
        if handoff.status is Status.ANSWERED and decision is not None and decision.answer:
            return words.answer(decision.answer)
        return words.refuse(handoff, allowed, decision_note(handoff))
    if handoff.status is not Status.APPROVED:
        return words.refuse(handoff, allowed, decision_note(handoff))
    action = proposed_action(handoff)
    edited = edited_args(handoff)
    if edited is not None:
        if "edit" in allowed:
            return words.edit(action.name, edited)
        note = (
            "The reviewer changed the arguments to "
            f"{json.dumps(edited, default=str)}, but this action does not accept edited "
            "arguments, so it was not run."
        )
        return words.refuse(handoff, allowed, note)
    if words.approve_type in allowed:
        return words.approve()
    if "edit" in allowed:  # approving unchanged, where only edits are allowed
        return words.edit(action.name, action.args)
    return words.refuse(handoff, allowed, decision_note(handoff))


# -- small helpers ----------------------------------------------------------------------


def _config(thread_id: str, configurable: Mapping[str, Any] | None) -> dict[str, Any]:
    if not thread_id:
        raise ValueError("thread_id is required: the checkpointer keeps the run under it")
    values = {**(configurable or {}), "thread_id": thread_id}
    try:
        json.dumps(values)
    except TypeError as exc:
        raise ValueError(
            f"configurable must be JSON-serializable (it is stored for the worker): {exc}"
        ) from None
    return {"configurable": values}


def _thread_key(configurable: Mapping[str, Any]) -> str:
    return stable_id("lgt", json.dumps(dict(configurable), sort_keys=True, default=str))


def _request(
    handoffs: Handoffs, item: ReviewItem, *, run_id: str, thread_id: str, options: RequestOptions
) -> Handoff:
    request = item.request
    if item.request_type is RequestType.APPROVAL:
        return handoffs.request_approval(
            run_id=run_id,
            thread_id=thread_id,
            action=request["action"],
            args=request["args"],
            description=request.get("description"),
            args_schema=request.get("args_schema"),
            **options,
        )
    if item.request_type is RequestType.CORRECTION:
        return handoffs.request_correction(
            run_id=run_id,
            thread_id=thread_id,
            draft=request["draft"],
            instructions=request.get("instructions"),
            **options,
        )
    return handoffs.ask(
        run_id=run_id,
        thread_id=thread_id,
        question=request["question"],
        choices=request.get("choices"),
        **options,
    )


__all__ = [
    "RESUME_TARGET",
    "GraphOutcome",
    "InterruptShape",
    "LangGraphHandoffs",
    "LangGraphResume",
    "ReviewItem",
    "UnresumableDecision",
    "human_decision",
    "resume_thread",
    "resume_value",
    "review_items",
]
