"""``Handoffs``: what agent code imports to hand work to people and get it back."""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypedDict, Unpack

from pydantic import ValidationError
from redis import Redis
from redis.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store import defaults
from store.connection import parse_redis_url
from store.exceptions import ConfigurationError, InvalidHandoffRequest
from store.ids import new_handoff_id
from store.keys import KeySpace
from store.lost_attempts import retry_warning
from store.lua import ReplicaAcks
from store.models import (
    AuditEvent,
    Handoff,
    HandoffRequest,
    Page,
    RequestType,
    Status,
    TaskKind,
)
from store.policies import RoutingPolicy
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from store.settings import StoreSettings
from worker.resume_targets import resolve_target
from worker.tracing import current_trace_context

logger = logging.getLogger(__name__)

# While waiting, re-read the handoff this often in case a pub/sub message was missed
# (for example across a reconnect). Decisions normally arrive by push, not by this.
_WAIT_RECHECK_SECONDS = 5.0

_RESUBSCRIBE_PAUSE_SECONDS = 0.5
"""Pause between attempts to subscribe again while Redis is unreachable (a failover takes
seconds)."""


class RequestOptions(TypedDict, total=False):
    """Options every ``request_*`` method accepts."""

    context: str
    """What the agent is doing and why it needs a person."""
    channel: str | None
    """Slack channel id to post in (``C…``, ``G…``, ``D…``; default: the client's
    ``default_channel``)."""
    reviewers: Sequence[str]
    """Slack user (``U…``, ``W…``) or user-group (``S…``) ids allowed to decide (default:
    the client's ``default_reviewers``)."""
    resume: str | None
    """``"module:function"`` called in a worker with the decided handoff."""
    expires_in: timedelta | float | None
    """Time (or seconds) after which the handoff expires; expiry never approves."""
    idempotency_key: str | None
    """Retrying with the same key returns the first handoff instead of a second one."""
    requester: str | None
    """Who or what asked: a Slack user id (mentioned; blocks self-approval when enabled) or
    any name."""
    agent_name: str | None
    """Name of the agent, shown to reviewers."""
    metadata: dict[str, Any]
    """Free-form data kept with the handoff and handed back on resume."""
    remind_after: timedelta | float | None
    """Remind the reviewers after this long, and again each time as long (default: off)."""
    max_reminders: int | None
    """Most reminders to send."""
    escalate_after: timedelta | float | None
    """Post the handoff to ``escalate_to`` too if still pending after this long."""
    escalate_to: str | None
    """Escalation channel id (``C…``, ``G…``, ``D…``), or user-group id (``S…``) whose
    members may then decide."""


REQUEST_OPTIONS: frozenset[str] = (
    RequestOptions.__required_keys__ | RequestOptions.__optional_keys__
)
"""The names of ``RequestOptions``."""


def check_request_options(method: Callable[..., Any], options: Mapping[str, object]) -> None:
    """Raise ``TypeError`` if ``options`` (the ``**options`` of ``method``) holds a name
    that is no ``RequestOptions``: Python would take it silently, and a misspelt
    ``reviewers`` would let anyone decide. The message names the option, the closest
    accepted one, and every accepted name."""
    if any(name not in REQUEST_OPTIONS for name in options):
        accepted = [*_named_parameters(method), *sorted(REQUEST_OPTIONS)]
        reject_unknown_options(method.__qualname__, options, accepted)


def reject_unknown_options(
    where: str, options: Mapping[str, object], accepted: Sequence[str]
) -> None:
    """Raise ``TypeError`` naming each of ``options`` that is not in ``accepted`` (with the
    closest accepted name, and all of them): the one check behind every ``**options`` that
    agent code passes, in the client and in the adapters."""
    unknown = [name for name in options if name not in accepted]
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], accepted, n=1)
    names = ", ".join(repr(name) for name in unknown)
    raise TypeError(
        f"{where}() got unexpected keyword argument{'s' * (len(unknown) > 1)} "
        f"{names}{f' (did you mean {close[0]!r}?)' if close else ''}; "
        f"it accepts {', '.join(accepted)}"
    )


@functools.cache
def _named_parameters(method: Callable[..., Any]) -> tuple[str, ...]:
    # The method's own parameters, before the RequestOptions, for the TypeError's list.
    return tuple(
        name
        for name, parameter in inspect.signature(method).parameters.items()
        if name != "self"
        and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
    )


