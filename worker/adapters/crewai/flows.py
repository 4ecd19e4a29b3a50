"""CrewAI Flows: ``@human_feedback`` steps answered in Slack, and the flow resumed in a
worker, exactly once, with the person's answer.

Give the step a ``SlackFeedbackProvider`` (CrewAI's async feedback provider protocol)::

    # myagent/flow.py: a module the worker imports (not __main__)
    from crewai.flow import Flow, human_feedback, listen, start
    from worker.adapters.crewai import SlackFeedbackProvider

    slack = SlackFeedbackProvider(channel="C0123ABCD")

    class RefundFlow(Flow[RefundState]):
        @start()
        @human_feedback(
            message="Refund this order?", emit=["approved", "rejected"], llm="gpt-4o-mini",
            provider=slack,
        )
        def propose(self) -> dict: ...

        @listen("approved")
        def refund(self) -> str:
            return issue(self.last_human_feedback.output)  # as approved (maybe edited)

    # the agent process
    pending = RefundFlow().kickoff()  # HumanFeedbackPending; .callback_info["handoff_id"]

How it works: when the step has run, CrewAI asks the provider for feedback. The provider
keeps the flow's state and CrewAI's ``PendingFeedbackContext`` in Redis with a pause
(``{ns}:pause:<id>``, with the flow's persistence as CrewAI serializes it), hands the request
to people (``worker.adapters.crewai.requests`` says as what) and raises
``HumanFeedbackPending``: CrewAI stops the flow, saves it to the flow's persistence and
returns the pending object from ``kickoff()``. When the handoff is decided, a worker writes
the pending feedback back to the flow's persistence from Redis, restores the flow with
CrewAI's own ``Flow.from_pending(flow_id, persistence)`` and continues it with
``resume_async(feedback)``; a step that asks again is handed to people the same way, from
the worker.

- The outcome is the one the person clicked: the flow's LLM is not asked to map it.
  Feedback typed as the answer to a question with choices is mapped by the flow's LLM, as
  CrewAI does.
- An edit (an approval's fields, a correction's text) becomes the step's output:
  ``self.last_human_feedback.output`` downstream, and the flow's result if it is the last.
- ``self.last_human_feedback.metadata["handoff"]`` holds the handoff's ``id``, ``decision``,
  ``status`` and ``decided_by``: key the side effects of the steps after a feedback step on
  the id. A worker that dies while continuing a flow is replaced by another attempt, which
  restores the flow as it was at the pause and runs those steps again.
- The flow continues once per pause, however often the handoff is clicked or its job
  retried; a flow waits for one feedback at a time (CrewAI keeps one pending feedback per
  flow), so each pause holds one handoff.
"""

from __future__ import annotations

import importlib
import json
import logging
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Unpack

from crewai.flow.async_feedback import HumanFeedbackPending, PendingFeedbackContext
from crewai.flow.flow import Flow
from crewai.flow.persistence.base import FlowPersistence
from crewai.flow.persistence.factory import default_flow_persistence
from crewai.llms.base_llm import BaseLLM
from pydantic import BaseModel

from store.exceptions import HandoffError
from store.models import Handoff
from worker.adapters.crewai.requests import (
    FeedbackReply,
    FeedbackRequest,
    FeedbackShape,
    as_object,
    reply,
    shown,
)
from worker.adapters.pauses import (
    AdapterMetadata,
    HandoffOptions,
    InvalidFactory,
    PauseRef,
    Pauses,
    PauseState,
    RequestDefaults,
    option_names,
    stable_id,
    worker_handoffs,
)
from worker.client import Handoffs, reject_unknown_options
from worker.resume_targets import (
    ResumeTargetRefused,
    allowed_resume_modules,
    check_allowed,
    module_allowed,
)

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.crewai.flows:resume_flow"
"""The resume target of every handoff the provider creates."""

METADATA_KEY = "crewai"
"""Where in a handoff's metadata the provider keeps what the worker needs."""

_ITEM = "feedback"
"""The one item of a pause: a flow waits for one feedback at a time."""


