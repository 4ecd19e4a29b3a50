"""Routing policies (store.policies): loading, matching, how a rule combines with what the
agent passed, safe conditions, and the store applying them on create (real Redis)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from store.exceptions import ConditionTooCostly, InvalidHandoffRequest, PayloadTooLarge
from store.models import HandoffRequest, RequestType, Status, TaskState
from store.policies import (
    CONDITION_BUDGET,
    CONDITION_VARIABLES,
    Condition,
    ConditionError,
    PolicyError,
    load_policy,
    parse_policy,
    request_variables,
)
from store.repository import StoreConfig
from store.settings import StoreSettings
from worker.client import Handoffs

FIXTURES = Path(__file__).parent / "fixtures" / "policies"
REFUNDS = FIXTURES / "refunds.yaml"


def _refund(amount: Any, **fields: Any) -> HandoffRequest:
    payload = {"kind": "approval", "action": {"name": "issue_refund", "args": {"amount": amount}}}
    payload.update(fields.pop("payload", {}))
    return HandoffRequest(
        run_id="r", thread_id="t", request_type=RequestType.APPROVAL, payload=payload, **fields
    )


def test_a_large_refund_is_routed_to_the_finance_group_with_two_approvals() -> None:
    routing = load_policy(REFUNDS).route(_refund(900))
    assert routing is not None and routing.rule == "large-refunds"
    assert routing.auto is None
    routed = routing.request
    assert routed.channel == "C0FINANCE" and routed.reviewers == ["S0FINANCE"]
    assert routed.payload.approvals_required == 2  # type: ignore[union-attr]
    assert routed.requester_may_approve is False
    assert routed.expires_in_seconds == 2 * 86400


def test_a_small_refund_is_approved_at_once_by_its_rule() -> None:
    routing = load_policy(REFUNDS).route(_refund(20))
    assert routing is not None and routing.auto is Status.APPROVED
    assert routing.decided_by == "policy:small-refunds"


def test_a_request_no_rule_matches_falls_through_to_the_defaults() -> None:
    assert load_policy(REFUNDS).route(_refund(200)) is None


def test_the_rules_routing_replaces_the_agents_channel_and_reviewers() -> None:
    routing = load_policy(REFUNDS).route(_refund(900, channel="C0OTHER", reviewers=["U0BOB"]))
    assert routing is not None
    assert (routing.request.channel, routing.request.reviewers) == ("C0FINANCE", ["S0FINANCE"])


def test_a_policy_raises_the_approvals_required_but_never_lowers_them() -> None:
    routing = load_policy(REFUNDS).route(_refund(900, payload={"approvals_required": 3}))
    assert routing is not None
    assert routing.request.payload.approvals_required == 3  # type: ignore[union-attr]
    assert "approvals_required" not in routing.changes


def test_the_agents_own_timer_is_kept_and_the_rules_fills_in_the_others() -> None:
    routing = load_policy(REFUNDS).route(_refund(900, expires_in_seconds=60))
    assert routing is not None
    assert routing.request.expires_in_seconds == 60
    assert routing.request.escalate_after_seconds == 4 * 3600


def test_auto_approve_never_decides_an_approval_the_agent_asked_two_people_for() -> None:
    routing = load_policy(REFUNDS).route(_refund(20, payload={"approvals_required": 2}))
    assert routing is not None and routing.rule == "small-refunds"
    assert routing.auto is None


def test_a_rule_matches_on_metadata_and_rejects_at_once() -> None:
    request = HandoffRequest(
        run_id="r",
        thread_id="t",
        request_type=RequestType.APPROVAL,
        payload={"kind": "approval", "action": {"name": "drop_table", "args": {}}},
        metadata={"environment": "production"},
    )
    routing = load_policy(REFUNDS).route(request)
    assert routing is not None and routing.auto is Status.REJECTED
    staging = request.model_copy(update={"metadata": {"environment": "staging"}})
    assert load_policy(REFUNDS).route(staging) is None


def test_a_condition_that_cannot_be_evaluated_does_not_match() -> None:
    # A string amount cannot be compared with 500: neither refund rule matches.
    assert load_policy(REFUNDS).route(_refund("lots")) is None


def test_an_invalid_policy_file_names_the_rule_and_the_field() -> None:
    with pytest.raises(PolicyError) as raised:
        load_policy(FIXTURES / "invalid.toml")
    problems = raised.value.problems
    assert "rule 'large-refunds' (rules[0]): match.when: not a CEL expression" in problems[0]
    assert any("set.approvals_required: Input should be greater than" in p for p in problems)
    assert any("set.reviewer: Extra inputs are not permitted" in p for p in problems)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("rules:\n  - name: a\n  - name: a\n", "two rules are named 'a'"),
        ("rules:\n  - name: free\n    auto: approve\n", "auto: approve decides approvals only"),
        ("rules:\n  - name: x\n    set: {expires_in: soon}\n", "set.expires_in: 'soon'"),
        ("rules:\n  - name: x\n    set: {channel: general}\n", "set.channel:"),
        ("rules: [", "not valid YAML"),
    ],
)
def test_each_kind_of_bad_rule_is_refused_with_its_reason(text: str, named: str) -> None:
    with pytest.raises(PolicyError, match=named.replace("[", r"\[")):
        parse_policy(text, source="policy.yaml")


def test_settings_refuse_an_invalid_policy_file_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_POLICY_FILE", str(FIXTURES / "invalid.toml"))
    with pytest.raises(PolicyError, match="rule 'large-refunds'"):
        StoreSettings.from_env(redis_url="redis://127.0.0.1:6379/9").store_config()
    with pytest.raises(PolicyError):
        Handoffs.from_url("redis://127.0.0.1:6379/9")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
_CEL_PIECES = st.sampled_from(
    ["args", ".", "amount", "x", " ", ">", "<=", "==", "!", "&&", "||", "(", ")", "[", "]",
     "0", "1.5", "'s'", '"', "size(", "has(", ".all(i, ", "1/0", "-", "+", "*", "%", ",",
     "matches(", "in", "null", "true", "{", "}", ":", "int(", "double(", "metadata"]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_CEL_PIECES, max_size=12), args=st.dictionaries(st.text(max_size=6), _JSON))
def test_fuzzed_conditions_never_raise_out_of_the_evaluator(
    pieces: list[str], args: dict[str, Any]
) -> None:
    try:
        condition = Condition("".join(pieces) or "true")
    except ConditionError:
        return
    assert condition.matches({"args": args, "metadata": args}) in (True, False)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), amount=_JSON)
def test_any_text_is_a_condition_or_a_condition_error(text: str, amount: Any) -> None:
    try:
        condition = Condition(text)
    except ConditionError:
        return
    assert condition.matches({"args": {"amount": amount}}) in (True, False)


# -- the store applies the policy on every create (real Redis) ---------------------------


@pytest.fixture
def routed(redis: Redis) -> Handoffs:
    return Handoffs(redis, policy=load_policy(REFUNDS))


def test_the_store_keeps_a_routed_request_as_the_rule_made_it(routed: Handoffs) -> None:
    created = routed.request_approval(
        run_id="r", thread_id="t", action="issue_refund", args={"amount": 900}, channel="C0OTHER"
    )
    stored = routed.get(created.id)
    assert (stored.channel, stored.reviewers) == ("C0FINANCE", ["S0FINANCE"])
    assert stored.payload.approvals_required == 2  # type: ignore[union-attr]
    assert stored.is_pending and stored.requester_may_approve is False
    routed_event = [e for e in routed.store.audit_trail(created.id) if e.event == "routed"]
    assert routed_event[0].actor == "policy:large-refunds"
    assert routed_event[0].detail["set"]["approvals_required"] == 2


def test_an_auto_approved_handoff_is_decided_audited_and_resumed_once(
    routed: Handoffs, redis: Redis
) -> None:
    created = routed.request_approval(
        run_id="r",
        thread_id="t",
        action="issue_refund",
        args={"amount": 20},
        resume="tests.support.resume_targets:record",
    )
    assert created.status is Status.APPROVED
    assert created.resume_data is not None
    assert created.resume_data.decided_by == "policy:small-refunds"
    assert created.resume_data.via == "policy"
    events = [(e.event, e.actor) for e in routed.store.audit_trail(created.id)]
    assert events == [
        ("created", "agent"),
        ("routed", "policy:small-refunds"),
        ("decided", "policy:small-refunds"),
    ]
    assert created.resume.state is TaskState.QUEUED
    # Its one resume is queued with the decision, never pending in between.
    outbox = [m.decode() for m in redis.zrange(routed.store.keys.outbox, 0, -1)]
    assert outbox.count(f"resume:{created.id}") == 1


def test_an_idempotent_resend_of_an_auto_decided_request_returns_the_first(
    routed: Handoffs,
) -> None:
    first = routed.request_approval(
        run_id="r", thread_id="t", action="issue_refund", args={"amount": 20}, idempotency_key="k"
    )
    again = routed.request_approval(
        run_id="r", thread_id="t", action="issue_refund", args={"amount": 20}, idempotency_key="k"
    )
    assert again.id == first.id and again.status is Status.APPROVED
    decided = [e for e in routed.store.audit_trail(first.id) if e.event == "decided"]
    assert len(decided) == 1


def test_a_request_without_a_matching_rule_is_stored_as_sent(routed: Handoffs) -> None:
    created = routed.request_approval(
        run_id="r", thread_id="t", action="issue_refund", args={"amount": 200}
    )
    assert created.is_pending and created.channel is None
    assert [e.event for e in routed.store.audit_trail(created.id)] == ["created"]


def test_store_config_carries_the_policy_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_POLICY_FILE", str(REFUNDS))
    config: StoreConfig = StoreSettings.from_env(redis_url="redis://x:1/9").store_config()
    assert config.policy is not None and config.policy.rules[0].name == "large-refunds"


# -- what a condition may cost (a budget of steps per request) ---------------------------

_REQUEST = {
    "request_type": "approval",
    "action": "pay_batch",
    "agent": "billing-bot",
    "requester": "U0ALICE",
    "channel": "",
    "metadata": {"environment": "production"},
    "context": "",
    "api_key": "",
}
_SKUS = [f"S-{i}" for i in range(50)]
_PAYMENTS = [{"payee": f"acct-{i:06d}", "amount": i % 2000, "currency": "EUR"} for i in range(1000)]


@pytest.mark.parametrize(
    ("text", "args", "at_most"),
    [
        ("args.amount > 500", {"amount": 900}, 100),
        ('has(args.currency) && args.currency == "EUR"', {"currency": "EUR"}, 100),
        ('action.startsWith("pay") || size(args.ids) > 10', {"ids": list(range(100))}, 200),
        ("args.payments.exists(p, p.amount > 5000)", {"payments": _PAYMENTS}, 35_000),
        (
            'args.payments.all(p, p.currency == "EUR" && p.amount < 5000)',
            {"payments": _PAYMENTS},
            55_000,
        ),
        (
            "args.items.all(i, i.sku in args.allowed)",
            {"items": [{"sku": f"S-{i % 40}"} for i in range(200)], "allowed": _SKUS},
            20_000,
        ),
    ],
)
def test_realistic_conditions_fit_the_budget_with_room_and_always_cost_the_same(
    text: str, args: dict[str, Any], at_most: int
) -> None:
    condition = Condition(text)
    first = condition.evaluate({**_REQUEST, "args": args})
    again = condition.evaluate({**_REQUEST, "args": args})
    assert not first.too_costly and not first.problem
    assert first.steps == again.steps <= at_most <= CONDITION_BUDGET * 0.55


_IDS = [1] * 21_000  # 63 KB of arguments, within the payload limit


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("args.ids.exists(i, i < 0)", {"ids": _IDS}),  # 8.5 s of CPU before the budget
        ("args.ids.exists(i, i in args.ids)", {"ids": list(range(10_000))}),  # quadratic
        ("args.ids.exists(i, args.ids == args.ids)", {"ids": _IDS}),
        ("args.ids.exists(i, size(string(args)) < 0)", {"ids": _IDS}),
        ("args.big.exists(i, args.pair == args.pair)", {"big": [1] * 16_000,
                                                         "pair": [[1] * 4000, [1] * 4000]}),
        # Each map doubles the string: 2**20 times 60 KB, were it not charged before it ran.
        ("[args.s + args.s]" + ".map(x, x + x)" * 20 + "[0].size() > 0", {"s": "a" * 60_000}),
    ],
)  # fmt: skip
def test_a_costly_condition_runs_out_of_budget_soon_instead_of_running_on(
    text: str, args: dict[str, Any]
) -> None:
    started = time.monotonic()
    result = Condition(text).evaluate({**_REQUEST, "args": args})
    assert result.too_costly and not result.holds
    assert time.monotonic() - started < 15  # bounded: minutes, or memory, without a budget


def test_a_request_whose_condition_runs_out_is_refused_not_routed_past_the_rule(
    redis: Redis,
) -> None:
    policy = parse_policy(
        """
