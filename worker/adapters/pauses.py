"""Pauses: the handoffs that one stop of an agent run created, resumed together, once.

An agent framework stops a run with one or more open requests at a time (LangGraph
interrupts, OpenAI Agents SDK tool approvals, Agent Framework user-input requests). Each
request becomes a handoff; the handoffs of one stop form a *pause*. The run may continue only
when every handoff of its pause is decided, and then exactly once, with all the decisions at
the same time:

- Every decided handoff's resume target runs once (the store and the resume job see to
  that). It checks whether the other members of its pause are still pending and, if none
  is, tries to become the pause's *resumer* (``HSETNX``). The resume of the last decision
  always finds every member decided, so a pause is never left waiting; any other member
  finds the resumer taken and stops. The resumer's own retries (its worker died) find it
  is still the resumer and carry on.
- The claim flags the pause ``started:<resumer>`` when the adapter is about to hand the
  decisions to the framework, and the resumer marks it ``resumed`` after, so a retried
  attempt knows whether the framework may already have received them. (The flag is named
  after the resumer so that a member losing the claim in the same instant flags nothing
  that counts.)

A handoff records itself in its pause when its resume runs, in the same transaction that
reads which other members have recorded themselves. So of two members decided at the same
moment, the second to record sees the first; a member not recorded yet is one whose resume
has not run, which means it is not decided yet. A handoff alone in its pause (the common
case) records itself and claims the pause in one transaction.

The adapters' Redis keys, under the store's namespace (so one Redis Cluster hash tag holds
them with the handoffs):

=====================================  ======  ==========================================
key                                    type    contents
=====================================  ======  ==========================================
``{ns}:pause:<pause_id>``              hash    ``items`` (JSON list of item keys, in
                                               order), ``h:<item>`` (handoff id of each
                                               item), ``resumer``, ``started:<resumer>``,
                                               ``state``, adapter-specific fields
``{ns}:lg:resumed:<thread_key>``       hash    LangGraph interrupt id -> pause that
                                               resumed it
``{ns}:oa:state:<pause_id>``           string  OpenAI Agents SDK ``RunState`` JSON
``{ns}:oa:call:<run_id>:<call_id>``    hash    a tool call's ``edit``, ``answer``,
                                               ``output``
``{ns}:oa:output:<run_id>``            string  a finished run's final output (JSON)
``{ns}:pai:history:<pause_id>``        string  Pydantic AI message history at the stop
                                               (``ModelMessagesTypeAdapter`` JSON); the
                                               stop's calls are the pause's ``calls``
``{ns}:pai:call:<pause_id>:<id>``      string  the recorded result of approved call <id>
``{ns}:pai:output:<run_id>``           string  a finished run's output (JSON)
``{ns}:af:stop:<pause_id>``            string  Agent Framework ``AgentSession`` JSON at
                                               the stop and its ``user_input_requests``
``{ns}:af:call:<run_id>:<call>``       hash    ``output`` of approved call <call> (the
                                               framework's occurrence id)
``{ns}:af:output:<run_id>``            string  a finished agent run's final text (JSON)
``{ns}:afw:output:<run_id>``           string  a finished workflow's outputs (JSON); its
                                               stops' checkpoints are the pauses'
                                               ``checkpoint``
=====================================  ======  ==========================================

What an open pause needs has no TTL; once the pause is resumed, its records are kept for
the store's retention period.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, ClassVar, Self, TypedDict, Unpack

from pydantic import BaseModel, Field
from redis import Redis
from redis.client import Pipeline

from store import slack_ids
from store.decoding import as_text
from store.exceptions import HandoffError, InvalidHandoffRequest
from store.models import ApprovalPayload, Handoff, ProposedAction, Status
from worker.client import Handoffs, RequestOptions
from worker.resume_targets import check_allowed, walk_path

logger = logging.getLogger(__name__)


class InvalidFactory(HandoffError, ValueError):
    """A ``"module:function"`` factory path that cannot be imported or called."""


class PauseState(StrEnum):
    """Where a pause is."""

    OPEN = "open"
    RESUMED = "resumed"
    STALE = "stale"  # the framework no longer waits for these requests: nothing was resumed


@dataclass(frozen=True)
class PauseKeys:
    """Names of the adapters' keys in one namespace (see the module docstring)."""

    prefix: str
    """The store's key prefix, hash tag included, e.g. ``{ho}:``."""

    def pause(self, pause_id: str) -> str:
        """The pause's hash."""
        return f"{self.prefix}pause:{pause_id}"

    def adapter(self, adapter: str, *parts: str) -> str:
        """A key an adapter owns, e.g. ``{ho}:lg:resumed:<thread>``."""
        return ":".join((f"{self.prefix}{adapter}", *parts))