class UnsupportedFlow(HandoffError, TypeError):
    """A flow whose feedback a worker could not resume: its class or its persistence cannot
    be found again in another process. Raised when the step asks, before anything is
    handed to people."""


class CrewAIResume(AdapterMetadata):
    """What a worker needs to continue the flow, kept in ``metadata["crewai"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    flow: str
    """The flow's class, ``"module:Class"``."""
    flow_id: str
    method: str
    namespace: str
    pause: PauseRef
    request: FeedbackRequest


@dataclass(frozen=True)
class _Resuming:
    """The pause a worker is continuing: a step that asks again hands off through the
    worker's client, and its pause is named after this one."""

    handoffs: Handoffs
    pause_id: str


# CrewAI runs providers in threads it starts with the caller's context (asyncio.to_thread),
# so a context variable reaches them from the resume below.
_resuming: ContextVar[_Resuming | None] = ContextVar("handoff_crewai_resuming", default=None)


class SlackFeedbackProvider:
    """A CrewAI ``HumanFeedbackProvider`` that hands a ``@human_feedback`` step to people in
    Slack and lets a worker resume the flow with their answer.

    ``handoffs`` is the client the agent process hands off with (default:
    ``Handoffs.from_env()``, made at the first request); a worker uses its own.
    ``options`` (``HandoffOptions``: channel, reviewers, ...) are given to every handoff.
    The flow's class must be importable by the worker (not defined in ``__main__`` or in a
    function), and every feedback step of the flow should use a provider of this kind (a
    worker has no console to ask on).

    Example::

        slack = SlackFeedbackProvider(channel="C0123ABCD", reviewers=["U0ALICE"])

        @human_feedback(message="Publish this?", emit=["approved", "rejected"], provider=slack)
        def draft(self) -> str: ...
    """

    def __init__(self, handoffs: Handoffs | None = None, **options: Unpack[HandoffOptions]) -> None:
        reject_unknown_options("SlackFeedbackProvider", options, option_names(HandoffOptions))
        self.defaults = RequestDefaults.build(**options)
        self._handoffs = handoffs

    @property
    def handoffs(self) -> Handoffs:
        """The agent process's client (``Handoffs.from_env()`` unless one was given)."""
        if self._handoffs is None:
            self._handoffs = Handoffs.from_env()
        return self._handoffs

    def request_feedback(self, context: PendingFeedbackContext, flow: Flow[Any]) -> str:
        """Hand the step's output to people and pause the flow (what CrewAI calls).

        Raises ``HumanFeedbackPending`` whose ``callback_info`` has the ``handoff_id``
        and ``pause_id``; ``UnsupportedFlow`` if no worker could resume this flow.
        """
        resuming = _resuming.get()
        handoffs = resuming.handoffs if resuming else self.handoffs
        path = flow_path(type(flow))
        persistence = _persistence_record(flow)
        request = FeedbackRequest.of(context.emit, context.default_outcome, context.method_output)
        nowhere = not (request.reject or request.default_outcome)
        if request.shape is FeedbackShape.CHOICE and nowhere:
            # Nobody answering (an expiry, a cancellation) must not continue the flow on an
            # outcome a model picks from "nobody answered": the step names where it goes.
            raise UnsupportedFlow(
                f"the feedback step {context.method_name} offers {request.outcomes}, none of "
                "which means no: give it a default_outcome, the outcome the flow takes when "
                "nobody answers (the request expires or is cancelled)"
            )
        # In a worker, named after the pause being continued: a retried resume asks the same
        # again and finds its pause. In the agent process, every kickoff asks anew: a flow
        # kicked off again with the id of an earlier run (CrewAI's way to restore its state)
        # must not find that run's pause and its decided handoff.
        parent = resuming.pause_id if resuming else f"kickoff:{uuid.uuid4().hex}"
        pause_id = stable_id("cwp", context.flow_id, parent, context.method_name)
        pending = {"context": context.to_dict(), "state": as_object(flow.state)}
        # Kept before anything is handed off, so a decision can never find nothing to
        # resume; a retried resume asking again keeps the first copy.
        Pauses(handoffs).open(
            pause_id,
            [_ITEM],
            adapter=METADATA_KEY,
            pending=json.dumps(pending),
            persistence=json.dumps(persistence),
        )
        try:
            handoff = self._hand_off(handoffs, context, flow, path, pause_id, request)
        except Exception:
            if resuming is None:
                # This kickoff's own pause, which no handoff names: it would hold the flow's
                # state in Redis for good. (A worker's may be an earlier attempt's, which a
                # handoff names: the retry needs it.)
                handoffs.redis.delete(Pauses(handoffs).keys.pause(pause_id))
            raise
        logger.info(
            "flow %s asks for feedback on %s",
            context.flow_id,
            context.method_name,
            extra={"handoff_id": handoff.id, "run_id": context.flow_id},
        )
        raise HumanFeedbackPending(
            context=context, callback_info={"handoff_id": handoff.id, "pause_id": pause_id}
        )

    def final_output(self, flow_id: str) -> Any:
        """The result of a flow that a worker finished (as JSON values); None until then."""
        raw = self.handoffs.redis.get(_output_key(Pauses(self.handoffs), flow_id))
        return json.loads(raw)["v"] if raw is not None else None

    def _hand_off(
        self,
        handoffs: Handoffs,
        context: PendingFeedbackContext,
        flow: Flow[Any],
        path: str,
        pause_id: str,
        request: FeedbackRequest,
    ) -> Handoff:
        resume = CrewAIResume(
            flow=path,
            flow_id=context.flow_id,
            method=context.method_name,
            namespace=handoffs.store.keys.namespace,
            pause=PauseRef(pause_id=pause_id, item=_ITEM, size=1),
            request=request,
        )
        name = self.defaults.agent_name or flow.name or type(flow).__name__
        said = f"Flow {name!r} (flow {context.flow_id}) asks for feedback on {context.method_name}."
        if request.shape in (FeedbackShape.CHOICE, FeedbackShape.TEXT):
            said += f" Its output:\n\n{shown(context.method_output)}"
        options = self.defaults.options(
            context=said,
            idempotency_key=f"crewai:{pause_id}",
            resume=RESUME_TARGET,
            metadata={METADATA_KEY: resume.model_dump(mode="json")},
        )
        if not self.defaults.agent_name:
            options["agent_name"] = name
        message = context.message.strip() or f"Your feedback on {context.method_name}?"
        run = {"run_id": context.flow_id, "thread_id": context.flow_id}
        output = context.method_output
        if request.shape is FeedbackShape.APPROVAL:
            schema = type(output).model_json_schema() if isinstance(output, BaseModel) else None
            return handoffs.request_approval(
                **run,
                action=context.method_name,
                args=as_object(output),
                args_schema=schema,
                description=message,
                **options,
            )
        if request.shape is FeedbackShape.CORRECTION:
            return handoffs.request_correction(**run, draft=output, instructions=message, **options)
        return handoffs.ask(**run, question=message, choices=request.outcomes or None, **options)


