"""What the adapters of runs that stop for people share: the OpenAI Agents SDK, Pydantic AI
and Agent Framework agents (``AgentRunAdapter``), and Agent Framework workflows
(``PausingRunAdapter``).

Each of them runs its framework until the run finishes or stops with requests for people.
At a stop it keeps what the framework continues from (a run state, a message history, a
session; a workflow's checkpoint is the framework's own) and opens a pause of the stop's
requests, one handoff each; once all are decided, a worker continues the run exactly once
(``Pauses``). The mechanism around the framework is the same for all of them and lives
here: the adapter's configuration, the transaction that records a stop (or a finished run)
with the end of the pause the run continued from, ``on_finish``, the options of each
handoff, and the resume target's entry point. Running the framework, reading its stops and
turning decisions into its answers stay in each adapter's own module.

Nothing here imports a framework: ``worker.adapters`` without one installed must import.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar, Unpack

from redis.client import Pipeline

from store.models import Handoff
from worker.adapters.pauses import (
    AdapterMetadata,
    HandoffOptions,
    PauseRef,
    Pauses,
    PauseState,
    ReadyPause,
    RequestDefaults,
    build_from_factory,
    load_object,
    option_names,
    stable_id,
    worker_handoffs,
)
from worker.client import Handoffs, RequestOptions, reject_unknown_options

MAX_KEY_ID_LENGTH = 120
"""Longest framework id put into an idempotency key as is; longer ones are digested."""

QUESTION_TOOL_DESCRIPTION = (
    "Ask a person a clarifying question when you cannot continue without their answer "
    "(a missing fact, a choice only they can make). Returns their answer."
)
"""What the model reads of each adapter's ``ask_human_tool`` unless told otherwise."""


class RunResume(AdapterMetadata):
    """What every adapter built on this module keeps in each handoff's metadata for the
    worker: the run, the pause it belongs to, and how to create the run's next handoffs.
    Each adapter subclasses it with what its framework needs."""

    run_id: str
    namespace: str
    pause: PauseRef
    defaults: RequestDefaults
    on_finish: str | None = None


ResumeT = TypeVar("ResumeT", bound=RunResume)


@dataclass(frozen=True)
class RunOutcome:
    """Where a run stands after the adapter ran it; each adapter adds what a finished run
    gives back."""

    status: Literal["paused", "finished"]
    handoffs: list[Handoff] = field(default_factory=list)


