"""Routing policies: rules, in a TOML or YAML file (``HANDOFF_POLICY_FILE``), that route
each new handoff to a channel and reviewers, raise the approvals it needs, set its timers,
or decide it at once. The store applies them on every create (``HandoffStore.create``),
so the Python client, the HTTP API, MCP and HumanLayer are all routed alike.

See docs/policies.md for the file format and how a rule combines with what an agent passed.
"""

from store.policies.conditions import (
    CONDITION_VARIABLES,
    Bindings,
    Condition,
    ConditionError,
    ConditionResult,
)
from store.policies.cost import CONDITION_BUDGET
from store.policies.loading import PolicyError, load_policy, parse_policy
from store.policies.model import Match, PolicyFile, Rule, RuleSettings
from store.policies.routing import (
    POLICY_ACTOR_PREFIX,
    Routing,
    RoutingPolicy,
    RuleVerdict,
    apply_rule,
    decided_by_policy,
    policy_actor,
    request_variables,
)

__all__ = [
    "CONDITION_BUDGET",
    "CONDITION_VARIABLES",
    "POLICY_ACTOR_PREFIX",
    "Bindings",
    "Condition",
    "ConditionError",
    "ConditionResult",
    "Match",
    "PolicyError",
    "PolicyFile",
    "Routing",
    "RoutingPolicy",
    "Rule",
    "RuleSettings",
    "RuleVerdict",
    "apply_rule",
    "decided_by_policy",
    "load_policy",
    "parse_policy",
    "policy_actor",
    "request_variables",
]