async def resume_flow(
    handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None
) -> None:
    """Resume target of every handoff the provider creates (``RESUME_TARGET``): continue
    the flow with the decision, once per pause.

    ``handoffs`` defaults to a client configured from the environment on the handoff's
    namespace (tests pass their own).
    """
    resume = CrewAIResume.of(handoff)
    client = handoffs or worker_handoffs(resume.namespace)
    pauses = Pauses(client)
    extra = {"handoff_id": handoff.id, "run_id": resume.flow_id}
    ready = pauses.claim_if_ready(handoff, resume.pause, starting=lambda members: True)
    if ready is None:
        return
    if ready.state is PauseState.RESUMED:
        logger.info("flow already continued from this pause", extra=extra)
        return
    if ready.started_before:
        logger.warning(
            "an earlier attempt (%d) died continuing this flow; continuing it again from "
            "the pause, so the steps after the feedback run again",
            attempt - 1,
            extra=extra,
        )
    if "pending" not in ready.fields or "persistence" not in ready.fields:
        raise LookupError(f"the pending feedback of pause {ready.pause_id} is gone (purged?)")
    flow_class = load_flow_class(resume.flow)
    persistence = _restore_persistence(json.loads(ready.fields["persistence"]))
    pending = json.loads(ready.fields["pending"])
    _restore_pending(persistence, resume.flow_id, pending)
    flow = flow_class.from_pending(resume.flow_id, persistence)
    answer = reply(handoff, resume.request)
    _answer(flow, answer, handoff)
    logger.info("continuing flow with a %s", answer.decision, extra=extra)
    token = _resuming.set(_Resuming(client, ready.pause_id))
    try:
        result = await flow.resume_async(answer.feedback)
    finally:
        _resuming.reset(token)
    if isinstance(result, HumanFeedbackPending):
        next_pause = str(result.callback_info.get("pause_id", ""))
        if not next_pause:
            logger.warning("the flow paused with a provider of another kind", extra=extra)
        pauses.mark(ready.pause_id, PauseState.RESUMED, next=next_pause)
        return
    with client.redis.pipeline(transaction=True) as pipe:
        pipe.set(
            _output_key(pauses, resume.flow_id),
            json.dumps({"v": as_object(result)}),
            ex=pauses.retention_seconds,
        )
        pauses.mark(ready.pause_id, PauseState.RESUMED, pipeline=pipe, finished="1")
        pipe.execute()
    logger.info("flow finished", extra=extra)


