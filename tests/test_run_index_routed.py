"""Handoffs a routing policy changed at creation (another channel and reviewers, two
approvals, an expiry; or a decision at once) in a run's index: listed while pending, gone
once decided, from every index the rule put them in; posted where the rule routed them; the
run resumed once."""

from __future__ import annotations

from pathlib import Path

from redis import Redis

from store.ids import new_handoff_id
from store.models import HandoffRequest, Status, TaskKind, TaskState
from store.policies import load_policy
from store.repository import HandoffStore, StoreConfig
from tests.support.indexes import anything_pending, indexed_under

REFUNDS = Path(__file__).parent / "fixtures" / "policies" / "refunds.yaml"
RUN = "run routed"


def _refund(amount: int) -> HandoffRequest:
    return HandoffRequest.model_validate(
        {
            "run_id": RUN,
            "thread_id": "t",
            "request_type": "approval",
            "payload": {
                "kind": "approval",
                "action": {"name": "issue_refund", "args": {"order_id": "A-1", "amount": amount}},
            },
            "channel": "C0AGENT",
            "reviewers": ["U0AGENT"],
            "resume_target": "tests.support.resume_targets:record",
        }
    )


def test_routed_handoffs_come_and_go_from_their_runs_index(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="routed", policy=load_policy(REFUNDS)))
    index = store.keys.pending_by_run(RUN)
    small = store.create(_refund(20), handoff_id=new_handoff_id()).handoff
    assert small.status is Status.APPROVED
    assert store.get(small.id).resume.state is TaskState.QUEUED
    assert indexed_under(redis, store.keys, small.id) == set()
    assert store.count_pending(index) == 0

    large = store.create(_refund(900), handoff_id=new_handoff_id()).handoff
    assert indexed_under(redis, store.keys, large.id) == {
        index,
        store.keys.pending_by_type("approval"),
        store.keys.pending_by_channel("C0FINANCE"),
        store.keys.pending_by_reviewer("S0FINANCE"),
    }
    assert [h.id for h in store.list_pending(index).items] == [large.id]
    start = store.begin_task(large.id, TaskKind.DELIVER, run_token="t1")
    assert start.handoff is not None and start.handoff.channel == "C0FINANCE"
    assert redis.hget(store.keys.handoff(large.id), "deliver_route") is None

    store.decide(large.id, Status.APPROVED, decided_by="U0ONE")
    assert store.get(large.id).is_pending
    assert store.count_pending(index) == 1
    store.decide(large.id, Status.APPROVED, decided_by="U0TWO")
    decided = store.get(large.id)
    assert decided.status is Status.APPROVED and decided.resume.state is TaskState.QUEUED
    assert anything_pending(redis, store.keys) == []
    assert store.list_pending(index).items == []
