"""Exceptions raised by the store; each message says what the caller can do next."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError


class HandoffError(Exception):
    """Base class for every error slack-handoff raises on purpose."""


class ConfigurationError(HandoffError, ValueError):
    """The settings cannot run this (a variable unset or malformed); the message says which
    to set, and how. A ``ValueError`` too, as bad settings were before it existed."""


class InvalidHandoffRequest(HandoffError, ValueError):
    """The request to create a handoff is malformed (unknown type, missing or bad fields)."""


class PayloadTooLarge(InvalidHandoffRequest):
    """The handoff's context and payload exceed the configured size limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"handoff context+payload is {size} bytes, over the {limit}-byte limit; "
            "send a summary and keep the full data in your own storage (or raise "
            "HANDOFF_MAX_PAYLOAD_BYTES)"
        )
        self.size = size
        self.limit = limit


class ConditionTooCostly(InvalidHandoffRequest):
    """A routing rule's condition ran out of its budget of steps on this request, so the
    request is refused and nothing is written: taking it as "no match" would skip the rule
    (perhaps a stricter one) on the strength of arguments the agent chose."""

    def __init__(self, rule: str, condition: str, budget: int) -> None:
        shown = condition if len(condition) <= 120 else condition[:117] + "..."
        super().__init__(
            f"the routing condition of rule {rule!r} ({shown}) was too costly for these "
            f"arguments (the conditions of a request share a budget of {budget} steps), so "
            "the handoff was not created; "
            "send fewer or smaller arguments (split a batch), or ask whoever owns the "
            "routing policy to make the condition cheaper"
        )
        self.rule = rule
        self.condition = condition
        self.budget = budget


class InvalidResumeTarget(InvalidHandoffRequest):
    """The resume target is not an importable ``module:function`` callable."""


class IdempotencyConflict(HandoffError):
    """An idempotency key was reused for a different request."""


class HandoffNotFound(HandoffError, LookupError):
    """No handoff has this id (it never existed, or retention removed it)."""

    def __init__(self, handoff_id: str) -> None:
        super().__init__(
            f"no handoff with id {handoff_id!r}; check the id (ids look like ho_01J...)"
        )
        self.handoff_id = handoff_id


class InvalidDecision(HandoffError, ValueError):
    """The decision does not fit the handoff's request type (e.g. an answer for an approval)."""


class AlreadyDecided(HandoffError):
    """The handoff is no longer pending; the first decision stands and nothing was changed."""

    def __init__(
        self,
        handoff_id: str,
        status: str,
        decided_by: str | None,
        decided_at: datetime | None,
    ) -> None:
        who = f" by {decided_by}" if decided_by else ""
        when = f" at {decided_at.isoformat()}" if decided_at else ""
        super().__init__(
            f"handoff {handoff_id} was already {status}{who}{when}; a handoff is decided once"
        )
        self.handoff_id = handoff_id
        self.status = status
        self.decided_by = decided_by
        self.decided_at = decided_at


class ClaimRequired(HandoffError):
    """An escalation must be claimed, by the person resolving it, before it is resolved."""


class ClaimedByOther(HandoffError):
    """Someone else already claimed this escalation."""

    def __init__(self, handoff_id: str, claimed_by: str) -> None:
        super().__init__(f"handoff {handoff_id} is claimed by {claimed_by}; ask them or an admin")
        self.handoff_id = handoff_id
        self.claimed_by = claimed_by


class NotRetryable(HandoffError):
    """Only a resume (or delivery) that failed after all its attempts can be retried."""


class VoteRefused(HandoffError):
    """A vote on an approval that needs several people that cannot count; nothing changed."""


class AlreadyVoted(VoteRefused):
    """This person has voted on this handoff already (one vote per person)."""

    def __init__(self, handoff_id: str, voter: str, outcome: str) -> None:
        super().__init__(f"{voter} already voted {outcome} on handoff {handoff_id}")
        self.handoff_id = handoff_id
        self.voter = voter
        self.outcome = outcome


class RequesterMayNotVote(VoteRefused):
    """The person who asked for the handoff never counts towards its quorum."""

    def __init__(self, handoff_id: str, voter: str) -> None:
        super().__init__(f"{voter} asked for handoff {handoff_id}, so their vote does not count")
        self.handoff_id = handoff_id
        self.voter = voter


class TooManyVotes(VoteRefused):
    """The handoff has taken as many votes as one handoff keeps (``MAX_VOTES``): an admin
    decides it (or cancels it) now."""

    def __init__(self, handoff_id: str, votes: int) -> None:
        super().__init__(
            f"handoff {handoff_id} has had {votes} votes, the most one handoff keeps; "
            "ask an admin to decide or cancel it"
        )
        self.handoff_id = handoff_id
        self.votes = votes


class ArgumentsChanged(VoteRefused):
    """The approval was for arguments a voter's edit has since replaced; nothing changed."""

    def __init__(self, handoff_id: str) -> None:
        super().__init__(
            f"the arguments of handoff {handoff_id} were edited since they were read; "
            "read them again, then decide"
        )
        self.handoff_id = handoff_id


class ActionDigestMismatch(HandoffError):
    """What was about to run is not what was approved (its digest differs): refused."""

    def __init__(self, handoff_id: str, approved: str, running: str) -> None:
        super().__init__(
            f"handoff {handoff_id}: the action about to run ({running}) is not the one "
            f"approved ({approved}); refused"
        )
        self.handoff_id = handoff_id
        self.approved = approved
        self.running = running


class ReplicasNotConfirmed(HandoffError, RedisConnectionError):
    """Fewer replicas than ``HANDOFF_MIN_REPLICA_ACKS`` confirmed a write in time, so it
    may not survive a failover and nobody may be told it happened: try again.

    The write itself stands on the master (Redis cannot take it back), and every write the
    store confirms is idempotent, so a retry (the same click, the same create with its
    idempotency key) finds it and is confirmed in turn, never doubled. A redis-py
    ``ConnectionError`` too, so every place that answers "the store is unavailable, try
    again" (Slack's ephemeral reply, the API's 503 with ``Retry-After``, the workers'
    retried attempts) answers this the same way.
    """

    def __init__(self, wanted: int, confirmed: int, timeout_seconds: float) -> None:
        super().__init__(
            f"only {confirmed} of the {wanted} replicas HANDOFF_MIN_REPLICA_ACKS asks for "
            f"confirmed the write within {timeout_seconds:g} s (a replica down or lagging, or "
            "a failover under way); it may not survive a failover, so try again: a retry is "
            "the same request, never a second one"
        )
        self.wanted = wanted
        self.confirmed = confirmed
        self.replies: list[Any] = []
        """What the unconfirmed commands answered (their writes stand on the master)."""


class MasterCutOff(ReplicasNotConfirmed):
    """The Redis master refused the write (``NOREPLICAS``): fewer replicas than its
    ``min-replicas-to-write`` are connected and in sync, as when it is cut off from them.
    Nothing was written and nobody is told anything happened: try again (a failover, if one
    is under way, brings a master that takes it)."""

    def __init__(self) -> None:
        HandoffError.__init__(
            self,
            "the Redis master refused the write: fewer replicas than its "
            "min-replicas-to-write are in sync (it may be cut off from them, or a failover is "
            "under way); nothing was written, so try again",
        )
        self.wanted = 0
        self.confirmed = 0
        self.replies = []