class PauseRef(BaseModel):
    """Which pause a handoff belongs to, and which of its items it answers."""

    pause_id: str
    item: str
    size: int = 0
    """How many items the pause has (0: unknown)."""


class AdapterMetadata(BaseModel):
    """What an adapter keeps in each handoff's ``metadata[METADATA_KEY]`` for the worker
    that resumes it; each adapter subclasses it and names its key."""

    METADATA_KEY: ClassVar[str]

    @classmethod
    def of(cls, handoff: Handoff) -> Self:
        """Read it from a handoff the adapter created."""
        if cls.METADATA_KEY not in handoff.metadata:
            raise ValueError(
                f"handoff {handoff.id} has no {cls.METADATA_KEY!r} metadata: "
                "another adapter (or none) created it"
            )
        return cls.model_validate(handoff.metadata[cls.METADATA_KEY])


class HandoffOptions(TypedDict, total=False):
    """Options every adapter, decorator and question takes, given to each handoff it
    creates (they mean what they mean for ``Handoffs.request_*``)."""

    channel: str | None
    """Slack channel id to post in (``C…``, ``G…``, ``D…``; default: the client's
    ``default_channel``)."""
    reviewers: Sequence[str]
    """Slack user (``U…``, ``W…``) or user-group (``S…``) ids allowed to decide."""
    agent_name: str | None
    """Name of the agent, shown to reviewers."""
    requester: str | None
    """Who or what asked: a Slack user id (mentioned; blocks self-approval when enabled) or
    any name."""
    expires_in: timedelta | float | None
    """Time (or seconds) after which a handoff expires; expiry never approves."""
    context: str | None
    """What the agent is doing, shown above what the adapter says about the request."""


def option_names(options: type) -> list[str]:
    """The keys of an options ``TypedDict``, sorted (for ``reject_unknown_options``)."""
    return sorted(options.__required_keys__ | options.__optional_keys__)  # type: ignore[attr-defined]


class RequestDefaults(BaseModel):
    """Options given to every handoff an adapter creates, kept in the handoff's metadata
    so a worker creates the run's next handoffs the same way."""

    channel: str | None = None
    reviewers: list[str] = Field(default_factory=list)
    agent_name: str | None = None
    requester: str | None = None
    expires_in_seconds: float | None = None
    context: str | None = None

    @classmethod
    def build(cls, **options: Unpack[HandoffOptions]) -> RequestDefaults:
        """Defaults from the keyword arguments the adapters take."""
        reviewers = options.get("reviewers", ())
        if isinstance(reviewers, str):
            raise ValueError(f"reviewers must be a list of Slack ids, e.g. [{reviewers!r}]")
        _check_routing(options.get("channel"), reviewers)
        expires_in = options.get("expires_in")
        seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in
        return cls(
            channel=options.get("channel"),
            reviewers=list(reviewers),
            agent_name=options.get("agent_name"),
            requester=options.get("requester"),
            expires_in_seconds=seconds,
            context=options.get("context"),
        )

    def options(
        self, *, context: str, idempotency_key: str, resume: str, metadata: dict[str, Any]
    ) -> RequestOptions:
        """The ``request_*`` options for one handoff of a pause."""
        options: RequestOptions = {
            "context": self.context + "\n\n" + context if self.context else context,
            "channel": self.channel,
            "reviewers": self.reviewers,
            "resume": resume,
            "idempotency_key": idempotency_key,
            "requester": self.requester,
            "agent_name": self.agent_name,
            "metadata": metadata,
        }
        if self.expires_in_seconds is not None:
            options["expires_in"] = self.expires_in_seconds
        return options


def _check_routing(channel: str | None, reviewers: Sequence[str]) -> None:
    # Refused when the adapter is set up, not at the run's first pause (the request model
    # checks them again there). Defaults read back from a handoff's metadata are not checked.
    if channel and (problem := slack_ids.DESTINATION.refusal(channel)):
        raise InvalidHandoffRequest(f"invalid handoff options: channel: {problem}")
    if problem := slack_ids.REVIEWER.first_refusal(reviewers):
        raise InvalidHandoffRequest(f"invalid handoff options: reviewers: {problem}")


