"""The handoff repository: every read and atomic transition of handoffs in Redis."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic_core import to_json
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError

from store import answer_schemas, defaults, scripts, slack_ids
from store.canonical import action_digest, stored_digest
from store.decoding import as_text, json_value_problem, well_formed
from store.exceptions import (
    AlreadyDecided,
    AlreadyVoted,
    ArgumentsChanged,
    ClaimedByOther,
    ClaimRequired,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    InvalidHandoffRequest,
    MasterCutOff,
    NotRetryable,
    PayloadTooLarge,
    ReplicasNotConfirmed,
    RequesterMayNotVote,
    TooManyVotes,
)
from store.ids import is_handoff_id, new_handoff_id
from store.keys import KeySpace, body_fields, trail_lines
from store.lua import LuaScript, ReplicaAcks, confirmed_pipeline
from store.metrics import via_class
from store.models import (
    ALLOWED_OUTCOMES,
    ApprovalPayload,
    AuditEvent,
    Handoff,
    HandoffRequest,
    Page,
    PostWindow,
    RequestType,
    ResumeData,
    Status,
    TaskKind,
    TaskState,
    stored_time,
)
from store.policies import Routing, RoutingPolicy
from store.policies.routing import POLICY_ACTOR_PREFIX

logger = logging.getLogger(__name__)

_SYSTEM_ACTOR = "system"
"""Who the store records as deciding what nobody decided (expiry, a failed delivery)."""

READ_BATCH = 100
"""Most handoffs read by one script call: a script holds the server for its whole run
(about 20 µs per handoff), so long lists are read in several calls."""

_LEGACY_IDEM_NOT_AN_ID = re.compile(r"[0-9a-f]{64}")
"""A value at ``KeySpace.idempotency(key)`` that is the HTTP API's body digest of another key
(``bot.api.app._claim_idempotency``), not a handoff id (see ``created_under``)."""

AUDIT_READ_BATCH = 1000
"""Audit stream entries read per round trip (``HandoffStore.audit_pages``)."""


class AuditEntry(NamedTuple):
    """One entry of the namespace's audit stream (``KeySpace.global_audit``).

    ``id`` is the entry's stream id: unique and in arrival order, so a reader remembers how
    far it read with it. ``raw`` is the event as the store's scripts wrote it (JSON bytes;
    empty for an entry without one): a reader that skips most events searches it for a few
    bytes before paying for ``event``, which parses it.
    """

    id: str
    raw: bytes

    @property
    def event(self) -> AuditEvent:
        """The event, parsed."""
        return AuditEvent.from_json(self.raw)


@dataclass(frozen=True)
class TaskPolicy:
    """Attempts, timeouts and backoff given to a handoff's delivery and resume at creation."""

    resume_max_attempts: int = defaults.RESUME_MAX_ATTEMPTS
    resume_timeout_seconds: float = defaults.RESUME_TIMEOUT_SECONDS
    delivery_max_attempts: int = defaults.DELIVERY_MAX_ATTEMPTS
    delivery_timeout_seconds: float = defaults.DELIVERY_TIMEOUT_SECONDS
    backoff_seconds: float = defaults.RETRY_BACKOFF_SECONDS
    backoff_max_seconds: float = defaults.RETRY_BACKOFF_MAX_SECONDS
    lease_grace_seconds: float = defaults.LEASE_GRACE_SECONDS
    remind_after_seconds: float = 0
    """Remind the reviewers after this long, and again each time as long; 0: never."""
    max_reminders: int = defaults.MAX_REMINDERS
    escalate_after_seconds: float = 0
    """Post the handoff to ``escalate_to`` too after this long; 0: never."""
    escalate_to: str | None = None
    """Channel id (a copy is posted there) or user group id (its members may decide)."""

    def for_request(self, request: HandoffRequest) -> TaskPolicy:
        """This policy with the request's own timer settings applied."""
        overrides = {
            name: getattr(request, name)
            for name in (
                "remind_after_seconds",
                "max_reminders",
                "escalate_after_seconds",
                "escalate_to",
            )
            if getattr(request, name) is not None
        }
        return replace(self, **overrides) if overrides else self

    def as_script_arg(self) -> str:
        """The policy as the scripts read it (JSON, times in milliseconds)."""
        return _policy_json(self)

    @classmethod
    def from_script_arg(cls, raw: str) -> TaskPolicy:
        """The policy ``as_script_arg`` gave (as stamped on a handoff at its creation)."""
        stored = json.loads(raw)
        return cls(
            resume_max_attempts=int(stored["resume_max"]),
            resume_timeout_seconds=stored["resume_timeout_ms"] / 1000,
            delivery_max_attempts=int(stored["deliver_max"]),
            delivery_timeout_seconds=stored["deliver_timeout_ms"] / 1000,
            backoff_seconds=stored["backoff_ms"] / 1000,
            backoff_max_seconds=stored["backoff_max_ms"] / 1000,
            lease_grace_seconds=stored["lease_grace_ms"] / 1000,
            remind_after_seconds=stored["remind_after_ms"] / 1000,
            max_reminders=int(stored["max_reminders"]),
            escalate_after_seconds=stored["escalate_after_ms"] / 1000,
            escalate_to=stored["escalate_to"] or None,
        )


REASSIGN_ATTEMPTS = 5
"""Reads of a handoff a reassignment makes when it keeps changing in between (another
reassignment, a delivery step): its index keys are worked out from the handoff as read."""


def _whole_ms(seconds: float) -> int:
    """A delay in whole milliseconds for the scripts, where 0 means none: a positive delay
    under a millisecond is 1 ms, not 0 (an expiry asked for at once would never come)."""
    return max(1, math.ceil(seconds * 1000)) if seconds > 0 else 0


@functools.lru_cache(maxsize=64)
def _policy_json(policy: TaskPolicy) -> str:
    # Most handoffs share a handful of policies: encode each once.
    return json.dumps(
        {
            "remind_after_ms": _whole_ms(policy.remind_after_seconds),
            "max_reminders": policy.max_reminders,
            "escalate_after_ms": _whole_ms(policy.escalate_after_seconds),
            "escalate_to": policy.escalate_to or "",
            "resume_max": policy.resume_max_attempts,
            "resume_timeout_ms": int(policy.resume_timeout_seconds * 1000),
            "deliver_max": policy.delivery_max_attempts,
            "deliver_timeout_ms": int(policy.delivery_timeout_seconds * 1000),
            "backoff_ms": int(policy.backoff_seconds * 1000),
            "backoff_max_ms": int(policy.backoff_max_seconds * 1000),
            "lease_grace_ms": int(policy.lease_grace_seconds * 1000),
        }
    )


@dataclass(frozen=True)
class StoreConfig:
    """Limits and lifetimes the repository enforces."""

    namespace: str = defaults.NAMESPACE
    max_payload_bytes: int = defaults.MAX_PAYLOAD_BYTES
    retention_seconds: float = defaults.RETENTION_SECONDS
    tasks: TaskPolicy = field(default_factory=TaskPolicy)
    resume_modules: tuple[str, ...] = ()
    """The modules whose functions may be resume targets (``HANDOFF_RESUME_MODULES``);
    empty: any module. Not the store's to enforce (it never imports a target): the worker
    checks each target it resumes against its own (``worker.resume_targets``), and the
    agent's client each one it creates a handoff with."""
    policy: RoutingPolicy | None = None
    """The routing policy applied to every new handoff (``HANDOFF_POLICY_FILE``); None:
    requests are stored as the agent sent them."""
    replica_acks: ReplicaAcks = field(default_factory=ReplicaAcks)
    """``HANDOFF_MIN_REPLICA_ACKS``: replicas that must have each write in ``_CONFIRMED``
    before its caller is told of it (``store.lua.ReplicaAcks``)."""


@dataclass(frozen=True)
class TaskStart:
    """What ``begin_task`` decided: ``run`` (with the attempt and handoff) or why not.

    ``started_at`` is when the attempt began, in epoch seconds by Redis's clock;
    ``unanswered`` is when an earlier attempt's post may have landed unanswered (None: no
    post of the task is unaccounted for, so there is nothing to look for).
    """

    action: str
    attempt: int = 0
    handoff: Handoff | None = None
    started_at: float = 0.0
    unanswered: PostWindow | None = None


UNCHANGED: Literal["unchanged"] = "unchanged"
"""``finish_task(unanswered=UNCHANGED)``: the attempt says nothing of what it posted."""


@dataclass(frozen=True)
class DueTask:
    """A delivery or resume the dispatcher must hand to RQ."""

    kind: TaskKind
    handoff_id: str
    timeout_seconds: float


@dataclass(frozen=True)
class Created:
    """Result of ``create``: the handoff and whether this call created it."""

    handoff: Handoff
    created: bool


