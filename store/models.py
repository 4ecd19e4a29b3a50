"""Pydantic models of a handoff: what agents send, what is stored, what jobs receive."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from store import slack_ids
from store.answer_schemas import answer_schema_problem
from store.arg_schemas import schema_problem
from store.canonical import action_digest
from store.decoding import json_value_problem, well_formed
from store.trace_context import trace_context_problem


class RequestType(StrEnum):
    """What the agent needs from a person."""

    APPROVAL = "approval"
    QUESTION = "question"
    CORRECTION = "correction"
    ESCALATION = "escalation"


class Status(StrEnum):
    """Where a handoff is in its life. Only ``pending`` can change."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    UNDELIVERABLE = "undeliverable"
    """Slack refused the handoff's message for good (an archived channel, a revoked token...)
    or every delivery attempt failed: closed, fail-closed, never approved; the Slack error is
    in ``resume_data.comment``."""


# Which outcomes a person (or the agent's own code) may choose for each request type.
# Expired, cancelled and undeliverable are set by the sweeper, by cancel() and by a delivery
# that failed for good, never by decide().
ALLOWED_OUTCOMES: dict[RequestType, frozenset[Status]] = {
    RequestType.APPROVAL: frozenset({Status.APPROVED, Status.REJECTED}),
    RequestType.QUESTION: frozenset({Status.ANSWERED, Status.REJECTED}),
    RequestType.CORRECTION: frozenset({Status.APPROVED, Status.REJECTED}),
    RequestType.ESCALATION: frozenset({Status.ANSWERED, Status.REJECTED}),
}


class TaskKind(StrEnum):
    """Background work attached to a handoff, each tracked with its own attempts and lease."""

    DELIVER = "deliver"
    RESUME = "resume"
    NOTIFY = "notify"  # update the posted message after a decision or a claim
    REMIND = "remind"  # remind the reviewers in the message's thread
    ESCALATE = "escalate"  # post the handoff to the escalation channel too


class TaskState(StrEnum):
    """State of a delivery or a resume."""

    NONE = "none"  # nothing to do (e.g. no resume target)
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProposedAction(_Strict):
    """The action an agent wants to take, shown to the reviewer and editable by them."""

    name: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    args_schema: dict[str, Any] | None = None
    description: str | None = None


MAX_QUORUM = 25
"""Most approvals (or rejections) a handoff may need: more people than fit one message."""


class ApprovalPayload(_Strict):
    """May the agent perform ``action``? Decided by ``approvals_required`` approvals from
    distinct eligible people (the requester never counts), or by ``rejections_required``
    rejections (the default 1: the first rejection is a veto)."""

    kind: Literal["approval"] = "approval"
    action: ProposedAction
    # Left out when 1 (most approvals): nothing stored or shown for the usual case.
    # Strict: true, 1.0 or "2" is no count of people (pydantic would take them as 1 and 2).
    approvals_required: int = Field(
        default=1, ge=1, le=MAX_QUORUM, strict=True, exclude_if=lambda n: n == 1
    )
    rejections_required: int = Field(
        default=1, ge=1, le=MAX_QUORUM, strict=True, exclude_if=lambda n: n == 1
    )


class QuestionPayload(_Strict):
    """A question for a person, optionally with suggested choices."""

    kind: Literal["question"] = "question"
    question: str = Field(min_length=1)
    choices: list[str] | None = None
    answer_schema: dict[str, Any] | None = None
    """A typed answer: the JSON Schema of a flat object whose fields the person fills in
    (``store.answer_schemas``); the decision carries it in ``resume_data.answer_data``."""


class CorrectionPayload(_Strict):
    """A draft for a person to fix before the agent uses it."""

    kind: Literal["correction"] = "correction"
    draft: str = Field(min_length=1)
    instructions: str | None = None


class EscalationPayload(_Strict):
    """The agent gives the task to a person, who claims and resolves it."""

    kind: Literal["escalation"] = "escalation"
    summary: str = Field(min_length=1)