rules:
  - name: bulk-deletes
    match: {action: "delete_*", when: "args.ids.exists(i, i < 0)"}
    auto: reject
  - name: everything-else
    match: {request_type: approval}
    auto: approve
""",
        source="policy.yaml",
    )
    client = Handoffs(redis, policy=policy)
    with pytest.raises(
        ConditionTooCostly, match="routing condition of rule 'bulk-deletes'"
    ) as raised:
        client.request_approval(run_id="r", thread_id="t", action="delete_rows", args={"ids": _IDS})
    assert isinstance(raised.value, InvalidHandoffRequest)  # the API answers 422
    assert "too costly for these arguments" in str(raised.value)
    assert redis.dbsize() == 0  # nothing written
    # The same rule on a list it can afford decides as the policy says.
    small = client.request_approval(
        run_id="r", thread_id="t", action="delete_rows", args={"ids": [1, -1]}
    )
    assert small.status is Status.REJECTED


def test_the_conditions_of_one_request_share_one_budget() -> None:
    # Each alone fits; the two rules together do not, so the second is refused.
    text = "args.ids.exists(i, i < 0)"
    policy = parse_policy(
        f'rules:\n  - name: one\n    match: {{when: "{text}"}}\n    auto: reject\n'
        f'  - name: two\n    match: {{when: "{text}"}}\n    auto: reject\n',
        source="policy.yaml",
    )
    alone = Condition(text).evaluate({**_REQUEST, "args": {"ids": [1] * 2500}})
    assert not alone.too_costly and alone.steps > CONDITION_BUDGET / 2
    verdicts = policy.verdicts(
        _refund(0, payload={"action": {"name": "x", "args": {"ids": [1] * 2500}}})
    )
    assert [(v.rule, v.too_costly) for v in verdicts] == [("one", False), ("two", True)]


def test_an_oversized_request_is_refused_before_any_condition_runs(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluated: list[str] = []
    original = Condition.evaluate

    def recording(self: Condition, variables: Any) -> Any:
        evaluated.append(self.text)
        return original(self, variables)

    monkeypatch.setattr(Condition, "evaluate", recording)
    client = Handoffs(redis, policy=load_policy(REFUNDS))
    with pytest.raises(PayloadTooLarge):
        client.request_approval(
            run_id="r",
            thread_id="t",
            action="issue_refund",
            args={"amount": 900, "pad": "x" * 70_000},
        )
    assert evaluated == []
    client.request_approval(run_id="r", thread_id="t", action="issue_refund", args={"amount": 900})
    assert evaluated == ["args.amount > 500"]


@pytest.mark.parametrize(
    "text",
    [
        "args.payments.exists(p, args.payments.filter(q, q.payee == p.payee).size() > 1)",
        "args.a.all(x, args.b.exists(y, x == y))",
        "args.a.map(x, args.b.min()).size() > 0",
    ],
)
def test_a_macro_nested_in_another_macros_body_is_refused_at_load(text: str) -> None:
    with pytest.raises(ConditionError, match=r"inside the body of .*costs the product"):
        Condition(text)


def test_macros_one_after_another_are_not_nested() -> None:
    condition = Condition("args.a.filter(x, x > 1).exists(y, y > 2) && args.b.all(z, z > 0)")
    assert condition.matches({"args": {"a": [1, 3], "b": [1]}})


# -- conditions name only what they are given --------------------------------------------


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("action.startswith('issue')", "unknown method .startswith() (did you mean 'startsWith'?)"),
        ("arg.amount > 500", "unknown variable 'arg' (did you mean 'args'?)"),
        ("sise(args.ids) > 1", "unknown function sise() (did you mean 'size'?)"),
        ("args.ids.exists(i, j > 0)", "unknown variable 'j'"),
        ("args.ids.all(1, true)", ".all() takes a variable name first"),
    ],
)
def test_a_typo_in_a_condition_is_refused_at_load_naming_rule_field_and_a_suggestion(
    text: str, named: str
) -> None:
    source = f'rules:\n  - name: large-refunds\n    match: {{when: "{text}"}}\n    auto: reject\n'
    with pytest.raises(PolicyError) as raised:
        parse_policy(source, source="policy.yaml")
    [problem] = raised.value.problems
    assert problem.startswith("rule 'large-refunds' (rules[0]): match.when: ")
    assert named in problem


def test_macro_variables_type_names_and_every_variable_are_known() -> None:
    condition = Condition(
        "args.ids.all(i, i > 0) && type(args.n) == int && [1, 2].reduce(r, i, 0, r + i) == 3"
        " && api_key == '' && request_type == 'approval' && size(context) == 0"
    )
    assert condition.evaluate({**_REQUEST, "args": {"ids": [1, 2], "n": 3}}).holds
    assert set(request_variables(_refund(1))) == set(CONDITION_VARIABLES)


def test_a_condition_that_cannot_be_evaluated_says_why() -> None:
    result = Condition("args.amount > 500").evaluate({**_REQUEST, "args": {"amount": "lots"}})
    assert not result.holds and not result.too_costly
    assert "no matching overload" in result.problem
    verdicts = load_policy(REFUNDS).verdicts(_refund("lots"))
    assert verdicts[0].reason.startswith("when: args.amount > 500 could not be evaluated (")


# -- the file: duplicate keys, deep nesting ----------------------------------------------


def test_a_key_given_twice_in_a_yaml_mapping_is_refused_with_its_lines() -> None:
    text = """rules:
  - name: small-refunds
    match:
      action: "issue_refund*"
      when: "args.amount <= 50"
    auto: approve
    match:
      request_type: approval