class HandoffStore:
    """Reads and atomically changes handoffs in one Redis namespace.

    Example::

        store = HandoffStore(Redis.from_url("redis://localhost:6379"))
        handoff = store.create(request).handoff
        store.decide(handoff.id, Status.APPROVED, decided_by="U123")
    """

    def __init__(self, redis: Redis, config: StoreConfig | None = None) -> None:
        self.redis = redis
        self.config = config or StoreConfig()
        self.keys = KeySpace(self.config.namespace)
        acks = self.config.replica_acks
        self._scripts: dict[str, LuaScript] = {
            name: LuaScript(
                redis, getattr(scripts, name), acks=acks if name in _CONFIRMED else None
            )
            for name in (
                "CREATE",
                "DECIDE",
                "CLAIM",
                "BEGIN_TASK",
                "FINISH_TASK",
                "RETRY_TASK",
                "CLAIM_DUE",
                "EXPIRE_DUE",
                "PURGE_DECIDED",
                "RECORD_AUDIT",
                "REASSIGN",
                "LINK_REDELIVERY",
                "LINK_MESSAGE",
                "LOOK_UP",
                "INDEX_RANGE",
                "INDEX_COUNTS",
                "TAKE_BUDGET",
                "READ",
                "READ_MANY",
                "TRAIL_EVENTS",
            )
        }

    # -- creation -----------------------------------------------------------------------

    def create(
        self,
        request: HandoffRequest,
        *,
        handoff_id: str,
        actor: str = "agent",
        tasks: TaskPolicy | None = None,
        routed: bool = True,
    ) -> Created:
        """Store a new pending handoff and queue its delivery, in one atomic step.

        With an ``idempotency_key`` already used, returns the handoff created the first time
        (``created=False``) and writes nothing. The configured routing policy
        (``store.policies``) is applied first; a rule that decides (``auto``) decides the
        handoff in the same atomic step, as ``policy:<rule name>``; ``routed=False`` skips it
        (a redelivery's request was routed when it was first created).
        """
        if not is_handoff_id(handoff_id):
            # Ids are the store's (``new_handoff_id``): the indexes take them as such (a
            # run's lookup field reads '*' as "see the run's set", so a handoff '*' would vanish).
            raise ValueError(f"not a handoff id: {handoff_id!r} (use store.ids.new_handoff_id)")
        # Unset fields are left out (about 160 bytes of every stored handoff); reading the
        # request back gives them their defaults, None. Values inside the agent's own
        # dicts (args, metadata) are kept as they are, null or not.
        full_json = request.model_dump_json(exclude_none=True)
        # The whole request holds what the limit counts (its context and payload, and more
        # than the few bytes of nulls the exact count adds), so the exact count is needed
        # only for a request over the limit. Checked before routing: the policy's conditions
        # are never run on a request that is refused anyway (a rule changes neither).
        if len(full_json.encode()) > self.config.max_payload_bytes:
            size = _agent_content_bytes(request)
            if size > self.config.max_payload_bytes:
                raise PayloadTooLarge(size, self.config.max_payload_bytes)
        policy_file = self.config.policy if routed else None
        # ConditionTooCostly (a rule's condition out of budget) refuses it: nothing written.
        routing = policy_file.route(request) if policy_file is not None else None
        if routing is not None:
            request = routing.request
        request_json = _stored_request_json(request)
        policy = (tasks or self.config.tasks).for_request(request)
        expires_ms = _whole_ms(request.expires_in_seconds or 0)
        policy_json = policy.as_script_arg()
        create_args = [
            self.keys.prefix,
            handoff_id,
            request_json,
            request.idempotency_key or "",
            expires_ms,
            to_json(self._pending_indexes(request)),
            request.request_type.value,
            policy_json,
            actor,
            # A rule's decision is the only one: nobody votes on it.
            "" if routing is not None and routing.auto else _quorum_of(request),
            stored_digest(digest) if (digest := _digest_of(request)) else "",
        ]
        if routing is None:
            result = self._scripts["CREATE"](keys=[self.keys.handoff(handoff_id)], args=create_args)
        else:
            result = self._create_routed(handoff_id, create_args, routing)
        created, stored_id = bool(int(result[0])), as_text(result[1])
        if created and routing is not None and routing.auto is not None:
            handoff = self.get(stored_id)
        elif created:
            # The script returns only what the server decided (times); the rest is ours.
            handoff = Handoff.from_request(
                stored_id,
                request,
                created_at=as_text(result[2]),
                expires_at=stored_time(as_text(result[3])),
                delivery={"state": TaskState.QUEUED, "max_attempts": policy.delivery_max_attempts},
                escalate_to=policy.escalate_to,
            )
        else:
            handoff = self.get(stored_id)
        if created:
            logger.info(
                "handoff created",
                extra={"handoff_id": stored_id, "run_id": request.run_id, "event": "created"},
            )
        elif stored_id != handoff_id and (
            handoff.run_id != request.run_id or handoff.request_type != request.request_type
        ):
            raise IdempotencyConflict(
                f"idempotency key {request.idempotency_key!r} was used for handoff "
                f"{stored_id} ({handoff.request_type.value} in run {handoff.run_id}); "
                "use a new key for a different request"
            )
        return Created(handoff=handoff, created=created)

    def _create_routed(self, handoff_id: str, create_args: list[Any], routing: Routing) -> Any:
        """CREATE, the ``routed`` audit event naming the rule, and for a rule that decides,
        DECIDE, in one MULTI/EXEC, so nobody can see or decide the handoff before the rule
        did. The scripts go by their text (EVAL): a server that lost them fails no part of
        the transaction. Returns CREATE's reply."""
        keys = [self.keys.handoff(handoff_id)]
        acks = self.config.replica_acks
        if acks.replicas:
            # MULTI and EXEC by hand, so that WAIT follows EXEC on the same connection.
            def queue(pipe: Pipeline) -> None:
                pipe.execute_command("MULTI")
                self._queue_routed(pipe, handoff_id, keys, create_args, routing)
                pipe.execute_command("EXEC")

            replies = confirmed_pipeline(self.redis, keys[0], acks, queue)
            failed = next((r for r in replies if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            results = replies[-1]
            failed = next((r for r in results if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            return results[0]
        pipe = self.redis.pipeline(transaction=True)
        self._queue_routed(pipe, handoff_id, keys, create_args, routing)
        return pipe.execute()[0]

    def _queue_routed(
        self,
        pipe: Pipeline,
        handoff_id: str,
        keys: list[str],
        create_args: list[Any],
        routing: Routing,
    ) -> None:
        self._scripts["CREATE"].queue_text(pipe, keys=keys, args=create_args)
        detail = {"rule": routing.rule, "set": routing.changes}
        if routing.auto is not None:
            detail["auto"] = routing.auto.value
        self._scripts["RECORD_AUDIT"].queue_text(
            pipe,
            keys=keys,
            args=[
                self.keys.prefix,
                handoff_id,
                "routed",
                routing.decided_by,
                to_json(detail).decode(),
                _new_operation_id(),
            ],
        )
        if routing.auto is not None:
            decision = ResumeData(
                decision_id=_new_decision_id(),
                outcome=routing.auto,
                decided_by=routing.decided_by,
                via="policy",
                comment=f"decided by the routing policy's rule {routing.rule!r}",
                action_digest=(
                    _digest_of(routing.request) or None if routing.auto is Status.APPROVED else None
                ),
            )
            args = self._decide_args(
                handoff_id, decision, event="decided", resume=True, fitting_types=_ALL_TYPES
            )
            self._scripts["DECIDE"].queue_text(pipe, keys=keys, args=args)

    def _pending_indexes(self, request: HandoffRequest | Handoff) -> list[str]:
        # No index of all pending handoffs: each is in its type's, and the four together are
        # all of them (``pending_ids``), which saves about 130 bytes per waiting handoff.
        keys = [
            self.keys.pending_by_run(request.run_id),
            self.keys.pending_by_type(request.request_type.value),
        ]
        if request.channel:
            keys.append(self.keys.pending_by_channel(request.channel))
        keys.extend(self.keys.pending_by_reviewer(r) for r in dict.fromkeys(request.reviewers))
        if request.api_key:
            keys.append(self.keys.pending_by_key(request.api_key))
        return keys

    # -- reads --------------------------------------------------------------------------

    def get(self, handoff_id: str) -> Handoff:
        """The handoff with this id; raises ``HandoffNotFound``."""
        document = self._scripts["READ"](
            keys=[self.keys.handoff(handoff_id)], args=[self.keys.prefix, handoff_id]
        )
        return self.from_document(handoff_id, document)

    def queue_read(self, pipe: Pipeline, handoff_id: str) -> None:
        """Add the read of a handoff's document to ``pipe``, for ``from_document``.

        The pipeline's reply is a ``NoScriptError`` when the server has not loaded the
        store's scripts yet (after a restart): read with ``get`` then.
        """
        self._scripts["READ"].queue(
            pipe, keys=[self.keys.handoff(handoff_id)], args=[self.keys.prefix, handoff_id]
        )

    def from_document(self, handoff_id: str, document: bytes | str | None) -> Handoff:
        """The handoff from its document as the store's scripts return it (read in a
        pipeline, say, with ``queue_read``); raises ``HandoffNotFound`` for none."""
        if not document:
            raise HandoffNotFound(handoff_id)
        return Handoff.model_validate_json(document)

    def stored_fields(self, handoff_id: str, *names: str) -> list[bytes | None]:
        """Raw stored fields of a handoff, in either storage shape (``store.keys``): a
        field of the hash, else of the body; ``policy`` as its JSON (the hash names it)."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self.keys.handoff(handoff_id), *names)
            pipe.get(self.keys.handoff_body(handoff_id))
            in_hash, body = pipe.execute()
        in_body = body_fields(body)
        values: list[bytes | None] = [
            here if here is not None else in_body.get(name)
            for here, name in zip(in_hash, names, strict=True)
        ]
        for i, name in enumerate(names):
            value = values[i]
            if name == "policy" and value is not None and value.startswith(b"@"):
                values[i] = self.redis.hget(self.keys.policies, value[1:].decode())
        return values

    def confirm_replicated(self, handoff_id: str) -> None:
        """Return once ``HANDOFF_MIN_REPLICA_ACKS`` replicas have every write the master had
        (the handoff's decision, as just read, among them): what an agent is given must
        survive a failover as what a reviewer is told does. Raises ``ReplicasNotConfirmed``
        when they do not confirm in time. Without replica acks, returns at once."""
        acks = self.config.replica_acks
        if not acks.replicas:
            return
        key = self.keys.handoff(handoff_id)
        # WAIT after a command on the same connection, on the server holding the handoff.
        confirmed_pipeline(self.redis, key, acks, lambda pipe: pipe.exists(key))

    def get_many(self, handoff_ids: Iterable[str]) -> list[Handoff]:
        """The handoffs that still exist among ``handoff_ids``, in the same order."""
        ids = list(handoff_ids)
        found: list[Handoff] = []
        for start in range(0, len(ids), READ_BATCH):
            batch = ids[start : start + READ_BATCH]
            documents = self._scripts["READ_MANY"](
                keys=[self.keys.handoff(handoff_id) for handoff_id in batch],
                args=[self.keys.prefix, *batch],
            )
            found.extend(Handoff.model_validate_json(doc) for doc in documents if doc)
        return found

    @functools.cached_property
    def type_indexes(self) -> list[str]:
        """The pending index of each request type: together, every pending handoff, each in
        one of them (handoffs written before 0.2 are in ``KeySpace.pending`` too)."""
        return [self.keys.pending_by_type(t.value) for t in RequestType]

    def pending_ids(self, after: str | None = None, *, limit: int = 20) -> list[str]:
        """Up to ``limit`` ids of pending handoffs, oldest first, after the id ``after``: the
        type indexes merged, one round trip."""
        return self._index_range(self.type_indexes, f"({after}" if after else "-", "+", limit)

    def list_pending(
        self, index_key: str | None = None, *, cursor: str | None = None, limit: int = 20
    ) -> Page:
        """One page of pending handoffs, oldest first, from an index (default: all pending).

        ``cursor`` is the ``next_cursor`` of the previous page.
        """
        if index_key is None:
            ids = self.pending_ids(cursor, limit=limit + 1)
        else:
            ids = self.index_range(index_key, f"({cursor}" if cursor else "-", "+", limit + 1)
        more = len(ids) > limit
        ids = ids[:limit]
        items = self.get_many(ids)
        return Page(items=items, next_cursor=ids[-1] if more and ids else None)

    def index_range(
        self, key: str, low: str, high: str, num: int, *, desc: bool = False
    ) -> list[str]:
        """Up to ``num`` ids of the pending index ``key`` between the lexical bounds ``low``
        and ``high`` (as ``ZRANGE ... BYLEX`` takes them: ``-``, ``+``, ``(id``, ``[id``;
        with ``desc``, from ``low`` down to ``high``). A run's index is a ``runs`` lookup field
        while the run has one pending handoff (``store.keys``)."""
        return self._index_range([key], low, high, num, desc=desc)

    def _index_range(
        self, keys: list[str], low: str, high: str, num: int, *, desc: bool = False
    ) -> list[str]:
        """``index_range`` over the sets of ``keys`` merged (an index past
        ``defaults.LOOKUP_GROW_AT`` entries is several sets: ``store.scripts``)."""
        most = min(num, _MOST_IDS)  # what ZRANGE's LIMIT takes (a 64-bit integer)
        found = self._scripts["INDEX_RANGE"](
            keys=keys, args=[self.keys.prefix, low, high, most, "1" if desc else "0"]
        )
        return [as_text(i) for i in found]

    def index_size(self, key: str) -> int:
        """How many handoffs the pending index ``key`` holds (see ``index_range``)."""
        return self.index_sizes([key])[0]

    def index_sizes(self, keys: list[str]) -> list[int]:
        """How many handoffs each of the pending indexes ``keys`` holds, in one round trip."""
        return [size for size, _ in self._index_counts(keys, None)]

    def _index_counts(self, keys: list[str], first: str | None) -> list[tuple[int, int]]:
        """For each index of ``keys``: how many handoffs it holds, and how many of them sort
        before the id ``first`` (0 without it), in one script call (``INDEX_COUNTS``: the
        sets of an index that grew, the lookup field of a run with one)."""
        if not keys:
            return []
        flat = self._scripts["INDEX_COUNTS"](keys=keys, args=[self.keys.prefix, first or ""])
        return [(int(flat[2 * at]), int(flat[2 * at + 1])) for at in range(len(keys))]

    def index_positions(self, keys: list[str], first: str | None) -> tuple[int, int]:
        """How many handoffs the pending indexes ``keys`` hold between them, and how many of
        those sort before the id ``first`` (0 without it), in one round trip (see
        ``_index_counts``)."""
        counts = self._index_counts(keys, first)
        total = sum(size for size, _ in counts)
        before = sum(earlier for _, earlier in counts)
        return total, before

    def count_pending(self, index_key: str | None = None) -> int:
        """How many handoffs an index holds (default: all pending)."""
        if index_key is not None:
            return self.index_size(index_key)
        return sum(self.index_sizes(self.type_indexes))

    def audit_trail(self, handoff_id: str) -> list[AuditEvent]:
        """The handoff's audit events, oldest first: its body's trail, or the list of a
        handoff written before (``store.keys``)."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(self.keys.audit(handoff_id), 0, -1)
            pipe.get(self.keys.handoff_body(handoff_id))
            listed, body = pipe.execute()
        return [AuditEvent.from_json(raw, handoff_id) for raw in listed or trail_lines(body)]

    def global_audit(
        self, *, since: datetime | None = None, count: int | None = None
    ) -> list[AuditEvent]:
        """Audit events of every handoff in the namespace, oldest first (at most ``count``)."""
        return [entry.event for entry in self.audit_entries(since=since, limit=count) if entry.raw]

    def audit_entries(
        self,
        *,
        after: str | None = None,
        since: datetime | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        batch: int = AUDIT_READ_BATCH,
    ) -> Iterator[AuditEntry]:
        """The entries of the namespace's audit stream, one by one; see ``audit_pages``."""
        for page in self.audit_pages(
            after=after, since=since, newest_first=newest_first, limit=limit, batch=batch
        ):
            yield from page

    def audit_pages(
        self,
        *,
        after: str | None = None,
        since: datetime | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        batch: int = AUDIT_READ_BATCH,
    ) -> Iterator[list[AuditEntry]]:
        """The namespace's audit stream (every handoff's events), oldest first, in pages of
        up to ``batch`` entries: one XRANGE per page (XREVRANGE with ``newest_first``), so a
        long stream is never held in memory at once.

        ``after`` (a stream id) keeps only the entries added after it, ``since`` (a time)
        those from then on; ``limit`` caps the entries read in all, so
        ``newest_first=True, limit=n`` is the newest ``n``. Reading stops at the first page
        that comes back short, without another round trip.
        """
        if after is not None and since is not None:
            raise ValueError("give after or since, not both")
        if after is not None:
            low = f"({after}"
        elif since is not None:
            # A time before 1970 is no stream id; the stream starts after it anyway.
            low = f"{max(0, int(since.timestamp() * 1000))}-0"
        else:
            low = "-"
        high = "+"
        left = limit
        while left is None or left > 0:
            want = batch if left is None else min(batch, left)
            if newest_first:
                found = self.redis.xrevrange(self.keys.global_audit, max=high, min=low, count=want)
            else:
                found = self.redis.xrange(self.keys.global_audit, min=low, max=high, count=want)
            page = _audit_page(found, self._trail_events)
            if page:
                yield page
            if len(page) < want:
                return
            if newest_first:
                high = f"({page[-1].id}"
            else:
                low = f"({page[-1].id}"
            if left is not None:
                left -= len(page)

    def audit_position(self) -> str:
        """A stream id that every audit entry added from now on sorts after: the newest
        entry's, or, with none yet, one just before the server's time now (a new entry's id
        is at least that). Read with ``audit_entries(after=...)`` to miss nothing."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.time()
        pipe.xrevrange(self.keys.global_audit, count=1)
        (seconds, micros), latest = pipe.execute()
        if latest:
            return as_text(latest[0][0])
        return f"{seconds * 1000 + micros // 1000 - 1}-0"

    def _trail_events(self, places: list[tuple[str, int]]) -> list[Any]:
        """The trail events at ``places`` (handoff id, place in its trail), in one round
        trip: what the stream's pointer entries name (see ``audit`` in ``store.scripts``).
        A trail is its handoff's body's, or a list written before; the server picks the
        events out (``TRAIL_EVENTS``), so that the bodies, requests and all, stay there."""
        owners: dict[str, int] = {}
        args: list[Any] = [self.keys.prefix]
        for handoff_id, index in places:
            args += [owners.setdefault(handoff_id, len(owners) + 1), index]
        keys = [
            key
            for handoff_id in owners
            for key in (self.keys.audit(handoff_id), self.keys.handoff_body(handoff_id))
        ]
        return list(self._scripts["TRAIL_EVENTS"](keys=keys, args=args))

    def failed_tasks(self) -> list[tuple[TaskKind, str]]:
        """Deliveries and resumes that gave up, oldest first."""
        members = [as_text(m) for m in self.redis.zrange(self.keys.failed, 0, -1)]
        return [(TaskKind(m.split(":", 1)[0]), m.split(":", 1)[1]) for m in members]

    def failed_handoff_ids(self) -> list[str]:
        """Ids of the handoffs whose delivery, resume or message update gave up (an
        undeliverable handoff's delivery among them), oldest first by id: the tasks
        ``retry_failed`` retries. (A reminder or an escalation post that gave up is in the
        handoff's audit trail; it is not retried, and the handoff itself is still shown.)

        Read whole: failed tasks are few (each one is an incident an admin clears with
        ``retry``, and the retention purge takes them with their handoff), and ordering by
        id needs them all, since the set is scored by when each task gave up."""
        members = (as_text(m).split(":", 1) for m in self.redis.zrange(self.keys.failed, 0, -1))
        return sorted({handoff_id for kind, handoff_id in members if kind in _RETRYABLE_KINDS})

    # -- decisions ----------------------------------------------------------------------

    def _storable(self, name: str, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """``value`` (edited arguments, a typed answer: JSON someone sent) as it can be stored,
        or ``InvalidDecision`` saying why not: NaN and infinities (stored, they would be null,
        and an approval would run with what nobody approved), nesting past what a request may
        hold, more than a request's payload; half an emoji becomes U+FFFD, as in requests."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidDecision(f"{name} must be a JSON object")
        if problem := json_value_problem(value, depth=1, where=name):
            raise InvalidDecision(problem)
        value = well_formed(value)
        size = len(to_json(value))
        if size > self.config.max_payload_bytes:
            raise InvalidDecision(
                f"{name} is {size} bytes of JSON, over the {self.config.max_payload_bytes}-byte "
                "limit of a request"
            )
        return value

    def decide(
        self,
        handoff_id: str,
        outcome: Status | str,
        *,
        decided_by: str,
        via: str = "api",
        comment: str | None = None,
        answer: str | None = None,
        answer_data: dict[str, Any] | None = None,
        edited_args: dict[str, Any] | None = None,
        corrected_draft: str | None = None,
        current: Handoff | None = None,
        respect_claim: bool = True,
        seen_digest: str | None = None,
    ) -> Handoff:
        """Decide a pending handoff, exactly once, in one round trip.

        The status change, the audit event and the queued resume commit together. If the
        handoff is no longer pending, raises ``AlreadyDecided`` (naming who decided first)
        and changes nothing. An escalation is resolved (``answered``) only by the person
        who claimed it, and once claimed only they decide it either way (``ClaimedByOther``),
        unless ``respect_claim`` is False (an admin's decision). Pass ``current`` (the
        handoff as just read) to skip reading the decided record back: the result is then
        ``current`` with the decision applied (its delivery/resume progress as it was read).
        ``seen_digest`` is the digest of the arguments the person was shown
        (``Handoff.current_digest`` of the view they decided from): an approval of other
        arguments than those up for approval now is refused (``ArgumentsChanged``); without
        it, the arguments as read here are the ones approved.
        A question with an ``answer_schema`` is answered with ``answer_data`` that fits it
        (``answer`` then defaults to it as text), or, when the schema is one string field,
        with ``answer`` alone; anything else is ``InvalidDecision``.
        """
        decided_by = slack_ids.plain_person(decided_by)  # <@U123|ann>, as a person: U123
        edited_args = self._storable("edited_args", edited_args)
        answer_data = self._storable("answer_data", answer_data)
        if _parse_outcome(outcome) is Status.ANSWERED:
            answer, answer_data = _typed_answer(
                current or self.get(handoff_id), answer, answer_data
            )
        decision = ResumeData(
            decision_id=_new_decision_id(),
            outcome=_parse_outcome(outcome),
            decided_by=decided_by,
            via=via,
            comment=comment,
            answer=answer,
            answer_data=answer_data,
            edited_args=edited_args,
            corrected_draft=corrected_draft,
        )
        if not decided_by:
            raise InvalidDecision("decided_by is required: say who made the decision")
        if decided_by.lower() == _SYSTEM_ACTOR or decided_by.lower().startswith(
            POLICY_ACTOR_PREFIX
        ):
            raise InvalidDecision(
                f"decided_by {decided_by!r} is kept for what the store decides itself (expiry, "
                "a failed delivery, a routing policy): name the person who decided"
            )
        shown_digest, seen_digest = seen_digest, ""
        if decision.outcome is Status.APPROVED:
            # Bound to the action: the decision records the digest of what is approved, and
            # the script refuses it if the arguments were edited since they were read.
            read = current or self.get(handoff_id)
            action = getattr(read.payload, "action", None)
            if action is not None:
                seen = read.current_args
                approved = {**seen, **edited_args} if edited_args is not None else seen
                read_digest = action_digest(action.name, seen)
                approved_digest = action_digest(action.name, approved)
                if approved_digest == read_digest:
                    # An edit that changes nothing (as JSON: 1 and true differ, 1 and 1.0 do
                    # not) is a plain approval: it clears nobody's vote, and the decision
                    # says the arguments were not changed.
                    edited_args = None
                if shown_digest is not None and shown_digest != read_digest:
                    raise ArgumentsChanged(handoff_id)
                seen_digest = read_digest
                decision = decision.model_copy(
                    update={
                        "action_digest": approved_digest,
                        "edited_args": approved if edited_args is not None else None,
                    }
                )
        # The script checks the handoff's type against these, so a misfit costs no extra read.
        fitting = _fitting_types(
            decision.outcome,
            answered=bool(answer and answer.strip()),
            has_answer=answer is not None,
            has_answer_data=answer_data is not None,
            has_edited_args=edited_args is not None,
            has_corrected_draft=corrected_draft is not None,
        )
        claimer = decided_by if decision.outcome is Status.ANSWERED else ""
        return self._close(
            handoff_id,
            decision,
            event="decided",
            resume=True,
            required_claimer=claimer,
            claim_holder=decided_by if respect_claim else "",
            fitting_types=fitting,
            current=current,
            seen_digest=seen_digest,
        )

    def cancel(
        self,
        handoff_id: str,
        *,
        cancelled_by: str,
        reason: str | None = None,
        resume: bool = True,
        via: str = "api",
    ) -> Handoff:
        """Cancel a pending handoff; by default its run is resumed with status ``cancelled``."""
        return self._close_by_operator(
            handoff_id, Status.CANCELLED, by=cancelled_by, via=via, resume=resume, comment=reason
        )

    def _close_by_operator(
        self,
        handoff_id: str,
        outcome: Status,
        *,
        by: str,
        via: str,
        resume: bool,
        comment: str | None = None,
    ) -> Handoff:
        """Cancel or expire: a final status any request type can take, set by the agent or
        an admin rather than decided by a reviewer."""
        decision = ResumeData(
            decision_id=_new_decision_id(), outcome=outcome, decided_by=by, via=via, comment=comment
        )
        return self._close(
            handoff_id,
            decision,
            event=outcome.value,
            resume=resume,
            fitting_types=_ALL_TYPES,
        )

    def _decide_args(
        self,
        handoff_id: str,
        decision: ResumeData,
        *,
        event: str,
        resume: bool,
        fitting_types: str,
        required_claimer: str = "",
        claim_holder: str = "",
        reply_document: bool = True,
        seen_digest: str = "",
    ) -> list[Any]:
        """The DECIDE script's arguments (see ``store.scripts.DECIDE``); ``seen_digest``:
        the digest of the arguments an approval was read with ('' for no check)."""
        return [
            self.keys.prefix,
            handoff_id,
            decision.outcome.value,
            # Unset fields (decided_at among them: the script records the time) are
            # left out; reading the decision back gives them their defaults.
            decision.model_dump_json(exclude_none=True),
            decision.decided_by,
            int(self.config.retention_seconds * 1000),
            required_claimer,
            event,
            "1" if resume else "0",
            fitting_types,
            "1" if reply_document else "0",
            claim_holder,
            # A quorum's vote keeps the edited arguments exactly as sent (see the script).
            "" if decision.edited_args is None else to_json(decision.edited_args),
            seen_digest,
            via_class(decision.via),
        ]

    def _close(
        self,
        handoff_id: str,
        decision: ResumeData,
        *,
        event: str,
        resume: bool,
        fitting_types: str,
        required_claimer: str = "",
        claim_holder: str = "",
        current: Handoff | None = None,
        seen_digest: str = "",
    ) -> Handoff:
        result = self._scripts["DECIDE"](
            keys=[self.keys.handoff(handoff_id)],
            args=self._decide_args(
                handoff_id,
                decision,
                event=event,
                resume=resume,
                fitting_types=fitting_types,
                required_claimer=required_claimer,
                claim_holder=claim_holder,
                reply_document=current is None,
                seen_digest=seen_digest,
            ),
        )
        verdict = as_text(result[0])
        if verdict in ("decided", "vote"):
            # A vote on a quorum: the handoff as it stands now (pending, for a vote that did
            # not reach it).
            if verdict == "decided":
                logger.info(
                    "handoff %s",
                    decision.outcome.value,
                    extra={"handoff_id": handoff_id, "actor": decision.decided_by, "event": event},
                )
            return self.from_document(handoff_id, result[1])
        if verdict == "requester":
            raise RequesterMayNotVote(handoff_id, decision.decided_by)
        if verdict == "full":
            raise TooManyVotes(handoff_id, int(as_text(result[1])))
        if verdict == "voted":
            raise AlreadyVoted(handoff_id, decision.decided_by, as_text(result[1]))
        if verdict == "changed":
            raise ArgumentsChanged(handoff_id)
        if verdict == "ok":
            logger.info(
                "handoff %s",
                decision.outcome.value,
                extra={
                    "handoff_id": handoff_id,
                    "actor": decision.decided_by,
                    "via": decision.via,
                    "event": event,
                },
            )
            if current is None:
                return self.from_document(handoff_id, result[1])
            decided_at = _ms_to_datetime(as_text(result[1]))
            return current.model_copy(
                update={
                    "status": decision.outcome,
                    "resume_data": decision.model_copy(update={"decided_at": decided_at}),
                    "decided_at": decided_at,
                    "version": int(result[2]),
                }
            )
        if verdict == "missing":
            raise HandoffNotFound(handoff_id)
        if verdict == "invalid":
            raise InvalidDecision(
                decision_problem(RequestType(as_text(result[1])), decision) or "invalid decision"
            )
        if verdict == "claim":
            claimer = as_text(result[1])
            if claimer:
                raise ClaimedByOther(handoff_id, claimer)
            raise ClaimRequired(
                f"escalation {handoff_id} must be claimed by {decision.decided_by} "
                "before they resolve it; call claim() first"
            )
        earlier = json.loads(as_text(result[2])) if result[2] else {}
        if earlier.get("decision_id") == decision.decision_id:
            # redis-py resent our own script after a lost reply: this call did decide.
            return self.get(handoff_id)
        raise _already_decided(handoff_id, result)

    def expire_now(self, handoff_id: str, *, expired_by: str, via: str = "admin") -> Handoff:
        """Expire a pending handoff at once (an admin's call); its run resumes with
        ``expired``, exactly as when its deadline passes."""
        return self._close_by_operator(
            handoff_id, Status.EXPIRED, by=expired_by, via=via, resume=True
        )

    def reassign(
        self,
        handoff_id: str,
        *,
        by: str,
        channel: str | None = None,
        reviewers: list[str] | None = None,
    ) -> Handoff:
        """Route a pending handoff elsewhere: a new channel and/or new reviewers.

        A worker re-posts it to the new place and points the old message there; the
        decision still happens at most once, whichever message is used.
        """
        if channel is None and reviewers is None:
            raise InvalidDecision("reassign needs a channel or reviewers")
        operation = _new_operation_id()
        for _ in range(REASSIGN_ATTEMPTS):
            current = self.get(handoff_id)
            moved = current.model_copy(
                update={
                    "channel": channel or current.channel,
                    "reviewers": reviewers if reviewers is not None else current.reviewers,
                }
            )
            result = self._scripts["REASSIGN"](
                keys=[self.keys.handoff(handoff_id)],
                args=[
                    self.keys.prefix,
                    handoff_id,
                    by,
                    channel or "",
                    json.dumps(reviewers) if reviewers is not None else "",
                    json.dumps(self._pending_indexes(moved)),
                    operation,
                    current.version,
                ],
            )
            verdict = as_text(result[0])
            if verdict != "changed":
                break
        else:
            raise InvalidDecision(
                f"handoff {handoff_id} kept changing while it was reassigned; try again"
            )
        if verdict == "missing":
            raise HandoffNotFound(handoff_id)
        if verdict == "already":
            raise _already_decided(handoff_id, result)
        logger.info("handoff reassigned", extra={"handoff_id": handoff_id, "actor": by})
        return self.from_document(handoff_id, result[1])

    def redeliver(self, handoff_id: str, *, by: str, channel: str | None = None) -> Created:
        """Ask again, as a new pending handoff, what an ``undeliverable`` handoff asked:
        the same request (run, thread, type, payload, context, reviewers, resume target,
        settings), posted in ``channel`` when given (a conversation id or a person's
        ``U…`` id), else where the old one was routed.

        The old handoff stays closed (its run was resumed with ``undeliverable``); the new
        one is delivered, decided and resumes the run once more, as any handoff. They are
        linked: the new one's ``redelivered_from`` names the old one, whose audit trail gets
        ``redelivered`` naming the new one and ``by``. Redelivering a handoff again returns
        the handoff its first redelivery created (``created=False``; ``channel`` is then
        ignored), which is also how a call cut off midway is finished. Raises
        ``HandoffNotFound``, and ``NotRetryable`` for a handoff that is not undeliverable
        (nothing is changed then).
        """
        old = self.get(handoff_id)
        if old.status is not Status.UNDELIVERABLE:
            raise NotRetryable(
                f"handoff {handoff_id} is {old.status.value}, not undeliverable; only an "
                "undeliverable handoff is redelivered"
                + (" (a pending one is moved with reassign)" if old.is_pending else "")
            )
        raw_request, raw_policy = self.stored_fields(handoff_id, "request", "policy")
        if raw_request is None:
            raise HandoffNotFound(handoff_id)  # purged since the read above
        stored = json.loads(raw_request)
        if "expires_in_seconds" not in stored and old.expires_at is not None:
            # Left out of the stored request when its hash says it (``_stored_request_json``).
            lasted = old.expires_at - old.created_at
            stored["expires_in_seconds"] = round(lasted.total_seconds() * 1000) / 1000
        stored.update(
            channel=channel or old.channel,  # a reassignment's channel, if it had one
            reviewers=old.reviewers,
            idempotency_key=redelivery_key(handoff_id),
        )
        try:
            request = HandoffRequest.model_validate(stored)
        except ValueError as exc:  # a bad channel
            raise InvalidHandoffRequest(f"cannot redeliver {handoff_id}: {exc}") from exc
        tasks = TaskPolicy.from_script_arg(as_text(raw_policy)) if raw_policy else None
        # Not routed again: the old request was routed when it was created, and a channel
        # given here is the admin's choice, as a reassignment's is.
        made = self.create(
            request, handoff_id=new_handoff_id(), actor=by, tasks=tasks, routed=False
        )
        # A second script, so that the creation stays CREATE's own: linking is idempotent
        # (the first link wins), so a call cut off between the two is finished by calling
        # again, which finds the handoff created under the idempotency key.
        self._scripts["LINK_REDELIVERY"](
            keys=[self.keys.handoff(made.handoff.id), self.keys.handoff(handoff_id)],
            args=[self.keys.prefix, made.handoff.id, handoff_id, by, request.channel or ""],
        )
        logger.info(
            "handoff redelivered",
            extra={"handoff_id": handoff_id, "actor": by, "new_handoff_id": made.handoff.id},
        )
        return Created(handoff=self.get(made.handoff.id), created=made.created)

    def claim(self, handoff_id: str, *, claimed_by: str, take_over: bool = False) -> Handoff:
        """Take ownership of a pending escalation before resolving it."""
        result = self._scripts["CLAIM"](
            keys=[self.keys.handoff(handoff_id)],
            args=[self.keys.prefix, handoff_id, claimed_by, "1" if take_over else "0"],
        )
        verdict = as_text(result[0])
        if verdict == "missing":
            raise HandoffNotFound(handoff_id)
        if verdict == "not_escalation":
            raise InvalidDecision(
                f"handoff {handoff_id} is {_article(as_text(result[1]))}; only escalations "
                "are claimed"
            )
        if verdict == "already":
            raise _already_decided(handoff_id, result)
        if verdict == "claimed":
            raise ClaimedByOther(handoff_id, as_text(result[1]))
        return self.get(handoff_id)

    def link_message(self, handoff_id: str, channel: str, ts: str) -> None:
        """Remember that the Slack message ``channel``/``ts`` shows this handoff.

        Every linked message is also in the handoff's ``message_refs`` (its message, the
        escalation copies, the messages it moved from), which is how the retention sweep
        (``purge_decided``) finds and removes each link. No set of links is kept besides:
        it would cost about 280 bytes per posted handoff.
        """
        self._scripts["LINK_MESSAGE"](
            keys=[self.keys.lookup_levels], args=[self.keys.prefix, f"{channel}:{ts}", handoff_id]
        )

    def looked_up(self, kind: str, names: Sequence[str]) -> list[str | None]:
        """What each of ``names`` of a lookup ``kind`` (``store.keys.LOOKUP_KINDS``) says,
        None where nothing: from its lookup hash, at whichever level it is (one round
        trip)."""
        if not names:
            return []
        found = self._scripts["LOOK_UP"](
            keys=[self.keys.lookup_levels], args=[self.keys.prefix, kind, *names]
        )
        return [as_text(value) if value else None for value in found]

    def handoff_for_message(self, channel: str, ts: str) -> str | None:
        """The id of the handoff shown by a Slack message, if any."""
        link = f"{channel}:{ts}"
        (looked,) = self.looked_up("msglinks", [link])
        if looked is not None:
            return looked
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.message_links_before, link)  # linked before the lookups
            pipe.get(self.keys.message_link(channel, ts))  # linked before the hash
            values = [v for v in pipe.execute() if v is not None]
        return as_text(values[0]) if values else None

    def created_under(self, idempotency_key: str) -> str | None:
        """The id of the handoff created under ``idempotency_key``, if one exists."""
        (looked,) = self.looked_up("idemkeys", [idempotency_key])
        if looked is not None:
            return looked
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.idempotency_ids_before, idempotency_key)  # before the lookups
            pipe.get(self.keys.idempotency(idempotency_key))  # created before the hash
            in_hash, before = pipe.execute()
        if in_hash is not None:
            return as_text(in_hash)
        # The HTTP API kept a key's body digest (64 hex digits, never a handoff id) at
        # ``idempotency(key) + ":body"`` before ``idempotency_body``; such digests live
        # until they expire, and what the key ``<key>:body`` finds there names no handoff.
        if before is None or _LEGACY_IDEM_NOT_AN_ID.fullmatch(as_text(before)):
            return None
        return as_text(before)

    def first_sighting(self, event_id: str, *, ttl_seconds: int = 3600) -> bool:
        """True the first time an event id is seen (within ``ttl_seconds``); Slack retries
        events, so a handler acts only on the first sighting."""
        # A token of this call, read back in the same round trip: a resend after a lost reply
        # (the client retries) finds its own token, and is still the first sighting.
        key, token = self.keys.seen_event(event_id), secrets.token_hex(8)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, token, nx=True, ex=ttl_seconds)
        pipe.get(key)
        found = pipe.execute()[1]
        return found is not None and as_text(found) == token

    def record_audit(
        self, handoff_id: str, event: str, *, actor: str, detail: dict[str, Any] | None = None
    ) -> None:
        """Append an event (e.g. ``denied``, ``viewed_full``) to the handoff's audit trail."""
        result = self._scripts["RECORD_AUDIT"](
            keys=[self.keys.handoff(handoff_id)],
            args=[
                self.keys.prefix,
                handoff_id,
                event,
                actor,
                json.dumps(detail or {}),
                _new_operation_id(),
            ],
        )
        if as_text(result[0]) == "missing":
            raise HandoffNotFound(handoff_id)

    # -- background tasks (delivery and resume) -----------------------------------------

    def begin_task(self, handoff_id: str, kind: TaskKind, *, run_token: str) -> TaskStart:
        """Start an attempt at a delivery or resume under a lease.

        Returns ``TaskStart("run", attempt, handoff)`` when the caller should do the work,
        otherwise the reason not to: ``completed``, ``failed``, ``none``, ``busy`` (another
        attempt holds the lease) or ``missing``.
        """
        try:
            result = self._scripts["BEGIN_TASK"](
                keys=[self.keys.handoff(handoff_id)],
                args=[
                    self.keys.prefix,
                    handoff_id,
                    kind.value,
                    run_token,
                    int(self.config.retention_seconds * 1000),
                ],
            )
        except ReplicasNotConfirmed as exc:
            self._give_back(handoff_id, kind, exc)
            raise
        action = as_text(result[0])
        if action != "run":
            return TaskStart(action=action)
        return TaskStart(
            action="run",
            attempt=int(result[1]),
            handoff=self.from_document(handoff_id, result[2]),
            started_at=int(result[3]) / 1000,
            unanswered=PostWindow.from_stored(as_text(result[4])),
        )

    def _give_back(self, handoff_id: str, kind: TaskKind, exc: ReplicasNotConfirmed) -> None:
        """An attempt began on the master but the replicas did not confirm it (the caller
        does not run it): put it off as a deferral, which spends no attempt. Left as it
        was, it would count as an attempt whose worker was lost, and a replica down for a
        few leases closed a pending handoff ``undeliverable`` (or failed its resume)."""
        if isinstance(exc, MasterCutOff) or not exc.replies:
            return  # nothing was written
        reply = exc.replies[0]
        if isinstance(reply, Exception) or as_text(reply[0]) != "run":
            return
        try:
            self.finish_task(
                handoff_id,
                kind,
                attempt=int(reply[1]),
                error=f"not started: {exc}",
                defer_seconds=defaults.UNCONFIRMED_START_DEFER_SECONDS,
            )
        except ReplicasNotConfirmed:
            pass  # the deferral stands on the master (MasterCutOff: the lease lapses)
        except RedisError:
            logger.warning("could not put off the unconfirmed %s of %s", kind.value, handoff_id)

    def finish_task(
        self,
        handoff_id: str,
        kind: TaskKind,
        *,
        attempt: int,
        error: str | None = None,
        message_refs: dict[str, Any] | None = None,
        permanent: bool = False,
        defer_seconds: float = 0.0,
        unanswered: PostWindow | Literal["unchanged"] | None = UNCHANGED,
    ) -> str:
        """Record the end of an attempt; returns ``completed``, ``retrying``, ``deferred``,
        ``failed``, ``undeliverable`` or ``stale`` (the attempt no longer holds the lease, so
        nothing was written).

        ``defer_seconds`` (with an ``error``): Slack asked to wait that long (a rate limit):
        the task runs again then, and the attempt does not count against its attempts (up
        to ``defaults.MAX_DEFERRALS`` times a round; then it counts, and is retried no
        sooner). ``unanswered``: where a post of this task may have landed unanswered, as
        this attempt leaves it (None: nowhere; a window whose ``end`` is None runs until
        now); the next attempt is given it (``TaskStart.unanswered``). A completed attempt
        leaves nothing to look for. ``message_refs`` are merged into the handoff's whether
        the attempt succeeded or not (a failed one may have posted a thread record first).

        ``permanent``: the attempt failed in a way no retry can fix (Slack refused the
        message: an archived channel, a revoked token), so the task fails now instead of
        after its attempts. A delivery that fails, now or at its last attempt, closes its
        pending handoff as ``undeliverable`` in the same step (its run resumes with that,
        ``error`` is the decision's comment), unless work was asked for while the attempt
        ran (a reassignment): that gets a fresh round of attempts (``retrying``)."""
        extra = {"message_refs": json.dumps(message_refs)} if message_refs is not None else {}
        result = self._scripts["FINISH_TASK"](
            keys=[self.keys.handoff(handoff_id)],
            args=[
                self.keys.prefix,
                handoff_id,
                kind.value,
                attempt,
                "0" if error is not None else "1",
                (error or "")[:2000],
                json.dumps(extra) if extra else "{}",
                "1" if permanent and error is not None else "0",
                int(self.config.retention_seconds * 1000),
                _unanswered_verdict(unanswered),
                int(defer_seconds * 1000) if error is not None and defer_seconds > 0 else 0,
                defaults.MAX_DEFERRALS,
                _new_operation_id(),
            ],
        )
        return as_text(result[0])

    def retry_task(self, handoff_id: str, kind: TaskKind, *, requested_by: str) -> Handoff:
        """Queue another round of attempts for a delivery or resume that failed.

        The delivery of an ``undeliverable`` handoff is not retried (``NotRetryable``): the
        handoff is closed and its run resumed with ``undeliverable``, so a new post would
        show a request nobody can decide any more; ``redeliver`` asks again as a new
        handoff instead."""
        if kind is TaskKind.DELIVER:
            _refuse_redelivery(self.get(handoff_id))
        result = self._scripts["RETRY_TASK"](
            keys=[self.keys.handoff(handoff_id)],
            args=[self.keys.prefix, handoff_id, kind.value, requested_by, _new_operation_id()],
        )
        verdict = as_text(result[0])
        if verdict == "missing":
            raise HandoffNotFound(handoff_id)
        if verdict == "not_failed":
            raise NotRetryable(
                f"the {kind.value} of handoff {handoff_id} is {as_text(result[1])}, not failed; "
                "only a failed one can be retried"
            )
        return self.get(handoff_id)

    def retry_failed(self, handoff_id: str, *, requested_by: str) -> list[TaskKind]:
        """Queue another round of attempts for each of the handoff's tasks that failed
        (its delivery, resume, message update); returns which. Raises ``NotRetryable``
        when none failed."""
        handoff = self.get(handoff_id)
        failed = [kind for kind, _ in handoff.failed_tasks()]
        if handoff.status is Status.UNDELIVERABLE and TaskKind.DELIVER in failed:
            failed.remove(TaskKind.DELIVER)  # closed: a new post could not be decided
            if not failed:
                _refuse_redelivery(handoff)
        if not failed:
            raise NotRetryable(
                f"nothing of handoff {handoff_id} failed (delivery {handoff.delivery.state.value}, "
                f"resume {handoff.resume.state.value}); only failed work can be retried"
            )
        retried = []
        for kind in failed:
            try:
                self.retry_task(handoff_id, kind, requested_by=requested_by)
                retried.append(kind)
            except NotRetryable:
                continue  # retried meanwhile by someone else
        return retried

    def claim_due(self, *, limit: int, visibility_seconds: float) -> list[DueTask]:
        """Take due deliveries and resumes from the outbox, hiding them for a while."""
        result = self._scripts["CLAIM_DUE"](
            keys=[self.keys.outbox],
            # A resend of this claim (its reply lost) gets the same batch back.
            args=[self.keys.prefix, limit, int(visibility_seconds * 1000), _new_operation_id()],
        )
        flat = [as_text(v) for v in result]
        due = []
        for member, timeout_ms in zip(flat[0::2], flat[1::2], strict=True):
            kind, handoff_id = member.split(":", 1)
            due.append(DueTask(TaskKind(kind), handoff_id, int(timeout_ms) / 1000))
        return due

    def due_tasks(self, kinds: Iterable[TaskKind]) -> list[DueTask]:
        """The outbox entries of ``kinds`` due now (by Redis's clock), without claiming them
        (``handoff worker --burst`` asks whether anything is left to do)."""
        seconds, micros = self.redis.time()
        now_ms = seconds * 1000 + micros // 1000
        prefixes = tuple(f"{kind.value}:" for kind in kinds)
        due = []
        for member in self.redis.zrangebyscore(self.keys.outbox, "-inf", now_ms):
            text = as_text(member)
            if text.startswith(prefixes):
                kind, handoff_id = text.split(":", 1)
                due.append(DueTask(TaskKind(kind), handoff_id, 0.0))
        return due

    def expire_due(self, *, limit: int = defaults.SWEEP_BATCH) -> list[str]:
        """Expire pending handoffs whose deadline passed; returns their ids."""
        result = self._scripts["EXPIRE_DUE"](
            keys=[self.keys.deadlines],
            args=[
                self.keys.prefix,
                limit,
                int(self.config.retention_seconds * 1000),
                _new_operation_id(),
            ],
        )
        expired = [as_text(v) for v in result]
        for handoff_id in expired:
            logger.info("handoff expired", extra={"handoff_id": handoff_id})
        return expired

    def purge_decided(self, *, limit: int = defaults.SWEEP_BATCH) -> int:
        """Delete decided handoffs past retention whose resume is done (or was failed for
        the retention period too, never retried), with their audit trail, idempotency key,
        task entries and every message link; returns how many."""
        return int(
            self._scripts["PURGE_DECIDED"](
                keys=[self.keys.retention],
                args=[
                    self.keys.prefix,
                    limit,
                    int(self.config.retention_seconds * 1000),
                    3600 * 1000,
                    _new_operation_id(),
                ],
            )
        )

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a new delivery or resume is queued, or ``timeout`` seconds pass."""
        return self.redis.blpop([self.keys.wake], timeout=timeout) is not None


def decision_problem(request_type: RequestType, decision: ResumeData) -> str | None:
    """Why ``decision`` cannot decide a handoff of ``request_type``, or None if it can."""
    outcome = decision.outcome
    allowed = ALLOWED_OUTCOMES[request_type]
    if outcome not in allowed:
        article = "an" if request_type.value[0] in "aeiou" else "a"
        return (
            f"{article} {request_type.value} can be "
            f"{' or '.join(sorted(s.value for s in allowed))}, not {outcome.value}"
        )
    if outcome is Status.ANSWERED and not (decision.answer and decision.answer.strip()):
        return f"answering a {request_type.value} needs a non-empty answer"
    if decision.answer is not None and outcome is not Status.ANSWERED:
        return f"an answer comes with outcome 'answered', not {outcome.value}"
    if decision.answer_data is not None and request_type is not RequestType.QUESTION:
        return "answer_data only applies to questions"
    if decision.answer_data is not None and outcome is not Status.ANSWERED:
        return f"answer_data comes with outcome 'answered', not {outcome.value}"
    if decision.edited_args is not None and request_type is not RequestType.APPROVAL:
        return "edited_args only apply to approvals"
    if decision.edited_args is not None and outcome is not Status.APPROVED:
        return "edited_args come with an approval, not a rejection"
    if decision.corrected_draft is not None and request_type is not RequestType.CORRECTION:
        return "corrected_draft only applies to corrections"
    if decision.corrected_draft is not None and outcome is not Status.APPROVED:
        return "corrected_draft comes with an approval, not a rejection"
    return None


_ALL_TYPES = " ".join(t.value for t in RequestType)

_MOST_IDS = 2**62
"""More ids than an index can hold: a larger limit reads as this one."""

_CONFIRMED = frozenset(
    {
        "CREATE",
        "DECIDE",
        "CLAIM",
        "REASSIGN",
        "LINK_REDELIVERY",
        "RETRY_TASK",
        "BEGIN_TASK",
        "FINISH_TASK",
    }
)
"""The scripts whose writes wait for ``HANDOFF_MIN_REPLICA_ACKS`` replicas: those someone
is told about (a creation returned to an agent; a decision, cancel or expiry acknowledged
to a person or a caller; a claim, a reassignment, a redelivery, a failed task's retry), and
a task's start and end, so that a failover neither forgets a resume that ran (and runs it
again) nor one that began."""
"""What a cancel or an expiry fits: every request type."""


@functools.lru_cache(maxsize=128)
def _fitting_types(
    outcome: Status,
    *,
    answered: bool,
    has_answer: bool,
    has_answer_data: bool = False,
    has_edited_args: bool,
    has_corrected_draft: bool,
) -> str:
    """The request types a decision of this shape can decide, space separated, as the
    DECIDE script takes them (``decision_problem`` reads only these facts of a decision,
    so the answer is the same for every such decision)."""
    probe = ResumeData.model_construct(
        outcome=outcome,
        answer=("x" if answered else " ") if has_answer else None,
        answer_data={} if has_answer_data else None,
        edited_args={} if has_edited_args else None,
        corrected_draft="" if has_corrected_draft else None,
    )
    return " ".join(t.value for t in RequestType if decision_problem(t, probe) is None)


def _unanswered_verdict(unanswered: PostWindow | Literal["unchanged"] | None) -> str:
    """``finish_task``'s ``unanswered`` as FINISH_TASK reads it (see ``note_unanswered``)."""
    if unanswered == UNCHANGED:
        return ""
    if unanswered is None:
        return "none"
    assert isinstance(unanswered, PostWindow)
    return unanswered.to_stored()


def _stored_request_json(request: HandoffRequest) -> str:
    """The request as a handoff's body keeps it: unset fields left out (reading it back gives
    them their defaults), and what the hash holds already: the idempotency key (the hash's
    ``idem_key``, which the handoff's document puts back: ``handoff_document`` in
    ``store.scripts``) and an expiry of whole milliseconds (the hash's ``expires_at`` less its
    ``created_at``). An empty ``metadata`` is left out too (its default). Each is tens of bytes
    of every waiting handoff (``bench/memory.py``)."""
    left_out = {"idempotency_key"}
    if not request.metadata:
        left_out.add("metadata")
    seconds = request.expires_in_seconds
    if seconds is not None and _whole_ms(seconds) / 1000 == seconds:
        # The hash's expiry less its creation time says it (``redeliver`` reads it so).
        left_out.add("expires_in_seconds")
    return request.model_dump_json(exclude_none=True, exclude=left_out)


def _digest_of(request: HandoffRequest) -> str:
    """The digest of an approval's action as the agent asked ('' for other requests)."""
    payload = request.payload
    if not isinstance(payload, ApprovalPayload):
        return ""
    return action_digest(payload.action.name, payload.action.args)


def _typed_answer(
    handoff: Handoff, answer: str | None, answer_data: dict[str, Any] | None
) -> tuple[str | None, dict[str, Any] | None]:
    """The answer and typed answer a decision of ``handoff`` records, checked against its
    question's ``answer_schema`` (``InvalidDecision`` saying what is wrong). Read before the
    script runs: a handoff's payload never changes, so the check cannot go stale."""
    schema = getattr(handoff.payload, "answer_schema", None)
    if schema is None:
        if answer_data is not None and handoff.request_type is RequestType.QUESTION:
            raise InvalidDecision("answer_data only applies to a question with an answer_schema")
        return answer, answer_data  # decision_problem judges the rest
    given_data = answer_data is not None
    if answer_data is None:
        field = answer_schemas.single_text_field(schema)
        if field is None or not (answer and answer.strip()):
            names = ", ".join(f.name for f in answer_schemas.answer_fields(schema))
            raise InvalidDecision(
                f"this question takes a typed answer: give answer_data, an object of its "
                f"answer_schema's fields ({names})"
            )
        answer_data = {field: answer.strip()}
    if errors := answer_schemas.answer_errors(schema, answer_data):
        problems = "; ".join(
            f"{name}: {message}" if name else message for name, message in errors.items()
        )
        raise InvalidDecision(f"answer_data does not fit the answer_schema: {problems}")
    if not given_data:
        return answer, answer_data  # one text field: the text is the answer
    text = answer_schemas.answer_text(schema, answer_data)
    if answer is not None and answer.strip() != text.strip():
        # The agent reads either: they must not say two different things.
        raise InvalidDecision("give answer_data alone: the answer's text is made from it")
    return text, answer_data


def _quorum_of(request: HandoffRequest) -> str:
    """What the store keeps of an approval that needs more than one person (the CREATE
    script's quorum argument), or '' when one decision decides."""
    payload = request.payload
    if not isinstance(payload, ApprovalPayload):
        return ""
    if payload.approvals_required == 1 and payload.rejections_required == 1:
        return ""
    return json.dumps(
        {
            "n": payload.approvals_required,
            "r": payload.rejections_required,
            "requester": request.requester or "",
        }
    )


def _new_decision_id() -> str:
    """A random id for one decision (128 bits, hex), as ``uuid4().hex`` but cheaper."""
    return os.urandom(16).hex()


def _new_operation_id() -> str:
    """A random id for one script call (64 bits, hex): the same on redis-py's resends of
    the call, so a resent script answers what its first run did (see ``store.scripts``)."""
    return os.urandom(8).hex()


def _parse_outcome(outcome: Status | str) -> Status:
    try:
        return Status(outcome)
    except ValueError:
        raise InvalidDecision(
            f"unknown outcome {outcome!r}; use approved, rejected or answered"
        ) from None


_RETRYABLE_KINDS = frozenset({TaskKind.DELIVER.value, TaskKind.RESUME.value, TaskKind.NOTIFY.value})
"""The tasks an admin retries (``retry_failed``) and ``failed_handoff_ids`` lists."""


def redelivery_key(handoff_id: str) -> str:
    """The idempotency key of the handoff that redelivers ``handoff_id``: one per old
    handoff, however often it is redelivered."""
    return f"redelivery:{handoff_id}"


def _refuse_redelivery(handoff: Handoff) -> None:
    """Raise ``NotRetryable`` for the delivery of an ``undeliverable`` handoff."""
    if handoff.status is not Status.UNDELIVERABLE:
        return
    reason = handoff.resume_data.comment if handoff.resume_data else None
    raise NotRetryable(
        f"handoff {handoff.id} is undeliverable"
        + (f" ({reason})" if reason else "")
        + ": it is closed and its run was resumed with undeliverable, so it is not posted "
        "again; redeliver it instead (a new handoff for the same run, in another channel if "
        "need be), or fix the channel (unarchive it, invite the bot) and have the agent "
        "ask again"
    )


def _already_decided(handoff_id: str, result: list[Any]) -> AlreadyDecided:
    """The error for a script's ``{'already', status, decision json, decided_at}`` reply."""
    earlier = json.loads(as_text(result[2])) if result[2] else {}
    return AlreadyDecided(
        handoff_id,
        as_text(result[1]),
        earlier.get("decided_by"),
        _ms_to_datetime(as_text(result[3])),
    )


def _agent_content_bytes(request: HandoffRequest) -> int:
    """Bytes of what the payload limit counts: the context and the payload, as JSON."""
    return len(json.dumps(request.context, ensure_ascii=False).encode()) + len(
        request.payload.model_dump_json().encode()
    )


def _ms_to_datetime(value: str) -> datetime | None:
    if not value or value == "0":
        return None
    return datetime.fromtimestamp(int(value) / 1000, tz=UTC)


def _audit_page(
    found: list[Any] | None, follow: Callable[[list[tuple[str, int]]], list[Any]]
) -> list[AuditEntry]:
    """Stream entries as ``AuditEntry``s. This runs for every entry of every read of the
    stream (``handoff stats`` reads all of it), so a page of whole events (from a client
    without ``decode_responses``) takes one comprehension; anything else (str replies, an
    entry without an event, pointers into a pending handoff's trail) the careful loop.
    ``follow`` reads the trail events that pointers name (``None`` for one that is gone)."""
    new = tuple.__new__
    try:
        return [new(AuditEntry, (i.decode(), f[b"e"])) for i, f in found or ()]
    except (AttributeError, KeyError, TypeError):
        pass
    page: list[AuditEntry] = []
    pointers: list[tuple[int, str, int]] = []
    """(place in the page, handoff id, place in its trail) of each pointer entry."""
    for entry_id, fields in found or ():
        named = {as_text(k): v for k, v in (fields or {}).items()}
        raw = named.get("e") or b""
        if not raw and named.get("p"):
            with contextlib.suppress(ValueError):
                pointers.append((len(page), as_text(named["p"]), int(named.get("i") or 0)))
        page.append(new(AuditEntry, (as_text(entry_id), as_text(raw).encode())))
    if pointers:
        events = follow([(handoff_id, index) for _, handoff_id, index in pointers])
        for (at, handoff_id, _), event in zip(pointers, events, strict=True):
            if event:
                page[at] = AuditEntry(page[at].id, _naming(as_text(event).encode(), handoff_id))
    return page


def _naming(trail_event: bytes, handoff_id: str) -> bytes:
    """A trail event (JSON without the id its key says) as the stream holds whole events:
    with ``handoff_id``, first, so readers that search the bytes find it there too. An event
    of a body's trail (``[at, actor, event, detail]``) becomes the object the stream holds."""
    if trail_event.lstrip().startswith(b"["):
        at, actor, event, *rest = json.loads(trail_event)
        whole = {"handoff_id": handoff_id, "event": event, "actor": actor, "at": at}
        detail = rest[0] if rest else {}
        return json.dumps({**whole, "detail": detail}, separators=(",", ":")).encode()
    named = b'{"handoff_id":' + json.dumps(handoff_id).encode()
    rest = trail_event.strip()[1:]
    return named + (b"," + rest if rest.strip() != b"}" else b"}")


__all__ = [
    "AuditEntry",
    "Created",
    "DueTask",
    "HandoffStore",
    "InvalidHandoffRequest",
    "StoreConfig",
    "TaskPolicy",
    "TaskStart",
]


def _article(noun: str) -> str:
    """``noun`` with its indefinite article: "an approval", "a question"."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"