class Handoffs:
    """Create handoffs, wait for them, and decide them programmatically.

    Example::

        handoffs = Handoffs.from_url("redis://localhost:6379")
        h = handoffs.request_approval(
            run_id="run-42", thread_id="t-1", action="issue_refund", args={"amount": 30},
            context="Customer was double charged", resume="myagent.steps:on_decision",
        )
        decided = handoffs.wait(h.id, timeout=30)
    """

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = defaults.NAMESPACE,
        max_payload_bytes: int = defaults.MAX_PAYLOAD_BYTES,
        retention: timedelta = timedelta(seconds=defaults.RETENTION_SECONDS),
        tasks: TaskPolicy | None = None,
        default_channel: str | None = None,
        default_reviewers: Sequence[str] = (),
        default_expires_in: timedelta | None = None,
        resume_modules: Sequence[str] | None = None,
        policy: RoutingPolicy | None = None,
        replica_acks: ReplicaAcks | None = None,
    ) -> None:
        self.redis = redis
        # None: this process's HANDOFF_RESUME_MODULES (worker.resume_targets).
        self._resume_modules = None if resume_modules is None else tuple(resume_modules)
        self.store = HandoffStore(
            redis,
            StoreConfig(
                namespace=namespace,
                max_payload_bytes=max_payload_bytes,
                retention_seconds=retention.total_seconds(),
                tasks=tasks or TaskPolicy(),
                resume_modules=self._resume_modules or (),
                # Routing is the store's, so the client is routed as the API is.
                policy=policy,
                replica_acks=replica_acks or ReplicaAcks(),
            ),
        )
        self.default_channel = default_channel
        self.default_reviewers = list(default_reviewers)
        self.default_expires_in = default_expires_in

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Handoffs:
        """Connect to Redis at ``url``, configured as ``from_env`` configures the client
        (HANDOFF_NAMESPACE and every other HANDOFF_* setting of the environment, so that the
        agent writes where the workers read): ``url`` takes the place of REDIS_URL only, and
        ``options`` (those of the constructor) override the rest. The client resends a
        command whose connection failed (``store.settings.connect``), so a create or a
        decision whose reply was lost returns what it did. Raises ``ConfigurationError``
        naming the variable when a setting is malformed."""
        try:
            parse_redis_url(url)
        except ValueError as exc:
            raise ConfigurationError(f"from_url: {exc}") from None
        return cls.from_settings(StoreSettings.from_env(redis_url=url), **options)

    @classmethod
    def from_env(cls, **options: Any) -> Handoffs:
        """Connect and configure from the environment (REDIS_URL, HANDOFF_*), like the
        worker does; ``options`` override what the environment says. Raises
        ``ConfigurationError`` naming the variable when one is unset or malformed."""
        return cls.from_settings(StoreSettings.from_env(), **options)

    @classmethod
    def from_settings(
        cls, settings: StoreSettings, *, redis: Redis | None = None, **options: Any
    ) -> Handoffs:
        """Configure the store as ``settings`` say, on ``redis`` (default: a new client for
        ``settings.redis_url``); ``options`` (those of the constructor) override them."""
        config = settings.store_config()
        from_settings: dict[str, Any] = {
            "namespace": config.namespace,
            "max_payload_bytes": config.max_payload_bytes,
            "retention": timedelta(seconds=config.retention_seconds),
            "tasks": config.tasks,
            "resume_modules": config.resume_modules,
            "policy": config.policy,
            "replica_acks": config.replica_acks,
        }
        client = redis if redis is not None else settings.open_redis()
        return cls(client, **{**from_settings, **options})

    # -- creating -----------------------------------------------------------------------

    def request_approval(
        self,
        *,
        run_id: str,
        thread_id: str,
        action: str,
        args: dict[str, Any] | None = None,
        args_schema: dict[str, Any] | None = None,
        description: str | None = None,
        approvals_required: int = 1,
        rejections_required: int = 1,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """Ask a person whether the agent may perform ``action`` with ``args``.

        The decision is ``approved`` (possibly with ``edited_args``) or ``rejected``. With
        ``approvals_required=N`` it takes N approvals from distinct eligible people (the
        requester never counts); ``rejections_required`` rejections reject it (default 1:
        the first rejection is a veto).
        """
        check_request_options(Handoffs.request_approval, options)
        payload = {
            "kind": "approval",
            "action": {
                "name": action,
                "args": args or {},
                "args_schema": args_schema,
                "description": description,
            },
            "approvals_required": approvals_required,
            "rejections_required": rejections_required,
        }
        return self.request(
            RequestType.APPROVAL, payload, run_id=run_id, thread_id=thread_id, **options
        )

    def ask(
        self,
        *,
        run_id: str,
        thread_id: str,
        question: str,
        choices: Sequence[str] | None = None,
        answer_schema: dict[str, Any] | None = None,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """Ask a person a question; the decision is ``answered`` with the answer text.

        ``answer_schema`` asks for a typed answer: the JSON Schema of a flat object (string,
        number, integer, boolean, enum and date fields), filled in one input per field in
        Slack; the decision carries the object in ``resume_data.answer_data``. Example::

            handoffs.ask(run_id=r, thread_id=t, question="Refund?", answer_schema={
                "type": "object", "required": ["amount"],
                "properties": {"amount": {"type": "number", "minimum": 0}}})
        """
        check_request_options(Handoffs.ask, options)
        payload = {
            "kind": "question",
            "question": question,
            "choices": list(choices) if choices is not None else None,
            "answer_schema": answer_schema,
        }
        return self.request(
            RequestType.QUESTION, payload, run_id=run_id, thread_id=thread_id, **options
        )

    def request_correction(
        self,
        *,
        run_id: str,
        thread_id: str,
        draft: str,
        instructions: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """Have a person fix ``draft``; the decision carries ``corrected_draft``."""
        check_request_options(Handoffs.request_correction, options)
        payload = {"kind": "correction", "draft": draft, "instructions": instructions}
        return self.request(
            RequestType.CORRECTION, payload, run_id=run_id, thread_id=thread_id, **options
        )

    def escalate(
        self,
        *,
        run_id: str,
        thread_id: str,
        summary: str,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """Hand the task to a person, who claims it and resolves it with notes."""
        check_request_options(Handoffs.escalate, options)
        payload = {"kind": "escalation", "summary": summary}
        return self.request(
            RequestType.ESCALATION, payload, run_id=run_id, thread_id=thread_id, **options
        )

    def request(
        self,
        request_type: RequestType | str,
        payload: dict[str, Any],
        *,
        run_id: str,
        thread_id: str,
        **options: Unpack[RequestOptions],
    ) -> Handoff:
        """Create a handoff of any type from a payload dict (what the typed methods call).

        Raises ``InvalidHandoffRequest`` (unknown type, missing or bad fields),
        ``PayloadTooLarge`` or ``InvalidResumeTarget`` (``ResumeTargetRefused`` for a
        target outside ``HANDOFF_RESUME_MODULES``), and ``TypeError`` for an option
        that is not one of ``RequestOptions`` (as do the typed methods); nothing is
        written then.
        """
        check_request_options(Handoffs.request, options)
        try:
            kind = RequestType(request_type)
        except ValueError:
            raise InvalidHandoffRequest(
                f"unknown request type {request_type!r}; use one of "
                f"{', '.join(t.value for t in RequestType)}"
            ) from None
        reviewers = options.get("reviewers") or self.default_reviewers
        if isinstance(reviewers, str):
            raise InvalidHandoffRequest(
                f"reviewers must be a list of Slack ids, e.g. [{reviewers!r}], not a string"
            )
        resume = options.get("resume")
        if resume:
            # Refused early, as the worker would refuse it, when this process lists the
            # modules resume targets may come from (HANDOFF_RESUME_MODULES).
            resolve_target(resume, allowed=self._resume_modules)
        expires_in = options.get("expires_in", self.default_expires_in)
        if isinstance(expires_in, timedelta):
            expires_in = expires_in.total_seconds()
        try:
            request = HandoffRequest.model_validate(
                {
                    "run_id": run_id,
                    "thread_id": thread_id,
                    "request_type": kind,
                    "context": options.get("context", ""),
                    "payload": payload,
                    "channel": options.get("channel") or self.default_channel,
                    "reviewers": list(reviewers),
                    "requester": options.get("requester"),
                    "agent_name": options.get("agent_name"),
                    "resume_target": resume,
                    "idempotency_key": options.get("idempotency_key"),
                    "expires_in_seconds": expires_in,
                    "remind_after_seconds": _seconds(options.get("remind_after")),
                    "max_reminders": options.get("max_reminders"),
                    "escalate_after_seconds": _seconds(options.get("escalate_after")),
                    "escalate_to": options.get("escalate_to"),
                    "metadata": options.get("metadata") or {},
                    # The agent's trace, continued by the delivery, decision and resume.
                    "trace_context": current_trace_context(),
                }
            )
        except ValidationError as exc:
            raise InvalidHandoffRequest(_describe(exc)) from None
        return self.store.create(request, handoff_id=new_handoff_id()).handoff

    # -- reading and waiting ------------------------------------------------------------

    def get(self, handoff_id: str) -> Handoff:
        """The handoff as stored now; raises ``HandoffNotFound``.

        With replica acks, a decided handoff is returned once that many replicas have its
        decision, else ``ReplicasNotConfirmed`` (try again): a decision they lack may be
        undone by a failover (its reviewer was told to try again), and a run that polls
        with ``get`` must not act on it, as one that waits does not.
        """
        handoff = self.store.get(handoff_id)
        if not handoff.is_pending:
            self.store.confirm_replicated(handoff_id)
        return handoff

    def wait(self, handoff_id: str, timeout: float | None = None) -> Handoff:
        """Block until the handoff is decided (or expired/cancelled) and return it.

        The decision is pushed over Redis pub/sub, so this returns within milliseconds of
        it, without polling. Raises ``TimeoutError`` after ``timeout`` seconds. With replica
        acks, a decision is returned once that many replicas have it (see ``_confirmed``).
        """
        channel = self.store.keys.decided_channel(handoff_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel)
            # Subscribed first, then read: a decision between the two is not missed.
            handoff = self.store.get(handoff_id)
            while True:
                while handoff.is_pending:
                    remaining = _WAIT_RECHECK_SECONDS
                    if deadline is not None:
                        remaining = min(remaining, deadline - time.monotonic())
                        if remaining <= 0:
                            raise TimeoutError(
                                f"handoff {handoff_id} still pending after {timeout} s"
                            )
                    try:
                        pubsub.get_message(timeout=remaining)
                        handoff = self.store.get(handoff_id)
                    except (RedisConnectionError, RedisTimeoutError):
                        # The server went away (a restart, a failover): subscribe again, on
                        # whichever server is the master now, and read again.
                        pubsub.close()
                        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
                        handoff = self._resubscribe(pubsub, channel, handoff_id, deadline)
                handoff = self._confirmed(handoff, deadline, timeout)
                if not handoff.is_pending:
                    return handoff
        finally:
            pubsub.close()

    def _confirmed(
        self, handoff: Handoff, deadline: float | None, timeout: float | None
    ) -> Handoff:
        """``handoff``, decided, once the replicas HANDOFF_MIN_REPLICA_ACKS asks for have its
        decision: one they lack may be undone by a failover (its reviewer was told to try
        again), and the run must not act on it. Until then the decision is read again (a
        failover may have undone it: then the wait goes on)."""
        while True:
            try:
                self.store.confirm_replicated(handoff.id)
                return handoff
            except (RedisConnectionError, RedisTimeoutError):  # ReplicasNotConfirmed too
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"handoff {handoff.id} not confirmed decided after {timeout} s "
                        "(its decision is not on enough replicas yet)"
                    ) from None
                time.sleep(_RESUBSCRIBE_PAUSE_SECONDS)
                try:
                    handoff = self.store.get(handoff.id)
                except (RedisConnectionError, RedisTimeoutError):
                    continue
                if handoff.is_pending:
                    return handoff  # undone by a failover: wait for the decision again

    def _resubscribe(
        self, pubsub: PubSub, channel: str, handoff_id: str, deadline: float | None
    ) -> Handoff:
        """Subscribe ``pubsub`` to ``channel`` and read the handoff, trying again while
        Redis is unreachable, until ``deadline``."""
        while True:
            try:
                pubsub.subscribe(channel)
                return self.store.get(handoff_id)
            except (RedisConnectionError, RedisTimeoutError):
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                pubsub.reset()
                time.sleep(_RESUBSCRIBE_PAUSE_SECONDS)

    def list_pending(
        self,
        *,
        channel: str | None = None,
        run_id: str | None = None,
        reviewer: str | None = None,
        request_type: RequestType | str | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> Page:
        """Pending handoffs, oldest first, filtered by at most one of the keyword filters."""
        index = pending_index(
            self.store.keys,
            channel=channel,
            run_id=run_id,
            reviewer=reviewer,
            request_type=request_type,
        )
        return self.store.list_pending(index, cursor=cursor, limit=limit)

    def audit(self, handoff_id: str) -> list[AuditEvent]:
        """The handoff's audit trail, oldest first."""
        return self.store.audit_trail(handoff_id)

    # -- deciding -----------------------------------------------------------------------

    def decide(
        self,
        handoff_id: str,
        outcome: Status | str,
        *,
        by: str,
        comment: str | None = None,
        answer: str | None = None,
        answer_data: dict[str, Any] | None = None,
        edited_args: dict[str, Any] | None = None,
        corrected_draft: str | None = None,
        via: str = "api",
    ) -> Handoff:
        """Decide a handoff from code (tests, other UIs). First decision wins; a later one
        raises ``AlreadyDecided`` naming who decided first. A question with an
        ``answer_schema`` is answered with ``answer_data`` that fits it."""
        return self.store.decide(
            handoff_id,
            outcome,
            decided_by=by,
            via=via,
            comment=comment,
            answer=answer,
            answer_data=answer_data,
            edited_args=edited_args,
            corrected_draft=corrected_draft,
        )

    def cancel(
        self, handoff_id: str, *, reason: str | None = None, by: str = "agent", resume: bool = True
    ) -> Handoff:
        """Withdraw a pending handoff. Its run is resumed with ``cancelled`` unless
        ``resume=False`` (when the agent cancels from inside the run itself)."""
        return self.store.cancel(handoff_id, cancelled_by=by, reason=reason, resume=resume)

    def claim(self, handoff_id: str, *, by: str, take_over: bool = False) -> Handoff:
        """Take ownership of an escalation; only the claimer may then resolve it."""
        return self.store.claim(handoff_id, claimed_by=by, take_over=take_over)

    def retry_resume(self, handoff_id: str, *, by: str = "api") -> Handoff:
        """Give a resume that failed after all its attempts another round of attempts.

        When its last attempt was lost (fenced out before it reported), the target may have
        run to completion already: a warning says so, as `handoff retry` does, since the
        target is called again (with the same idempotency key)."""
        warning = retry_warning(self.store.get(handoff_id).resume)
        retried = self.store.retry_task(handoff_id, TaskKind.RESUME, requested_by=by)
        if warning:
            logger.warning("retrying the resume of %s: %s", handoff_id, warning)
        return retried


def pending_index(
    keys: KeySpace,
    *,
    channel: str | None = None,
    run_id: str | None = None,
    reviewer: str | None = None,
    request_type: RequestType | str | None = None,
) -> str | None:
    """The key of the pending index for at most one filter (None: every pending handoff);
    ``Handoffs.list_pending`` and ``handoff list`` filter alike. Raises ``ValueError`` for
    two filters at once or an unknown request type."""
    if request_type:
        try:
            request_type = RequestType(request_type)
        except ValueError:
            raise ValueError(
                f"unknown request type {request_type!r}; use one of "
                f"{', '.join(t.value for t in RequestType)}"
            ) from None
    indexes = [
        keys.pending_by_channel(channel) if channel else None,
        keys.pending_by_run(run_id) if run_id else None,
        keys.pending_by_reviewer(reviewer) if reviewer else None,
        keys.pending_by_type(request_type.value) if isinstance(request_type, RequestType) else None,
    ]
    chosen = [index for index in indexes if index]
    if len(chosen) > 1:
        raise ValueError("filter by one of channel, run_id, reviewer, request_type at a time")
    return chosen[0] if chosen else None


def _seconds(value: timedelta | float | None) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        problems.append(f"{_where(error['loc']) or 'request'}: {error['msg']}")
    return "invalid handoff request: " + "; ".join(problems)


def _where(loc: tuple[int | str, ...]) -> str:
    # As the agent wrote it: reviewers[0], payload.action.name.
    where = ""
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else f".{part}" if where else str(part)
    return where