class PausingRunAdapter(ABC, Generic[ResumeT]):
    """The configuration and the Redis records of an adapter whose runs stop for people.

    A subclass names its ``RESUME`` metadata model, its ``RESUME_TARGET``, the prefix of
    its keys (``KEY_PREFIX``, also that of its idempotency keys) and, when it stores what
    the framework continues from, the name of that record (``STOP_RECORD``); it implements
    ``for_resume`` and ``resume``.
    """

    RESUME: ClassVar[type[RunResume]]
    RESUME_TARGET: ClassVar[str]
    KEY_PREFIX: ClassVar[str]
    STOP_RECORD: ClassVar[str | None] = None
    """``{ns}:<KEY_PREFIX>:<STOP_RECORD>:<pause_id>`` keeps a stop; None: the adapter keeps
    none of its own."""
    RUN_NOUN: ClassVar[str] = "run"
    """What continues once a stop is decided, as the reviewers read it."""

    def __init__(
        self,
        handoffs: Handoffs,
        *,
        on_finish: str | None = None,
        **options: Unpack[HandoffOptions],
    ) -> None:
        reject_unknown_options(type(self).__name__, options, option_names(HandoffOptions))
        self.handoffs = handoffs
        self.defaults = RequestDefaults.build(**options)
        if on_finish:
            load_object(on_finish)  # fail now, not in a worker days later
        self.on_finish = on_finish
        self.pauses = Pauses(handoffs)

    @classmethod
    @abstractmethod
    def for_resume(cls, handoffs: Handoffs, resume: ResumeT) -> Self:
        """The adapter as configured when it created the handoff (what workers use)."""

    @abstractmethod
    async def resume(self, handoff: Handoff) -> RunOutcome | None:
        """Continue the run of a decided handoff once its whole stop is decided."""

    # -- for the subclasses -----------------------------------------------------------

    def _restored(self, resume: RunResume) -> Self:
        """This adapter with the request defaults the handoff was created with (they may
        differ from this process's: ``for_resume``)."""
        self.defaults = resume.defaults
        return self

    def _claim(
        self,
        handoff: Handoff,
        resume: RunResume,
        *,
        also_read: Callable[[list[str]], dict[str, list[str]]] | None = None,
        also_get: Callable[[list[str]], list[str]] | None = None,
    ) -> ReadyPause | None:
        """The handoff's pause if it is all decided and this handoff resumes it (see
        ``Pauses.claim_if_ready``), flagged started: the adapter hands the decisions to its
        framework right after. The stored stop (``_claimed_stop``) is read with the claim."""
        stop_key = self._stop_key(resume.pause.pause_id) if self.STOP_RECORD else None

        def gets(items: list[str]) -> list[str]:
            extra = also_get(items) if also_get else []
            return [stop_key, *extra] if stop_key else extra

        return self.pauses.claim_if_ready(
            handoff,
            resume.pause,
            also_read=also_read,
            also_get=gets,
            starting=lambda members: True,
        )

    def _claimed_stop(self, ready: ReadyPause, what: str) -> bytes:
        """The record of the stop ``ready`` continues from, as read with the claim (``what``
        it holds, named in the error when it is gone)."""
        raw = ready.values.get(self._stop_key(ready.pause_id))
        if raw is None:
            raise LookupError(f"the {what} of pause {ready.pause_id} is gone (purged?)")
        return raw

    def _open_stop(
        self,
        pause_id: str,
        items: list[str],
        *,
        after: str | None,
        stop: str | bytes | None = None,
        **fields: str,
    ) -> None:
        """Record a stop of the run: what the framework continues from (``stop``, under
        ``_stop_key``; the same stop recorded again keeps the first) and its pause, in one
        transaction with the end of the pause the run continued from (``after``)."""
        with self.handoffs.redis.pipeline(transaction=True) as pipe:
            if stop is not None:
                pipe.set(self._stop_key(pause_id), stop, nx=True)
            self.pauses.open(
                pause_id, items, pipeline=pipe, adapter=self.RESUME.METADATA_KEY, **fields
            )
            if after is not None:
                self._end_pause(after, pipe, next=pause_id)
            pipe.execute()

    def _finish(self, run_id: str, output: str, *, after: str | None, reported: Any) -> None:
        """Record a finished run's ``output`` (JSON) in one transaction with the end of the
        pause it continued from, then report ``reported`` to ``on_finish``."""
        with self.handoffs.redis.pipeline(transaction=True) as pipe:
            pipe.set(self._output_key(run_id), output, ex=self.pauses.retention_seconds)
            if after is not None:
                self._end_pause(after, pipe, finished="1")
            pipe.execute()
        if after is not None:
            self._report(after, reported, run_id)

    def _end_pause(self, pause_id: str, pipeline: Pipeline, **fields: str) -> None:
        """Mark a continued pause resumed; its stored stop is kept for the retention period
        only (what came next has a stop of its own)."""
        self.pauses.mark(pause_id, PauseState.RESUMED, pipeline=pipeline, **fields)
        if self.STOP_RECORD is not None:
            pipeline.expire(self._stop_key(pause_id), self.pauses.retention_seconds)

    def _report(self, pause_id: str, output: Any, run_id: str) -> None:
        """Call ``on_finish`` for a run a worker finished, and note that it was called (a
        worker that dies in between calls it again: at least once)."""
        if self.on_finish:
            load_object(self.on_finish)(output, run_id=run_id)
            self.pauses.mark(pause_id, PauseState.RESUMED, reported="1")

    def _report_again(self, ready: ReadyPause, output: Any, run_id: str) -> None:
        """Call ``on_finish`` for a run an earlier attempt finished, unless that attempt
        noted that it called it."""
        if ready.fields.get("reported") != "1":
            self._report(ready.pause_id, output, run_id)

    def _stored_stop(self, pause_id: str, what: str) -> bytes | str:
        """The record of a stop (``what`` it holds, named in the error when it is gone)."""
        raw = self.handoffs.redis.get(self._stop_key(pause_id))
        if raw is None:
            raise LookupError(f"the {what} of pause {pause_id} is gone (purged?)")
        return raw

    def _stored_output(self, run_id: str) -> Any:
        """The JSON a finished run's output was recorded as (None until then)."""
        raw = self.handoffs.redis.get(self._output_key(run_id))
        return json.loads(raw) if raw is not None else None

    def _run_fields(self, run_id: str, pause_id: str, item: str, size: int) -> dict[str, Any]:
        """The ``RunResume`` fields of the handoff of ``item`` in a stop of ``size`` items."""
        return {
            "run_id": run_id,
            "namespace": self.handoffs.store.keys.namespace,
            "pause": PauseRef(pause_id=pause_id, item=item, size=size),
            "defaults": self.defaults,
            "on_finish": self.on_finish,
        }

    def _request_options(
        self, resume: RunResume, *, context: str, position: int, key: str
    ) -> RequestOptions:
        """The options of one handoff of a stop: ``context`` (what the run asks for), its
        place in the stop, and an idempotency key from the pause and ``key`` (unique in
        it), so handing the same stop off again creates nothing new."""
        count = resume.pause.size
        if count > 1:
            context += f" Request {position} of {count}; the {self.RUN_NOUN} continues when "
            context += "all are decided."
        return self.defaults.options(
            context=context,
            idempotency_key=f"{self.KEY_PREFIX}:{resume.pause.pause_id}:{key}",
            resume=self.RESUME_TARGET,
            metadata={self.RESUME.METADATA_KEY: resume.model_dump(mode="json")},
        )

    def _stop_key(self, pause_id: str) -> str:
        if self.STOP_RECORD is None:
            raise TypeError(f"{type(self).__name__} keeps no stop records")
        return self.pauses.keys.adapter(self.KEY_PREFIX, self.STOP_RECORD, pause_id)

    def _output_key(self, run_id: str) -> str:
        return self.pauses.keys.adapter(self.KEY_PREFIX, "output", run_id)