@dataclass(frozen=True)
class ReadyPause:
    """A pause whose handoffs are all decided, held by the handoff that resumes it."""

    pause_id: str
    state: PauseState
    members: dict[str, Handoff]
    """Decided handoffs by item key, in the order the items were opened."""
    fields: dict[str, str]
    """The pause's hash as read after the claim (adapters keep their own fields there)."""
    extra: dict[str, dict[str, str]] = field(default_factory=dict)
    """The hash fields named by ``also_read``, read with the claim."""
    values: dict[str, bytes] = field(default_factory=dict)
    """The string keys named by ``also_get`` that exist, read with the claim."""
    started_before: bool = False
    """An earlier attempt of this resumer flagged the pause started: the framework may
    have received the decisions already."""


class Pauses:
    """The pause records of one namespace.

    Example::

        pauses = Pauses(handoffs)
        pauses.open("lgp_1", ["a/0", "b/0"])  # before creating the handoffs
        # in each handoff's resume target, once it is decided:
        ready = pauses.claim_if_ready(decided_handoff, PauseRef(pause_id="lgp_1", item="a/0"))
    """

    def __init__(self, handoffs: Handoffs) -> None:
        self.handoffs = handoffs
        self.redis: Redis = handoffs.redis
        self.keys = PauseKeys(handoffs.store.keys.prefix)
        self.retention_seconds = int(handoffs.store.config.retention_seconds)

    def open(
        self,
        pause_id: str,
        items: Sequence[str],
        *,
        pipeline: Pipeline | None = None,
        **fields: str,
    ) -> None:
        """Create the pause with its items in order; a second call keeps the first items."""
        key = self.keys.pause(pause_id)
        pipe = pipeline if pipeline is not None else self.redis.pipeline(transaction=True)
        pipe.hsetnx(key, "items", json.dumps(list(items)))
        pipe.hsetnx(key, "state", PauseState.OPEN.value)
        for name, value in fields.items():
            pipe.hsetnx(key, name, value)
        if pipeline is None:
            pipe.execute()

    def fields(self, pause_id: str) -> dict[str, str]:
        """The pause's hash, decoded (empty when there is no such pause)."""
        return _decode(self.redis.hgetall(self.keys.pause(pause_id)))

    def claim_if_ready(
        self,
        handoff: Handoff,
        ref: PauseRef,
        *,
        also_read: Callable[[list[str]], dict[str, list[str]]] | None = None,
        also_get: Callable[[list[str]], list[str]] | None = None,
        starting: Callable[[dict[str, Handoff]], bool] | None = None,
    ) -> ReadyPause | None:
        """The pause, if all its handoffs are decided and ``handoff`` is (now) its resumer;
        otherwise None: a member is still pending, or another member resumes the pause.

        ``also_read``, given the pause's items, names hash fields to read in the same
        transaction as the claim (an adapter's own records, ``{key: [field, ...]}``); the
        values come back in ``ReadyPause.extra`` (absent fields left out). ``also_get``,
        given the items, names string keys to read there too (an adapter's stored stop, its
        recorded results: each read costs a round trip less than after the claim); they
        come back in ``ReadyPause.values`` (absent keys left out). ``starting``,
        given the decided members just before the claim, says whether the adapter will
        hand the decisions to the framework; if so the claim flags the pause started.
        """
        key = self.keys.pause(ref.pause_id)
        if ref.size == 1:
            # Alone in its pause: nothing to wait for, so record and claim at once.
            members = {ref.item: handoff}
            start = starting(members) if starting else False
            fields, extra, values = self._claim(
                key, handoff, [ref.item], also_read, also_get, start=start, record=ref.item
            )
            if "items" not in fields:
                self.redis.delete(key)  # only what the claim above just wrote
                raise self._not_recorded(handoff, ref)
        else:
            # Recording this handoff and reading the others is one transaction: of two
            # members decided at the same moment, the one whose transaction runs second
            # sees both.
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, f"h:{ref.item}", handoff.id)
                pipe.hgetall(key)
                _, raw = pipe.execute()
            fields = _decode(raw)
            if "items" not in fields:
                self.redis.delete(key)  # only what the HSET above just wrote
                raise self._not_recorded(handoff, ref)
            items: list[str] = json.loads(fields["items"])
            ids = {item: fields.get(f"h:{item}") for item in items}
            # This handoff is decided (its resume runs): only the others need reading.
            others = [i for i in ids.values() if i and i != handoff.id]
            found = {h.id: h for h in self.handoffs.store.get_many(others)} if others else {}
            found[handoff.id] = handoff
            decided = {item: found.get(handoff_id or "") for item, handoff_id in ids.items()}
            # A member not recorded yet has not been resumed, so it is still pending (or
            # not even handed off, if its creator died midway).
            if any(member is None or member.is_pending for member in decided.values()):
                logger.info(
                    "pause %s: waiting for other decisions",
                    ref.pause_id,
                    extra={"handoff_id": handoff.id, "run_id": handoff.run_id},
                )
                return None
            members = {item: member for item, member in decided.items() if member is not None}
            start = starting(members) if starting else False
            fields, extra, values = self._claim(
                key, handoff, items, also_read, also_get, start=start
            )
        if fields.get("resumer") != handoff.id:
            logger.info(
                "pause %s is resumed by %s",
                ref.pause_id,
                fields.get("resumer"),
                extra={"handoff_id": handoff.id, "run_id": handoff.run_id},
            )
            return None
        return ReadyPause(
            pause_id=ref.pause_id,
            state=PauseState(fields.get("state", PauseState.OPEN.value)),
            members=members,
            fields=fields,
            extra=extra,
            values=values,
            started_before=fields.get(f"started:{handoff.id}") == "1",
        )

    def _claim(
        self,
        key: str,
        handoff: Handoff,
        items: list[str],
        also_read: Callable[[list[str]], dict[str, list[str]]] | None,
        also_get: Callable[[list[str]], list[str]] | None,
        *,
        start: bool,
        record: str | None = None,
    ) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, bytes]]:
        """One transaction: take the resumer's place if free, read the pause (as it was
        before any started flag of this claim) and the adapter's fields and keys, flag
        started."""
        reads = also_read(items) if also_read else {}
        gets = also_get(items) if also_get else []
        with self.redis.pipeline(transaction=True) as pipe:
            if record is not None:
                pipe.hset(key, f"h:{record}", handoff.id)
            pipe.hsetnx(key, "resumer", handoff.id)
            pipe.hgetall(key)
            for extra_key, extra_fields in reads.items():
                pipe.hmget(extra_key, extra_fields)
            for string_key in gets:
                pipe.get(string_key)
            if start:
                # Named after this handoff: only counts if it is the resumer.
                pipe.hset(key, f"started:{handoff.id}", "1")
            results = pipe.execute()
        offset = 1 if record is not None else 0
        raw = results[offset + 1]
        extra_values = results[offset + 2 : offset + 2 + len(reads)]
        extra = {
            extra_key: {f: as_text(v) for f, v in zip(names, values, strict=True) if v}
            for (extra_key, names), values in zip(reads.items(), extra_values, strict=True)
        }
        got = results[offset + 2 + len(reads) : offset + 2 + len(reads) + len(gets)]
        values = {k: v for k, v in zip(gets, got, strict=True) if v is not None}
        return _decode(raw), extra, values

    @staticmethod
    def _not_recorded(handoff: Handoff, ref: PauseRef) -> LookupError:
        return LookupError(
            f"pause {ref.pause_id} of handoff {handoff.id} is not recorded; it was "
            "created by an adapter with another Redis namespace, or purged"
        )

    def mark(
        self,
        pause_id: str,
        state: PauseState,
        *,
        pipeline: Pipeline | None = None,
        **fields: str,
    ) -> None:
        """Move the pause to ``state``; a resumed or stale pause is kept for the retention
        period only."""
        key = self.keys.pause(pause_id)
        pipe = pipeline if pipeline is not None else self.redis.pipeline(transaction=True)
        pipe.hset(key, "state", state.value)
        for name, value in fields.items():
            pipe.hset(key, name, value)
        if state in (PauseState.RESUMED, PauseState.STALE):
            pipe.expire(key, self.retention_seconds)
        if pipeline is None:
            pipe.execute()


