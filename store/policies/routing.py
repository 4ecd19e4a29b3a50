"""Applying a routing policy to a request: which rule matches, and the request it makes.

How a rule's settings combine with what the agent passed (docs/policies.md):

- **routing** (``channel``, ``reviewers``, ``escalate_to``): the rule's value replaces the
  agent's. A policy exists so that an agent cannot pick who approves its own actions.
- **approvals_required**: the larger of the agent's and the rule's. A policy may raise the
  approvals an action needs, never lower them.
- **rejections_required**: the smaller of the agent's and the rule's, which is 1 when the
  rule sets none: an approval a rule routed is vetoed by its first rejection unless the
  rule says otherwise, so an agent cannot take the veto from the people a rule chose.
- **requester_may_approve**: the rule's value, stored on the request (agents cannot set it).
- **timers** (``expires_in``, ``remind_after``, ``max_reminders``, ``escalate_after``): the
  rule's value where the agent passed none; an agent's own value is kept.
- **auto**: ``reject`` always decides; ``approve`` decides only an approval that needs one
  approval: an agent that asked for more people gets them (routed as the rule says).

A rule whose condition runs out of its budget (``store.policies.cost``) refuses the request
(``ConditionTooCostly``): skipping it could skip a stricter rule.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store.exceptions import ConditionTooCostly
from store.models import ApprovalPayload, Handoff, HandoffRequest, RequestType, Status
from store.policies.conditions import Bindings
from store.policies.cost import CONDITION_BUDGET
from store.policies.model import Match, PolicyFile, Rule

POLICY_ACTOR_PREFIX = "policy:"
"""``decided_by`` of a handoff a rule decided: ``policy:<rule name>``."""

_TIMERS = {
    # rule setting -> request field
    "expires_in": "expires_in_seconds",
    "remind_after": "remind_after_seconds",
    "max_reminders": "max_reminders",
    "escalate_after": "escalate_after_seconds",
}
_ROUTING = ("channel", "reviewers", "escalate_to")


def policy_actor(rule_name: str) -> str:
    """Who a rule's decision is recorded as: ``policy:<rule name>``."""
    return f"{POLICY_ACTOR_PREFIX}{rule_name}"


def decided_by_policy(handoff: Handoff) -> bool:
    """Whether ``handoff`` was decided by a policy rule rather than a person."""
    decision = handoff.resume_data
    return decision is not None and decision.decided_by.startswith(POLICY_ACTOR_PREFIX)


@dataclass(frozen=True)
class Routing:
    """What the matching rule made of a request.

    ``request`` is the request to store; ``changes`` the fields the rule changed (as stored
    values); ``auto`` the outcome to decide at once, or None when people decide.
    """

    rule: str
    request: HandoffRequest
    changes: dict[str, Any] = field(default_factory=dict)
    auto: Status | None = None

    @property
    def decided_by(self) -> str:
        """``policy:<rule name>``."""
        return policy_actor(self.rule)


@dataclass(frozen=True)
class RuleVerdict:
    """Whether one rule matched a request, and if not, the first criterion that failed;
    ``too_costly``: its condition ran out of budget, so the request is refused."""

    rule: str
    matched: bool
    reason: str = ""
    too_costly: bool = False


def request_variables(request: HandoffRequest) -> dict[str, Any]:
    """What conditions see of a request (JSON values): request_type, action, args, agent,
    requester, channel, metadata, context and api_key (``CONDITION_VARIABLES``)."""
    payload = request.payload
    action = payload.action if isinstance(payload, ApprovalPayload) else None
    return {
        "request_type": request.request_type.value,
        "action": action.name if action else "",
        "args": dict(action.args) if action else {},
        "agent": request.agent_name or "",
        "requester": request.requester or "",
        "channel": request.channel or "",
        "metadata": dict(request.metadata),
        "context": request.context,
        "api_key": request.api_key or "",
    }


def _any_glob(value: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, glob) for glob in globs)


def mismatch(match: Match, request: HandoffRequest, variables: dict[str, Any]) -> str:
    """The first criterion of ``match`` but its condition (``when``) the request fails, or
    "" when it meets them all."""
    if match.request_type is not None and request.request_type not in match.request_type:
        return f"request_type is {request.request_type.value}"
    if match.action is not None:
        if request.request_type is not RequestType.APPROVAL:
            return "action: not an approval"
        if not _any_glob(variables["action"], match.action):
            return f"action {variables['action']!r} matches none of {match.action}"
    for name, globs in (
        ("agent", match.agent),
        ("requester", match.requester),
        ("channel", match.channel),
        ("api_key", match.api_key),
    ):
        if globs is not None and not _any_glob(variables[name], globs):
            return f"{name} {variables[name]!r} matches none of {globs}"
    for key, wanted in match.metadata.items():
        if key not in request.metadata or request.metadata[key] != wanted:
            return f"metadata.{key} is not {wanted!r}"
    return ""