class AgentRunAdapter(PausingRunAdapter[ResumeT]):
    """A ``PausingRunAdapter`` of an agent built once per process by the factory that
    ``agent`` names (``"module:function"``)."""

    def __init__(
        self,
        handoffs: Handoffs,
        agent: str,
        *,
        on_finish: str | None = None,
        **options: Unpack[HandoffOptions],
    ) -> None:
        super().__init__(handoffs, on_finish=on_finish, **options)
        self.agent_path = agent

    def _built_agent(self, kind: type[Any], what: str) -> Any:
        """The agent the factory built, refused unless it is a ``kind`` (``what``, in the
        message)."""
        agent = build_from_factory(self.agent_path)
        if not isinstance(agent, kind):
            raise TypeError(f"{self.agent_path!r} returned {type(agent).__name__}, not {what}")
        return agent

    def _final_output(self, run_id: str) -> Any:
        """The output of a run that finished in a worker, recorded as ``{"v": output}``
        (None until then)."""
        stored = self._stored_output(run_id)
        return stored["v"] if stored is not None else None


async def resume_in_worker(
    adapter: type[PausingRunAdapter[Any]],
    handoff: Handoff,
    *,
    attempt: int,
    handoffs: Handoffs | None,
) -> None:
    """What each adapter's resume target does: continue the handoff's run with the adapter
    as configured when it created the handoff, on a client of the handoff's namespace
    configured from the environment unless ``handoffs`` is given."""
    resume = adapter.RESUME.of(handoff)
    client = handoffs or worker_handoffs(resume.namespace)
    # Logged under the adapter's module, as its resume target's own line.
    logger = logging.getLogger(adapter.__module__)
    logger.debug("resume attempt %d", attempt, extra={"handoff_id": handoff.id})
    await adapter.for_resume(client, resume).resume(handoff)


def key_id(framework_id: str, prefix: str) -> str:
    """A framework's id (a tool call's, a request's) as the last part of an idempotency
    key: as it is, or a stable digest of it when it is long (the framework or an executor
    chooses it; idempotency keys are bounded)."""
    if len(framework_id) <= MAX_KEY_ID_LENGTH:
        return framework_id
    return stable_id(prefix, framework_id)


__all__ = [
    "QUESTION_TOOL_DESCRIPTION",
    "AgentRunAdapter",
    "PausingRunAdapter",
    "RunOutcome",
    "RunResume",
    "key_id",
    "resume_in_worker",
]
