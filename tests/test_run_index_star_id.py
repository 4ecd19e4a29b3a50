"""A run's bucket field says '*' for "see the run's set": a handoff stored under the id '*'
(``HandoffStore.create`` takes the id it is given) would be read as that mark and vanish from
its run. The store takes only handoff ids (``store.ids``)."""

from __future__ import annotations

import pytest
from redis import Redis

from store.ids import new_handoff_id
from store.models import HandoffRequest
from store.repository import HandoffStore, StoreConfig

REQUEST = HandoffRequest.model_validate(
    {
        "run_id": "run-star",
        "thread_id": "t",
        "request_type": "approval",
        "payload": {"kind": "approval", "action": {"name": "x", "args": {}}},
    }
)


@pytest.mark.parametrize("odd_id", ["*", "", "ho_lower", "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC:x"])
def test_a_handoff_under_an_id_that_is_no_handoff_id_is_refused(redis: Redis, odd_id: str) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="star"))
    with pytest.raises(ValueError, match="handoff id"):
        store.create(REQUEST, handoff_id=odd_id)
    assert redis.keys("star:*") == []


def test_a_runs_handoffs_stay_listed_whatever_order_they_come_in(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="star"))
    made = [store.create(REQUEST, handoff_id=new_handoff_id()).handoff.id for _ in range(2)]
    index = store.keys.pending_by_run("run-star")
    assert [h.id for h in store.list_pending(index).items] == sorted(made)
    assert store.count_pending(index) == 2
