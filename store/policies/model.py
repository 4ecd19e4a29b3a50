"""The policy file's shape, validated with pydantic: rules, what each matches, what it sets.

Every model forbids unknown fields, so a misspelt ``reviewer:`` is an error naming the rule
and the field, never a rule that silently routes to nobody.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from store.durations import InvalidDuration, parse_age
from store.models import (
    MAX_QUORUM,
    MAX_WAIT_SECONDS,
    ChannelId,
    EscalationTarget,
    RequestType,
    ReviewerId,
)
from store.policies.conditions import Condition, ConditionError

RULE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A rule's name: it becomes ``policy:<name>`` in ``decided_by`` and the audit trail."""


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Globs = Annotated[list[str], BeforeValidator(_one_or_many)]
"""One glob or a list of them (``refund_*``, ``[billing-*, payments]``): any may match."""


def _seconds(value: Any) -> Any:
    # An age as ``/handoff stats`` reads it (90m, 12h, 7d, 2w), or a number of seconds.
    if isinstance(value, str):
        try:
            return parse_age(value).total_seconds()
        except InvalidDuration as exc:
            raise ValueError(f"{exc} (or a number of seconds)") from None
    return value


Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False),
]
"""A wait, as ``90m``, ``12h``, ``7d``, ``2w`` or a number of seconds."""


def _condition(value: Any) -> Any:
    if isinstance(value, Condition):
        return value
    if not isinstance(value, str):
        raise ValueError("a condition is a CEL expression, as a string")
    try:
        return Condition(value)
    except ConditionError as exc:
        raise ValueError(str(exc)) from None


CompiledCondition = Annotated[
    Condition,
    BeforeValidator(_condition),
    PlainSerializer(lambda condition: condition.text, return_type=str),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class Match(_Strict):
    """What a request must have for the rule to apply; every field given must hold (an
    empty match applies to every request)."""

    request_type: list[RequestType] | None = None
    action: Globs | None = None
    """Globs on an approval's action name; a rule with ``action`` matches approvals only."""
    agent: Globs | None = None
    requester: Globs | None = None
    channel: Globs | None = None
    """Globs on the channel the agent asked for ("" when it named none)."""
    api_key: Globs | None = None
    """Globs on the name of the HTTP API key that created the request ("" for Python code):
    the one field the agent does not assert, as the API sets it from the key it checked."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Keys the request's metadata must hold with exactly these values."""
    when: CompiledCondition | None = None
    """A CEL expression over request_type, action, args, agent, requester, channel,
    metadata, context and api_key, e.g. ``args.amount_usd > 500``."""

    @field_validator("request_type", mode="before")
    @classmethod
    def _one_type_or_many(cls, value: Any) -> Any:
        return _one_or_many(value)


class RuleSettings(_Strict):
    """What a matching rule sets (see docs/policies.md for how it combines with what the
    agent passed)."""

    channel: ChannelId | None = None
    reviewers: list[ReviewerId] | None = None
    """People (U...) and user groups (S...) who may decide."""
    approvals_required: int | None = Field(default=None, ge=1, le=MAX_QUORUM)
    rejections_required: int | None = Field(default=None, ge=1, le=MAX_QUORUM)
    """Rejections that reject it; a matching rule that sets none keeps the veto: 1."""
    requester_may_approve: bool | None = None
    expires_in: Duration | None = None
    remind_after: Duration | None = None
    max_reminders: int | None = Field(default=None, ge=0, le=100)
    escalate_after: Duration | None = None
    escalate_to: EscalationTarget | None = None

    @field_validator("expires_in")
    @classmethod
    def _expiry_is_after_now(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("an expiry must be longer than 0")
        return value


class Rule(_Strict):
    """One rule: its name, what it matches, and what it sets or decides."""

    name: str
    match: Match = Field(default_factory=Match)
    set: RuleSettings = Field(default_factory=RuleSettings)
    auto: Literal["approve", "reject"] | None = None
    """Decide at once, as ``policy:<name>``, with no person asked."""

    @field_validator("name")
    @classmethod
    def _name_is_a_label(cls, value: str) -> str:
        if not RULE_NAME.match(value):
            raise ValueError(
                "a rule name is 1-64 letters, digits, '-', '_' or '.', starting with a "
                "letter or digit (it is shown as policy:<name>)"
            )
        return value

    @model_validator(mode="after")
    def _auto_approve_fits(self) -> Rule:
        if self.auto != "approve":
            return self
        approvals_only = self.match.action is not None or self.match.request_type == [
            RequestType.APPROVAL
        ]
        if not approvals_only:
            raise ValueError(
                "auto: approve decides approvals only; add match.request_type: approval "
                "(or match.action)"
            )
        if (self.set.approvals_required or 1) > 1:
            raise ValueError("auto: approve asks nobody, so set.approvals_required cannot be > 1")
        return self


class PolicyFile(_Strict):
    """A whole policy file: its rules, tried in order; the first that matches applies."""

    rules: list[Rule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names_are_unique(self) -> PolicyFile:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"two rules are named {rule.name!r}; give each its own name")
            seen.add(rule.name)
        return self