"""
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="policy.yaml")
    [problem] = raised.value.problems
    assert problem.startswith("not valid YAML: line 7: the key 'match' is given twice")
    assert "(first on line 3)" in problem
    assert str(raised.value).startswith("policy file policy.yaml: ")


def test_yaml_merge_keys_may_still_be_overridden() -> None:
    text = """rules:
  - name: large-refunds
    set: &finance {channel: C0FINANCE, approvals_required: 2}
  - name: huge-refunds
    set:
      <<: *finance
      approvals_required: 3
"""
    parsed = parse_policy(text, source="p.yaml")
    assert parsed.rules[1].set.approvals_required == 3
    assert parsed.rules[1].set.channel == "C0FINANCE"


def test_toml_refuses_a_key_given_twice_itself() -> None:
    text = '[[rules]]\nname = "a"\nauto = "reject"\nauto = "reject"\n'
    with pytest.raises(PolicyError, match="not valid TOML"):
        parse_policy(text, source="policy.toml")


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ("rules: " + "[" * 5000, "policy.yaml"),
        ("rules = " + "[" * 5000, "policy.toml"),
        ("rules: " + "[" * 60 + "]" * 60, "policy.yaml"),
    ],
)
def test_a_deeply_nested_file_is_a_policy_error_not_a_recursion_error(
    text: str, source: str
) -> None:
    with pytest.raises(PolicyError, match="nested"):
        parse_policy(text, source=source)


# -- the veto, and the API key ------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "rule", "stored"),
    [(25, None, 1), (25, 3, 3), (2, 3, 2), (1, None, 1)],
)
def test_a_matching_rule_keeps_the_veto_unless_it_sets_rejections_itself(
    agent: int, rule: int | None, stored: int
) -> None:
    setting = f"\n      rejections_required: {rule}" if rule else ""
    policy = parse_policy(
        "rules:\n  - name: refunds\n    match: {action: issue_refund}\n"
        f"    set:\n      approvals_required: 2{setting}\n",
        source="policy.yaml",
    )
    routing = policy.route(_refund(900, payload={"rejections_required": agent}))
    assert routing is not None
    assert routing.request.payload.rejections_required == stored  # type: ignore[union-attr]
    assert routing.changes.get("rejections_required", agent) == stored


def test_a_finance_reviewers_rejection_still_rejects_when_the_agent_asked_for_25(
    redis: Redis,
) -> None:
    client = Handoffs(redis, policy=load_policy(REFUNDS))
    created = client.request_approval(
        run_id="r",
        thread_id="t",
        action="issue_refund",
        args={"amount": 9000},
        rejections_required=25,
    )
    assert created.payload.rejections_required == 1  # type: ignore[union-attr]
    decided = client.store.decide(created.id, "rejected", decided_by="U0FIN1", comment="fraud")
    assert decided.status is Status.REJECTED
    routed = [e for e in client.store.audit_trail(created.id) if e.event == "routed"]
    assert routed[0].detail["set"]["rejections_required"] == 1


def test_a_rule_can_match_the_api_key_that_created_the_request() -> None:
    policy = parse_policy(
        "rules:\n  - name: billing\n    match: {api_key: billing-*, action: issue_refund}\n"
        "    auto: approve\n  - name: by-condition\n    match: {when: \"api_key == 'ops'\"}\n"
        "    auto: reject\n",
        source="policy.yaml",
    )
    assert policy.route(_refund(20, api_key="billing-bot")).rule == "billing"  # type: ignore[union-attr]
    assert policy.route(_refund(20, api_key="ops")).rule == "by-condition"  # type: ignore[union-attr]
    assert policy.route(_refund(20)) is None  # the Python client: no key
