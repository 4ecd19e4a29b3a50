"""What the workflow side and the worker side of the Temporal adapter send each other: the
names Temporal knows them by, and plain dataclasses (the standard library only, so the
workflow sandbox may load this module as it is).

- ``HandoffRequest``: a workflow's request, the argument of the ``CREATE_ACTIVITY``.
- ``CancelRequest``: a workflow withdrawing a request, the argument of ``CANCEL_ACTIVITY``.
- ``Decision``: what came of a request, sent by the resume target to the workflow as the
  ``DECISION_UPDATE`` (or the ``DECISION_SIGNAL``), as a JSON object.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

CREATE_ACTIVITY = "slack_handoff.create_handoff"
"""Activity type that creates a handoff for a workflow (``HandoffActivities.create_handoff``)."""

CANCEL_ACTIVITY = "slack_handoff.cancel_handoff"
"""Activity type that withdraws a workflow's pending handoff."""

DECISION_UPDATE = "slack_handoff.decision"
"""Update that hands a workflow the decision; its update id is the handoff id."""

DECISION_SIGNAL = "slack_handoff.decision"
"""Signal that hands a workflow the decision, for ``delivery="signal"`` (and when the
workflow had no update handler yet)."""

Delivery = Literal["update", "signal"]
"""How the resume target hands the decision to the workflow."""

DELIVERIES: tuple[Delivery, ...] = ("update", "signal")

RequestKind = Literal["approval", "question"]


@dataclass
class HandoffRequest:
    """A workflow's request for a person, as the activity receives it."""

    kind: RequestKind
    action: str | None = None
    args: dict[str, Any] | None = None
    description: str | None = None
    args_schema: dict[str, Any] | None = None
    question: str | None = None
    choices: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """The ``HandoffOptions`` given, by name (``expires_in`` in seconds)."""
    delivery: Delivery = "update"


@dataclass
class CancelRequest:
    """A workflow withdrawing its pending handoff (it was cancelled while waiting)."""

    handoff_id: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """What a person decided about a workflow's request, or what happened instead.

    ``status`` is the handoff's: ``approved``, ``rejected``, ``answered``, ``expired``,
    ``cancelled`` or ``undeliverable``; only ``approved`` (and ``answered``) mean yes.
    """

    handoff_id: str
    status: str
    decided_by: str | None = None
    args: dict[str, Any] | None = None
    """For an approval: the arguments as approved (the reviewer's edits laid over the
    request's); the request's own when it was not approved."""
    edited: bool = False
    """The reviewer changed the arguments before approving."""
    answer: str | None = None
    answer_data: dict[str, Any] | None = None
    message: str | None = None
    """The reviewer's comment, or in words what happened instead of a decision (expired,
    cancelled, undeliverable)."""

    @property
    def approved(self) -> bool:
        """The request was approved (possibly with edits)."""
        return self.status == "approved"

    @property
    def answered(self) -> bool:
        """The question was answered (``answer`` holds it)."""
        return self.status == "answered"

    def to_payload(self) -> dict[str, Any]:
        """The JSON object sent to the workflow."""
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Decision:
        """Read a decision sent by any version of the adapter: fields it does not know are
        left out, so a newer worker never breaks an older workflow. Raises ``TypeError`` or
        ``ValueError`` for a payload that is no decision."""
        known = {f.name for f in fields(cls)}
        decision = cls(**{name: value for name, value in payload.items() if name in known})
        if not isinstance(decision.handoff_id, str) or not isinstance(decision.status, str):
            raise ValueError("a decision names its handoff_id and status")
        return decision


__all__ = [
    "CANCEL_ACTIVITY",
    "CREATE_ACTIVITY",
    "DECISION_SIGNAL",
    "DECISION_UPDATE",
    "DELIVERIES",
    "CancelRequest",
    "Decision",
    "Delivery",
    "HandoffRequest",
    "RequestKind",
]