def judge(
    rule: Rule, request: HandoffRequest, variables: dict[str, Any], bindings: Bindings
) -> RuleVerdict:
    """Whether ``rule`` matches ``request``: its criteria first, then its condition (on
    ``bindings``, the request's variables as CEL, shared by the rules)."""
    reason = mismatch(rule.match, request, variables)
    when = rule.match.when
    if reason or when is None:
        return RuleVerdict(rule.name, matched=not reason, reason=reason)
    result = when.evaluate(bindings)
    if result.too_costly:
        reason = (
            f"when: {when.text} ran out of the {CONDITION_BUDGET} steps this request's "
            "conditions share: the request is refused"
        )
        return RuleVerdict(rule.name, matched=False, reason=reason, too_costly=True)
    if result.problem:
        reason = f"when: {when.text} could not be evaluated ({result.problem})"
    elif not result.holds:
        reason = f"when: {when.text} is not true"
    return RuleVerdict(rule.name, matched=not reason, reason=reason)


class RoutingPolicy:
    """A loaded policy: its rules, tried in order.

    Example::

        policy = load_policy("policy.yaml")
        routing = policy.route(request)  # None: no rule matched, the defaults apply
    """

    def __init__(self, rules: PolicyFile, *, source: str = "") -> None:
        self.rules: tuple[Rule, ...] = tuple(rules.rules)
        self.source = source

    def verdicts(self, request: HandoffRequest) -> list[RuleVerdict]:
        """Each rule tried on ``request``, up to and including the first that matches (or
        whose condition was too costly: no rule after it is tried)."""
        variables = request_variables(request)
        bindings = Bindings(variables)
        tried = []
        for rule in self.rules:
            verdict = judge(rule, request, variables, bindings)
            tried.append(verdict)
            if verdict.matched or verdict.too_costly:
                break
        return tried

    def rule(self, name: str) -> Rule:
        """The rule named ``name`` (``KeyError`` when there is none)."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def matching_rule(self, request: HandoffRequest) -> Rule | None:
        """The first rule that matches ``request``, or None; ``ConditionTooCostly`` when a
        rule's condition ran out of budget before one matched."""
        verdicts = self.verdicts(request)
        last = verdicts[-1] if verdicts else None
        if last is not None and last.too_costly:
            condition = self.rule(last.rule).match.when
            text = condition.text if condition is not None else ""
            raise ConditionTooCostly(last.rule, text, CONDITION_BUDGET)
        return self.rule(last.rule) if last is not None and last.matched else None

    def route(self, request: HandoffRequest) -> Routing | None:
        """The request as the first matching rule makes it, or None when none matches;
        ``ConditionTooCostly`` (nothing to store) when a condition ran out of budget."""
        rule = self.matching_rule(request)
        return None if rule is None else apply_rule(rule, request)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoutingPolicy) and other.rules == self.rules

    def __hash__(self) -> int:
        return hash(self.rules)


def apply_rule(rule: Rule, request: HandoffRequest) -> Routing:
    """``request`` with ``rule``'s settings combined in (module text: how)."""
    settings = rule.set
    changes: dict[str, Any] = {}
    for name in _ROUTING:
        value = getattr(settings, name)
        if value is not None and value != getattr(request, name):
            changes[name] = value
    for setting, field_name in _TIMERS.items():
        value = getattr(settings, setting)
        if value is not None and getattr(request, field_name) is None:
            changes[field_name] = value
    if settings.requester_may_approve is not None:
        changes["requester_may_approve"] = settings.requester_may_approve
    payload = request.payload
    approvals = 1
    if isinstance(payload, ApprovalPayload):
        approvals = max(payload.approvals_required, settings.approvals_required or 1)
        rejections = min(payload.rejections_required, settings.rejections_required or 1)
        quorum = {"approvals_required": approvals, "rejections_required": rejections}
        if quorum != {name: getattr(payload, name) for name in quorum}:
            changes["payload"] = payload.model_copy(update=quorum)
    auto: Status | None = None
    if rule.auto == "reject":
        auto = Status.REJECTED
    elif rule.auto == "approve" and approvals == 1:
        auto = Status.APPROVED
    routed = request.model_copy(update=changes) if changes else request
    if isinstance(payload, ApprovalPayload) and "payload" in changes:
        changed = changes.pop("payload")
        for name in ("approvals_required", "rejections_required"):
            if getattr(changed, name) != getattr(payload, name):
                changes[name] = getattr(changed, name)
    return Routing(rule=rule.name, request=routed, changes=changes, auto=auto)