def _restore_pending(persistence: FlowPersistence, flow_id: str, pending: dict[str, Any]) -> None:
    """Make the flow's persistence hold the pending feedback as it was at the pause.

    A previous attempt may have cleared it (CrewAI clears it before running the next
    steps) or replaced it (the flow paused again before that attempt died): every attempt
    starts from the copy taken at the pause. Written only when the persistence holds
    something else: on a first attempt it holds CrewAI's own copy, and a write (a SQLite
    commit) is most of what a resume would add to CrewAI's."""
    context = PendingFeedbackContext.from_dict(pending["context"])
    kept = persistence.load_pending_feedback(flow_id)
    if kept is not None:
        state, kept_context = kept
        if kept_context.to_dict() == context.to_dict() and state == pending["state"]:
            return
    persistence.save_pending_feedback(
        flow_uuid=flow_id, context=context, state_data=pending["state"]
    )


def _answer(flow: Flow[Any], answer: FeedbackReply, handoff: Handoff) -> None:
    """Put the decision into the restored flow's pending feedback, which CrewAI turns into
    the step's ``HumanFeedbackResult``."""
    pending = flow.pending_feedback
    if pending is None:
        raise LookupError(f"flow {flow.flow_id} has no pending feedback to resume")
    if answer.edited:
        pending.method_output = answer.output
    pending.metadata = {**pending.metadata, "handoff": answer.record(handoff)}
    if pending.emit and answer.outcome is not None:
        # CrewAI maps feedback to an outcome with an LLM, and uses an LLM object it is given
        # as it is (a config is built into one): this one answers with the outcome the
        # person clicked, so no model is asked and none can route a click elsewhere.
        chosen = ChosenOutcome(model=ChosenOutcome.MODEL, outcome=answer.outcome)
        pending.llm = chosen  # type: ignore[assignment]
    elif pending.emit:
        # Typed feedback is mapped by the step's own LLM, as the flow's code declares it,
        # not by the config kept in Redis with the pause: whoever can write there could
        # name any endpoint, and the worker would send it its API key with the feedback.
        step = flow._definition.methods.get(pending.method_name)
        declared = step.human_feedback if step is not None else None
        pending.llm = declared.llm if declared is not None else None


class ChosenOutcome(BaseLLM):
    """The "LLM" that maps a person's feedback to the outcome they chose in Slack."""

    MODEL: ClassVar[str] = "slack-handoff-decision"
    outcome: str

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        """CrewAI's outcome question, answered as its structured output is parsed."""
        return json.dumps({"outcome": self.outcome})


# -- finding the flow and its persistence again in a worker -----------------------------