Payload = Annotated[
    ApprovalPayload | QuestionPayload | CorrectionPayload | EscalationPayload,
    Field(discriminator="kind"),
]


def _slack_id(kind: slack_ids.IdKind) -> AfterValidator:
    """A check that a field holds an id of ``kind``; its error says what was given and what
    such an id looks like (without pydantic's "Value error," prefix: agents read it)."""

    def check(value: str) -> str:
        if problem := kind.refusal(value):
            raise PydanticCustomError("slack_id", "{problem}", {"problem": problem})
        return value

    return AfterValidator(check)


# The routing fields of a request are posted to and mentioned in Slack, so they hold ids
# and nothing else (store.slack_ids). Only requests are checked: stored handoffs (the
# ``Handoff`` model) load whatever an older version stored.
ChannelId = Annotated[str, _slack_id(slack_ids.DESTINATION)]
"""Where a handoff is posted: a conversation id, or a person's id for their DM."""
ReviewerId = Annotated[str, _slack_id(slack_ids.REVIEWER)]
EscalationTarget = Annotated[str, _slack_id(slack_ids.ESCALATION_TARGET)]


def _check_trace_context(value: dict[str, str]) -> dict[str, str]:
    if problem := trace_context_problem(value):
        raise PydanticCustomError("trace_context", "{problem}", {"problem": problem})
    return value


TraceContext = Annotated[dict[str, str], AfterValidator(_check_trace_context)]
"""A W3C Trace Context: ``traceparent`` and optionally ``tracestate`` (store.trace_context)."""


MAX_WAIT_SECONDS = 10 * 366 * 86400
"""The longest wait a handoff may be given (expiry, reminders, escalation): ten years."""


class Callback(_Strict):
    """Where a worker POSTs the decided handoff (a webhook), instead of calling a resume
    target: the way agents in other languages and other machines are resumed."""

    url: str = Field(min_length=1, max_length=2048)


class HandoffRequest(_Strict):
    """Everything an agent sends to create a handoff. Stored as-is and never changed."""

    run_id: str = Field(min_length=1, max_length=256)
    thread_id: str = Field(min_length=1, max_length=256)
    request_type: RequestType
    context: str = ""
    payload: Payload
    channel: ChannelId | None = None
    reviewers: list[ReviewerId] = Field(default_factory=list)
    # Who asked: a Slack user id (mentioned, and kept from deciding when self-approval is
    # blocked) or any other name, which is shown escaped and never becomes a mention.
    requester: str | None = Field(default=None, max_length=256)
    agent_name: str | None = None
    resume_target: str | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    # At most ten years, and finite: a deadline past year 9999 cannot be stored as a time.
    expires_in_seconds: float | None = Field(
        default=None, gt=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False
    )
    remind_after_seconds: float | None = Field(
        default=None, ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False
    )
    max_reminders: int | None = Field(default=None, ge=0, le=100)
    escalate_after_seconds: float | None = Field(
        default=None, ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False
    )
    escalate_to: EscalationTarget | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    api_key: str | None = Field(default=None, max_length=64)
    """The name of the HTTP API key that created the handoff (None: Python code)."""
    callback: Callback | None = None
    requester_may_approve: bool | None = None
    """Whether the requester may decide it themselves, as a routing policy's rule set it
    (store.policies); None: the bot's HANDOFF_BLOCK_SELF_APPROVAL decides."""
    trace_context: TraceContext | None = None
    """The agent's trace when it created the handoff (W3C ``traceparent``, ``tracestate``),
    taken by the client or from the API's headers: the handoff's delivery, decision and
    resume continue it (``worker.tracing``)."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        # NaN and infinities would be stored as null (a reviewer would approve what the
        # agent never meant), and deep nesting overflows the encoder: refused, not changed.
        if problem := json_value_problem(data):
            raise ValueError(problem)
        return well_formed(data)

    @model_validator(mode="after")
    def _schema_is_safe_to_apply(self) -> HandoffRequest:
        # Checked when the handoff is created (not when a stored one is read, so one stored
        # before this check stays readable), so the bot and the API never meet a schema
        # that would make them fetch a URL: store.arg_schemas.
        schema = getattr(getattr(self.payload, "action", None), "args_schema", None)
        if schema is not None and (problem := schema_problem(schema)):
            raise ValueError(f"payload.action.args_schema: {problem}")
        answer_schema = getattr(self.payload, "answer_schema", None)
        if answer_schema is not None:
            # Checked here, not on the payload: a stored question is read whatever it holds.
            if problem := answer_schema_problem(answer_schema):
                raise ValueError(f"payload.{problem}")
            if getattr(self.payload, "choices", None):
                raise ValueError(
                    "payload: give choices or an answer_schema, not both (an enum field "
                    "offers choices in a typed answer)"
                )
        return self

    @model_validator(mode="after")
    def _payload_matches_type(self) -> HandoffRequest:
        if self.payload.kind != self.request_type.value:
            raise ValueError(
                f"request_type is {self.request_type.value!r} but the payload is a "
                f"{self.payload.kind!r} payload"
            )
        return self


class Vote(BaseModel):
    """One person's approve or reject on an approval that needs several people."""

    model_config = ConfigDict(extra="ignore")

    by: str
    outcome: Literal["approved", "rejected"]
    at: datetime
    comment: str | None = None
    edited_args: dict[str, Any] | None = None
    """The arguments this voter proposed (their approval is for these)."""
    cleared: bool = False
    """An approval of arguments a later voter's edit replaced: it no longer counts."""
    via: str | None = None
    """The surface the vote came through (``slack_button``, ``api:<key name>``...)."""

    @model_validator(mode="before")
    @classmethod
    def _stored_args(cls, data: Any) -> Any:
        # The store keeps a voter's edited arguments as a JSON string (so that its scripts
        # never re-encode, and round, the numbers in them).
        if isinstance(data, dict) and isinstance(data.get("args"), str):
            data = {**data, "edited_args": json.loads(data["args"])}
        return data


