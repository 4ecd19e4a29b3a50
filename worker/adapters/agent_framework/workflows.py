"""Microsoft Agent Framework workflows: human-input requests handed to people, the workflow
resumed from its checkpoint in a worker, exactly once, when all of them are decided.

How it works: executors ask with ``await ctx.request_info(request_data, response_type)``
(``AgentExecutor`` does too, for its agent's tool approvals). The adapter runs the workflow
with a checkpoint storage every worker reaches; when the run goes idle with pending
requests, it looks up the checkpoint that holds them
(``workflow.resolve_pause_checkpoint_id``) and hands each request to a person
(``replies``: a question, a correction or an approval). When every handoff of that stop is
decided, a worker builds a new workflow instance and continues it with
``workflow.run(responses={request_id: ...}, checkpoint_id=..., checkpoint_storage=...)``;
requests of the continued run are handed off the same way.

Agent Framework restores a checkpoint and delivers responses as often as it is asked to;
the handoff store decides when: once. A worker that dies while continuing is replaced by
another attempt from the same checkpoint with the same responses, so the executors after
it run again: key their side effects on ``HumanReply.handoff_id`` (or the request id).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike, fspath
from typing import Any, ClassVar, Unpack

from agent_framework import (
    CheckpointStorage,
    Content,
    FileCheckpointStorage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowRunResult,
)
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from store.exceptions import HandoffError
from store.models import Handoff
from worker.adapters import pausing_runs
from worker.adapters.agent_framework.replies import (
    ReplyType,
    RequestShape,
    WorkflowRequest,
    classify,
    response,
)
from worker.adapters.pauses import (
    HandoffOptions,
    PauseState,
    ReadyPause,
    load_object,
    option_names,
    stable_id,
)
from worker.client import Handoffs, reject_unknown_options

logger = logging.getLogger(__name__)

RESUME_TARGET = "worker.adapters.agent_framework.workflows:resume_workflow"
"""The resume target of every handoff this adapter creates."""

METADATA_KEY = "agent_framework_workflow"
"""Where in a handoff's metadata the adapter keeps what the worker needs."""


class CheckpointMissing(HandoffError, RuntimeError):
    """The workflow stopped for people but no checkpoint holds its pending requests, so no
    worker could resume it."""


class Checkpoints(BaseModel):
    """Where the workflow's checkpoints live: a folder (``FileCheckpointStorage``) or a
    ``"module:function"`` returning any ``CheckpointStorage``."""

    folder: str | None = None
    factory: str | None = None

    def storage(self) -> CheckpointStorage:
        """The storage (a new object; the checkpoints themselves are shared)."""
        if self.folder is not None:
            return FileCheckpointStorage(self.folder)
        storage = load_object(self.factory or "")()
        if not all(hasattr(storage, name) for name in ("save", "load", "list_checkpoints")):
            raise TypeError(
                f"{self.factory!r} returned {type(storage).__name__}, not a checkpoint storage"
            )
        return storage  # type: ignore[no-any-return]


class WorkflowResume(pausing_runs.RunResume):
    """What a worker needs to continue the workflow, kept in
    ``metadata["agent_framework_workflow"]``."""

    METADATA_KEY: ClassVar[str] = METADATA_KEY

    workflow: str
    checkpoints: Checkpoints
    request_id: str
    shape: RequestShape
    reply: ReplyType
    agent_request: dict[str, Any] | None = None
    """An agent's request content, which its answer is made from."""


@dataclass(frozen=True)
class WorkflowOutcome(pausing_runs.RunOutcome):
    """Where a workflow run stands after the adapter ran it."""

    outputs: list[Any] = field(default_factory=list)
    """What the workflow yielded (``get_outputs()``) in the run that finished it."""