def stable_id(prefix: str, *parts: str) -> str:
    """A short id derived from ``parts``, e.g. ``lgp_3f9a...``: the same parts always give
    the same id, so handing the same stop to people twice creates nothing new. The prefix
    keeps it from ever being 32 hex characters (LangGraph reads those as interrupt ids)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return f"{prefix}_{digest[:24]}"


def proposed_action(handoff: Handoff) -> ProposedAction:
    """The action an approval handoff asked about; raises for other request types."""
    if not isinstance(handoff.payload, ApprovalPayload):
        raise TypeError(f"handoff {handoff.id} is a {handoff.request_type.value}, not an approval")
    return handoff.payload.action


def edited_args(handoff: Handoff) -> dict[str, Any] | None:
    """An approval's arguments as the reviewer edited them (the original ones with the
    edits laid over), or None when the reviewer changed nothing."""
    decision = handoff.resume_data
    if decision is None or decision.edited_args is None:
        return None
    original = proposed_action(handoff).args
    merged = {**original, **decision.edited_args}
    return merged if merged != original else None


def decision_note(handoff: Handoff) -> str | None:
    """Why a request was not approved, in words for the agent: the reviewer's comment, or
    what happened instead of a decision (expiry, cancellation, a request Slack refused to
    deliver). None when approved."""
    decision = handoff.resume_data
    comment = decision.comment if decision else None
    if handoff.status is Status.EXPIRED:
        return "Nobody decided in time; the request expired."
    if handoff.status is Status.CANCELLED:
        return "The request was cancelled" + (f": {comment}" if comment else ".")
    if handoff.status is Status.UNDELIVERABLE:
        # Never reached a person: not a refusal by anyone, and never an approval.
        return "The request could not be delivered to a person, so nobody decided it" + (
            f": {comment}" if comment else "."
        )
    if handoff.status is Status.REJECTED:
        return comment
    return None


def refusal_message(handoff: Handoff, *, question: bool = False) -> str:
    """What the model receives instead of a tool's result when its request was not
    approved (or a question not answered): the reason in words, for the model to adapt."""
    note = decision_note(handoff)
    if question:
        return "The person did not answer" + (f": {note}" if note else ".")
    if handoff.status is Status.REJECTED:
        return "The reviewer rejected this call" + (f": {note}" if note else ".")
    return f"Not run. {note}" if note else "Not run: it was not approved."


def worker_handoffs(namespace: str) -> Handoffs:
    """The ``Handoffs`` client a resume target uses in a worker: configured from the
    environment (REDIS_URL, HANDOFF_*) like the worker itself, on the handoff's namespace."""
    return Handoffs.from_env(namespace=namespace)