class ResumeData(_Strict):
    """The decision handed back to the agent's run."""

    decision_id: str
    outcome: Status
    decided_by: str
    decided_at: datetime | None = None
    via: str = "api"
    comment: str | None = None
    answer: str | None = None
    answer_data: dict[str, Any] | None = None
    """A typed answer to a question with an ``answer_schema``: the object that fits it
    (``answer`` holds it as text)."""
    edited_args: dict[str, Any] | None = None
    corrected_draft: str | None = None
    approvers: list[str] | None = None
    """Everyone whose approval counted, for an approval that needed several."""
    action_digest: str | None = None
    """For an approval approved: ``sha256:`` of the RFC 8785 JSON of the action's name and
    the arguments approved (``store.canonical.action_digest``); whoever executes it checks
    that what they run has this digest."""
    votes: list[Vote] | None = None
    """Every vote cast on an approval that needed several people, in order."""

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        # What people type (a comment, an answer, edited arguments) may hold half an emoji.
        return well_formed(data)


@dataclass(frozen=True)
class PostWindow:
    """When a post of a task may have reached Slack without its answer reaching us: an
    attempt's call went unanswered, or its worker was lost, between ``start`` and ``end``
    (epoch seconds, by Redis's clock; ``end`` None: until now, the attempt under way).

    The next attempt looks for the post in that window, and only then, before posting again.
    ``read``: how far an earlier look-up cut short got, as a Slack message ts (the messages
    of the window beyond it, on the side the look-up starts from, were read); ``found``:
    the ts of posts of ours it saw there. ``route``: where that attempt posted (a
    delivery's channel as routed, "" for the default channel, "?" unknown; None: where
    this attempt posts).
    Example: ``PostWindow(1764643200.0, 1764643212.5)``.
    """

    start: float
    end: float | None = None
    read: str | None = None
    found: tuple[str, ...] = ()
    route: str | None = None

    def to_stored(self) -> str:
        """The window as the store's scripts keep it (JSON; times in microseconds, rounded
        outwards so that it never loses a message it may hold)."""
        start = max(math.floor(self.start * 1e6), 1)
        end = None if self.end is None else max(math.ceil(self.end * 1e6), start)
        return json.dumps(
            {
                "from": str(start),
                "to": None if end is None else str(end),
                "read": self.read or "",
                "found": list(self.found),
                "route": self.route,
            }
        )

    @classmethod
    def from_stored(cls, raw: str) -> PostWindow | None:
        """The window the store's scripts kept, or None (none, or unreadable)."""
        if not raw:
            return None
        try:
            stored = json.loads(raw)
            found = stored.get("found") or []
            return cls(
                start=int(stored["from"]) / 1e6,
                end=int(stored["to"]) / 1e6,
                read=str(stored.get("read") or "") or None,
                found=tuple(str(ts) for ts in found) if isinstance(found, list) else (),
                route=stored.get("route") if isinstance(stored.get("route"), str) else "?",
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class TaskProgress(BaseModel):
    """Progress of a delivery or a resume, as stored (read-only: a new state is a new
    object, so handoffs can share the one for a task not started)."""

    model_config = ConfigDict(frozen=True)

    state: TaskState = TaskState.NONE
    attempt: int = 0
    max_attempts: int = 0
    last_error: str | None = None
    completed_at: datetime | None = None


NOT_STARTED = TaskProgress()
"""The progress of a task that was never queued."""


class Handoff(BaseModel):
    """A handoff as stored: the agent's request plus everything that happened to it since."""

    id: str
    run_id: str
    thread_id: str
    request_type: RequestType
    context: str
    payload: Payload
    status: Status
    resume_data: ResumeData | None = None
    channel: str | None = None
    reviewers: list[str] = Field(default_factory=list)
    requester: str | None = None
    agent_name: str | None = None
    resume_target: str | None = None
    idempotency_key: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    decided_at: datetime | None = None
    expires_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    delivery: TaskProgress = NOT_STARTED
    resume: TaskProgress = NOT_STARTED
    notify: TaskProgress = NOT_STARTED
    message_refs: dict[str, Any] = Field(default_factory=dict)
    escalate_to: str | None = None
    escalated_at: datetime | None = None
    reminders_sent: int = 0
    api_key: str | None = None
    """The name of the HTTP API key that created it; None: created by Python code."""
    callback: Callback | None = None
    redelivered_from: str | None = None
    """The ``undeliverable`` handoff this one asks again (``HandoffStore.redeliver``)."""
    requester_may_approve: bool | None = None
    """As the request's: set by a routing policy's rule; None: the bot's setting decides."""
    version: int = 0
    votes: list[Vote] = Field(default_factory=list)
    """The votes cast so far on an approval that needs several people."""
    proposed_args: dict[str, Any] | None = None
    """The arguments a voter's edit proposed (None: the agent's): what the votes are for."""
    trace_context: dict[str, str] | None = None
    """The agent's W3C Trace Context when it created the handoff (see ``HandoffRequest``)."""

    @property
    def is_pending(self) -> bool:
        """True while nobody has decided, cancelled or expired the handoff."""
        return self.status is Status.PENDING

    @property
    def quorum(self) -> tuple[int, int] | None:
        """(approvals, rejections) needed, for an approval that needs more than one
        decision; None when one decision decides."""
        payload = self.payload
        if not isinstance(payload, ApprovalPayload):
            return None
        needed = (payload.approvals_required, payload.rejections_required)
        return None if needed == (1, 1) else needed

    @property
    def current_args(self) -> dict[str, Any]:
        """The arguments up for approval: the latest voter's edit, else the agent's (empty
        for a handoff that is no approval)."""
        if self.proposed_args is not None:
            return self.proposed_args
        action = getattr(self.payload, "action", None)
        return dict(action.args) if action is not None else {}

    @property
    def current_digest(self) -> str | None:
        """The digest of the action up for approval with ``current_args``
        (``store.canonical.action_digest``), what a view of it shows; None for other
        requests."""
        action = getattr(self.payload, "action", None)
        if action is None:
            return None
        return action_digest(action.name, self.current_args)

    @property
    def approved_args(self) -> dict[str, Any]:
        """The arguments an approved approval may run with: the agent's, with the
        reviewers' edits laid over them."""
        edited = self.resume_data.edited_args if self.resume_data else None
        action = getattr(self.payload, "action", None)
        original = dict(action.args) if action is not None else {}
        return {**original, **edited} if edited else original

    def live_votes(self, outcome: str) -> list[Vote]:
        """The votes for ``outcome`` that still count."""
        return [v for v in self.votes if v.outcome == outcome and not v.cleared]

    def vote_of(self, user: str) -> Vote | None:
        """``user``'s vote that still counts (they may not vote again), or None: the handoff
        waits for them, if they may decide it."""
        return next((v for v in self.votes if v.by == user and not v.cleared), None)

    def failed_tasks(self) -> list[tuple[TaskKind, TaskProgress]]:
        """Its delivery, resume and message update that gave up, in that order."""
        tasks = (
            (TaskKind.DELIVER, self.delivery),
            (TaskKind.RESUME, self.resume),
            (TaskKind.NOTIFY, self.notify),
        )
        return [(kind, task) for kind, task in tasks if task.state is TaskState.FAILED]

    @classmethod
    def from_request(
        cls,
        handoff_id: str,
        request: HandoffRequest,
        *,
        created_at: datetime | str,
        expires_at: datetime | str | None,
        delivery: TaskProgress | dict[str, Any],
        escalate_to: str | None,
    ) -> Handoff:
        """The handoff a create just stored, built from the (validated) request itself
        rather than by parsing back what was written. Times may be given as stored
        (epoch-millisecond strings)."""
        return cls.model_validate(
            {
                "id": handoff_id,
                "run_id": request.run_id,
                "thread_id": request.thread_id,
                "request_type": request.request_type,
                "context": request.context,
                "payload": request.payload,
                "status": Status.PENDING,
                "channel": request.channel,
                "reviewers": request.reviewers,
                "requester": request.requester,
                "agent_name": request.agent_name,
                "resume_target": request.resume_target,
                "idempotency_key": request.idempotency_key,
                "metadata": request.metadata,
                "api_key": request.api_key,
                "callback": request.callback,
                "requester_may_approve": request.requester_may_approve,
                "trace_context": request.trace_context,
                "created_at": created_at,
                "expires_at": expires_at,
                "delivery": delivery,
                "escalate_to": escalate_to or None,
                "version": 1,
            }
        )


class AuditEvent(BaseModel):
    """One line of the audit trail."""

    event: str
    handoff_id: str
    at: datetime
    actor: str
    detail: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: str | bytes, handoff_id: str | None = None) -> AuditEvent:
        """Parse an event as written by the Lua scripts (``at`` in epoch milliseconds).

        ``handoff_id``: of a handoff's own trail, whose events leave their id out (older
        ones hold it); the namespace's stream names it in each event. A trail in a
        handoff's body holds each event as an array, ``[at, actor, event, detail]``.
        """
        data = json.loads(raw)
        if isinstance(data, list):  # [at, actor, event, detail]: a line of a handoff's body
            at, actor, event, *rest = data
            data = {"at": at, "actor": actor, "event": event, "detail": rest[0] if rest else {}}
        detail = data.get("detail")
        return cls(
            event=data["event"],
            handoff_id=data.get("handoff_id") or handoff_id,
            at=_ms(data["at"]) or datetime.now(UTC),
            actor=data.get("actor") or "",
            # cjson encodes an empty Lua table as a JSON array.
            detail=detail if isinstance(detail, dict) else {},
        )


class Page(BaseModel):
    """One page of a listing; pass ``next_cursor`` back to get the next one."""

    items: list[Handoff]
    next_cursor: str | None = None


def _ms(value: str | int | None) -> datetime | None:
    if value in (None, "", "0", 0):
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def stored_time(value: str | None) -> str | None:
    """A stored epoch-milliseconds time as pydantic takes it; unset (empty or 0) is None.

    pydantic-core reads a number this large as milliseconds since the epoch, in UTC.
    """
    if not value or value == "0":
        return None
    return value