class WorkflowHandoffs(pausing_runs.PausingRunAdapter[WorkflowResume]):
    """Run an Agent Framework workflow with its human-input requests handed to people.

    ``workflow`` names a zero-argument function returning a new ``Workflow`` (Agent
    Framework runs one run per instance, so it is called for every run and every resume).
    The workflow is checkpointed to ``checkpoint_dir`` (a ``FileCheckpointStorage`` folder
    every worker reaches) or to the storage ``checkpoint_storage`` names
    (``"module:function"``). ``on_finish`` optionally names a function called in the worker
    as ``fn(outputs, run_id=...)`` when a resumed workflow completes (again if a worker dies
    right after it: key side effects on the run id). ``options`` (``HandoffOptions``) are
    given to every handoff.

    Example::

        adapter = WorkflowHandoffs(
            handoffs, workflow="myagent.flow:build_workflow", checkpoint_dir="/srv/checkpoints"
        )
        outcome = await adapter.run("A-1001", run_id="ticket-42")
    """

    RESUME = WorkflowResume
    RESUME_TARGET = RESUME_TARGET
    KEY_PREFIX = "afw"
    RUN_NOUN = "workflow"
    # No stop record of its own: a stop is its checkpoint, in the checkpoint storage.

    def __init__(
        self,
        handoffs: Handoffs,
        workflow: str,
        *,
        checkpoint_dir: str | PathLike[str] | None = None,
        checkpoint_storage: str | None = None,
        on_finish: str | None = None,
        **options: Unpack[HandoffOptions],
    ) -> None:
        # A misspelt option is named before anything else is checked (the base class
        # checks again, for nothing).
        reject_unknown_options("WorkflowHandoffs", options, option_names(HandoffOptions))
        if (checkpoint_dir is None) == (checkpoint_storage is None):
            raise TypeError(
                "WorkflowHandoffs needs exactly one of checkpoint_dir (a folder every worker "
                "reaches) or checkpoint_storage ('module:function' returning a storage)"
            )
        self.workflow_path = workflow
        folder = fspath(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoints = Checkpoints(folder=folder, factory=checkpoint_storage)
        if checkpoint_storage:
            load_object(checkpoint_storage)  # fail now, not in a worker days later
        super().__init__(handoffs, on_finish=on_finish, **options)

    @classmethod
    def for_resume(cls, handoffs: Handoffs, resume: WorkflowResume) -> WorkflowHandoffs:
        """The adapter as configured when it created the handoff (what workers use)."""
        adapter = cls(
            handoffs,
            resume.workflow,
            checkpoint_dir=resume.checkpoints.folder,
            checkpoint_storage=resume.checkpoints.factory,
            on_finish=resume.on_finish,
        )
        return adapter._restored(resume)

    def build(self) -> Workflow:
        """A new workflow instance from the factory."""
        factory = load_object(self.workflow_path)
        workflow = factory() if callable(factory) else None
        if not isinstance(workflow, Workflow):
            raise TypeError(
                f"{self.workflow_path!r} must name a function returning a new Workflow "
                f"(got {type(workflow if callable(factory) else factory).__name__})"
            )
        return workflow

    async def run(self, message: Any, *, run_id: str) -> WorkflowOutcome:
        """Run the workflow with ``message`` until it finishes or waits for people; hand
        its requests off. ``run_id`` names this run (use a new one per run)."""
        workflow = self.build()
        storage = self.checkpoints.storage()
        result = await workflow.run(message, checkpoint_storage=storage)
        return await self._settle(workflow, result, storage, run_id)

    def run_sync(self, message: Any, *, run_id: str) -> WorkflowOutcome:
        """``run`` for synchronous code (not from inside a running event loop)."""
        return asyncio.run(self.run(message, run_id=run_id))

    def outputs(self, run_id: str) -> list[Any] | None:
        """The outputs of a run that finished in a worker (as JSON values; None until then)."""
        return self._stored_output(run_id)

    async def resume(self, handoff: Handoff) -> WorkflowOutcome | None:
        """Continue the workflow of a decided handoff once every request of its stop is
        decided (what the worker calls); None while others are pending or when another
        handoff of the stop continues it."""
        resume = WorkflowResume.of(handoff)
        ready = self._claim(handoff, resume)
        if ready is None:
            return None
        context = {"handoff_id": handoff.id, "run_id": resume.run_id}
        storage = self.checkpoints.storage()
        if ready.state is PauseState.RESUMED:
            logger.info("workflow already continued; finishing its hand-off", extra=context)
            return await self._redo_settle(ready, storage, resume.run_id)
        # What each response is made from was kept with its handoff: no checkpoint read.
        responses = {}
        for member in ready.members.values():
            asked = WorkflowResume.of(member)
            agent_request = Content.from_dict(asked.agent_request) if asked.agent_request else None
            responses[asked.request_id] = response(asked.shape, asked.reply, agent_request, member)
        checkpoint_id = ready.fields["checkpoint"]
        logger.info("continuing workflow with %d responses", len(responses), extra=context)
        workflow = self.build()
        result = await workflow.run(
            responses=responses, checkpoint_id=checkpoint_id, checkpoint_storage=storage
        )
        return await self._settle(workflow, result, storage, resume.run_id, after=ready.pause_id)

    # -- internals ----------------------------------------------------------------------

    async def _settle(
        self,
        workflow: Workflow,
        result: WorkflowRunResult,
        storage: CheckpointStorage,
        run_id: str,
        *,
        after: str | None = None,
    ) -> WorkflowOutcome:
        """Record where the run stopped (the checkpoint of its pending requests, or its
        outputs) in one transaction with the end of the pause it continued, then act on it."""
        events = result.get_request_info_events()
        if events:
            requests = [_classify(event) for event in events]  # refuse the unsupported now
            ids = [request.request_id for request in requests]
            checkpoint_id = await workflow.resolve_pause_checkpoint_id(
                ids, checkpoint_storage=storage
            )
            if checkpoint_id is None:
                raise CheckpointMissing(
                    f"workflow {workflow.name!r} (run {run_id}) waits for {len(ids)} request(s), "
                    "but no checkpoint holds them, so no worker could resume it. Agent Framework "
                    "logs why saving it failed: usually a request or state type the storage may "
                    "not restore (register it with agent_framework.register_checkpoint_type)"
                )
            pause_id = stable_id("afw", run_id, checkpoint_id)
            self._open_stop(pause_id, ids, after=after, checkpoint=checkpoint_id)
            handoffs = self._hand_off(pause_id, requests, workflow.name, run_id)
            return WorkflowOutcome("paused", handoffs)
        outputs = [_jsonable(output) for output in result.get_outputs()]
        self._finish(run_id, json.dumps(outputs, default=str), after=after, reported=outputs)
        return WorkflowOutcome("finished", [], result.get_outputs())

    async def _redo_settle(
        self, ready: ReadyPause, storage: CheckpointStorage, run_id: str
    ) -> WorkflowOutcome:
        next_pause = ready.fields.get("next")
        if next_pause:
            fields = self.pauses.fields(next_pause)
            checkpoint: WorkflowCheckpoint = await storage.load(fields["checkpoint"])
            events = checkpoint.pending_request_info_events
            requests = [_classify(events[item]) for item in json.loads(fields["items"])]
            handoffs = self._hand_off(next_pause, requests, checkpoint.workflow_name, run_id)
            return WorkflowOutcome("paused", handoffs)
        outputs = self.outputs(run_id) or []
        self._report_again(ready, outputs, run_id)
        return WorkflowOutcome("finished", [], outputs)

    def _hand_off(
        self, pause_id: str, requests: Sequence[WorkflowRequest], name: str, run_id: str
    ) -> list[Handoff]:
        created = []
        count = len(requests)
        for position, request in enumerate(requests, start=1):
            resume = WorkflowResume(
                workflow=self.workflow_path,
                checkpoints=self.checkpoints,
                request_id=request.request_id,
                shape=request.shape,
                reply=request.reply,
                agent_request=request.agent_request,
                **self._run_fields(run_id, pause_id, request.request_id, count),
            )
            options = self._request_options(
                resume,
                context=f"Workflow {name!r} (run {run_id}): step {request.executor_id!r} asks.",
                position=position,
                # An executor may choose its request ids; idempotency keys are bounded.
                key=pausing_runs.key_id(request.request_id, "req"),
            )
            kwargs = {"run_id": run_id, "thread_id": run_id, **options}
            if request.shape in (RequestShape.APPROVAL, RequestShape.AGENT_APPROVAL):
                handoff = self.handoffs.request_approval(
                    action=request.action,
                    args=request.args,
                    description=request.description,
                    **kwargs,  # type: ignore[arg-type]
                )
            elif request.shape is RequestShape.CORRECTION:
                handoff = self.handoffs.request_correction(
                    draft=request.text,
                    instructions=request.instructions,
                    **kwargs,  # type: ignore[arg-type]
                )
            else:
                handoff = self.handoffs.ask(
                    question=request.text,
                    choices=request.choices,
                    **kwargs,  # type: ignore[arg-type]
                )
            created.append(handoff)
        return created


async def resume_workflow(
    handoff: Handoff, *, attempt: int = 1, handoffs: Handoffs | None = None
) -> None:
    """Resume target of every handoff the adapter creates (``RESUME_TARGET``).

    Called in a worker once per decided handoff; continues the workflow when the handoff's
    whole stop is decided. ``handoffs`` defaults to a client configured from the
    environment on the handoff's namespace (tests pass their own).
    """
    await pausing_runs.resume_in_worker(
        WorkflowHandoffs, handoff, attempt=attempt, handoffs=handoffs
    )


def _classify(event: Any) -> WorkflowRequest:
    return classify(event.request_id, event.source_executor_id, event.data, event.response_type)


def _jsonable(value: Any) -> Any:
    # Outputs are kept as JSON: an agent's AgentResponse reads as its text (its str).
    return to_jsonable_python(value, fallback=str)


__all__ = [
    "METADATA_KEY",
    "RESUME_TARGET",
    "CheckpointMissing",
    "Checkpoints",
    "WorkflowHandoffs",
    "WorkflowOutcome",
    "WorkflowResume",
    "resume_workflow",
]