_built: dict[str, Any] = {}


def load_object(path: str) -> Any:
    """Import and return the object named by ``"package.module:attribute"``.

    The paths an adapter keeps with its handoffs (a graph or agent factory, an approved
    function, an ``on_finish`` or ``then`` target) are imported by the worker that resumes
    them, so they keep to its ``HANDOFF_RESUME_MODULES`` as resume targets do: one outside
    it raises ``ResumeTargetRefused`` before anything is imported (and the resume fails at
    once). In agent code the setting of the agent's environment applies, when it has one.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidFactory(f"{path!r} must look like 'package.module:function'")
    check_allowed(path, what="adapter path")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # any import-time error makes the factory unusable
        raise InvalidFactory(
            f"cannot import {module_name!r} for {path!r} ({exc}); it must be importable "
            "by the agent and by the worker (check PYTHONPATH)"
        ) from exc
    try:
        return walk_path(target, path, what="adapter path")
    except AttributeError:
        raise InvalidFactory(f"module {module_name!r} has no {attribute!r}") from None


def forget_built() -> None:
    """Drop every object ``build_from_factory`` kept, so the next call builds anew (tests
    that point a factory at another database, code reloads)."""
    _built.clear()


def build_from_factory(path: str) -> Any:
    """Call the zero-argument factory named by ``path`` once per process and return what it
    built (a compiled graph, an agent): workers resume many runs with one object."""
    if path not in _built:
        factory = load_object(path)
        if not callable(factory):
            raise InvalidFactory(f"{path!r} is not callable; name a function that builds it")
        _built[path] = factory()
    return _built[path]


def _decode(raw: Any) -> dict[str, str]:
    return {as_text(k): as_text(v) for k, v in raw.items()}


__all__ = [
    "AdapterMetadata",
    "HandoffOptions",
    "InvalidFactory",
    "PauseKeys",
    "PauseRef",
    "PauseState",
    "Pauses",
    "ReadyPause",
    "RequestDefaults",
    "build_from_factory",
    "decision_note",
    "edited_args",
    "forget_built",
    "load_object",
    "proposed_action",
    "refusal_message",
    "stable_id",
    "worker_handoffs",
]