def flow_path(flow_class: type) -> str:
    """``"module:Class"`` of a flow class, checked to lead back to it (as a worker would
    import it, within ``HANDOFF_RESUME_MODULES``); ``UnsupportedFlow`` if it does not."""
    module, name = flow_class.__module__, flow_class.__qualname__
    if flow_class is Flow or not issubclass(flow_class, Flow):
        raise UnsupportedFlow(
            "SlackFeedbackProvider resumes flows of a Flow subclass (a flow built with "
            "Flow.from_declaration cannot be resumed by a worker)"
        )
    if module == "__main__" or "<locals>" in name:
        where = module if module == "__main__" else "a function"
        raise UnsupportedFlow(
            f"the flow class {name} is defined in {where}, which a worker cannot import: "
            "define it at the top of a module on the worker's PYTHONPATH (e.g. myagent/flow.py)"
        )
    path = f"{module}:{name}"
    try:
        found = load_flow_class(path)
    except (InvalidFactory, ResumeTargetRefused) as exc:
        raise UnsupportedFlow(f"flow {path} cannot be resumed by a worker: {exc}") from exc
    if found is not flow_class:
        raise UnsupportedFlow(f"{path} names another class than the running flow's")
    return path


def load_flow_class(path: str) -> type[Flow[Any]]:
    """The Flow subclass named by ``"module:Class"``; its module must be allowed by
    ``HANDOFF_RESUME_MODULES`` (checked before importing it) and define the class."""
    check_allowed(path, what="flow")
    module_name, _, qualname = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # any import-time error makes the flow unusable
        raise InvalidFactory(
            f"cannot import {module_name!r} for {path!r} ({exc}); the worker must import "
            "the flow's module (check PYTHONPATH)"
        ) from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not (isinstance(target, type) and issubclass(target, Flow)):
        raise InvalidFactory(f"{path!r} is not a Flow class")
    if not module_allowed(target.__module__, allowed_resume_modules()):
        raise ResumeTargetRefused(
            f"flow {path} is defined in {target.__module__}, outside HANDOFF_RESUME_MODULES"
        )
    return target


def _persistence_record(flow: Flow[Any]) -> dict[str, Any]:
    """The flow's persistence as a worker rebuilds it: its class and its fields (CrewAI
    serializes a flow's persistence the same way). A flow without one gets CrewAI's
    default now, which CrewAI would give it at the pause: the worker must write to the same
    store, and the default's file depends on the process's directory."""
    if flow.persistence is None:
        flow.persistence = default_flow_persistence()
    persistence = flow.persistence
    kind = type(persistence)
    if kind.load_pending_feedback is FlowPersistence.load_pending_feedback:
        raise UnsupportedFlow(
            f"the flow's persistence {kind.__name__} cannot keep a pending feedback "
            "(no load_pending_feedback): use SQLiteFlowPersistence or implement it"
        )
    try:
        fields = persistence.model_dump(mode="json")
    except Exception as exc:  # pydantic cannot dump a field: the worker could not rebuild it
        raise UnsupportedFlow(
            f"the flow's persistence {kind.__name__} cannot be rebuilt by a worker: its "
            f"fields are not JSON ({exc}); give it fields like a path or a URL"
        ) from exc
    return {"class": f"{kind.__module__}:{kind.__qualname__}", "fields": fields}


def _restore_persistence(record: dict[str, Any]) -> FlowPersistence:
    """The persistence ``_persistence_record`` described, from the classes this process
    imported (the flow's module imports its persistence): nothing is imported by name."""
    wanted = record["class"]
    for kind in _subclasses(FlowPersistence):
        if f"{kind.__module__}:{kind.__qualname__}" == wanted:
            return kind.model_validate(record["fields"])
    raise LookupError(
        f"the flow's persistence {wanted} is not imported in this worker: import it in the "
        "flow's module"
    )


def _subclasses(base: type[Any]) -> Iterator[type[Any]]:
    kinds: list[type[Any]] = base.__subclasses__()
    for kind in kinds:
        yield kind
        yield from _subclasses(kind)


def _output_key(pauses: Pauses, flow_id: str) -> str:
    return pauses.keys.adapter("crewai", "output", flow_id)


__all__ = [
    "METADATA_KEY",
    "RESUME_TARGET",
    "ChosenOutcome",
    "CrewAIResume",
    "SlackFeedbackProvider",
    "UnsupportedFlow",
    "flow_path",
    "load_flow_class",
    "resume_flow",
]
