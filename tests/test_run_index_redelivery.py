"""A handoff that could not be delivered leaves its run's index (bucket field or set), and its
redelivery joins it again, with the expiry the request asked for (kept in the hash only)."""

from __future__ import annotations

import pytest
from redis import Redis

from store.ids import new_handoff_id
from store.models import HandoffRequest, Status, TaskKind
from store.repository import HandoffStore, StoreConfig
from tests.support.indexes import anything_pending, indexed_under


def _request(run: str, seconds: float) -> HandoffRequest:
    return HandoffRequest.model_validate(
        {
            "run_id": run,
            "thread_id": "t",
            "request_type": "approval",
            "payload": {"kind": "approval", "action": {"name": "x", "args": {}}},
            "channel": "C0FIRST",
            "resume_target": "tests.support.resume_targets:record",
            "expires_in_seconds": seconds,
        }
    )


def _undeliverable(store: HandoffStore, handoff_id: str) -> None:
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=new_handoff_id())
    verdict = store.finish_task(
        handoff_id, TaskKind.DELIVER, attempt=start.attempt, error="gone", permanent=True
    )
    assert verdict == "undeliverable"


@pytest.mark.parametrize("others", [0, 1, 2])
@pytest.mark.parametrize("seconds", [3600, 0.7, 1.001, 86400 * 3650])
def test_an_undelivered_handoff_leaves_its_run_and_its_redelivery_joins_it(
    redis: Redis, others: int, seconds: float
) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="redel"))
    run = "run redelivered ü"
    index = store.keys.pending_by_run(run)
    first = store.create(_request(run, seconds), handoff_id=new_handoff_id()).handoff
    rest = [
        store.create(_request(run, 60), handoff_id=new_handoff_id()).handoff.id
        for _ in range(others)
    ]
    _undeliverable(store, first.id)
    gone = store.get(first.id)
    assert gone.status is Status.UNDELIVERABLE and gone.resume.state.value == "queued"
    assert indexed_under(redis, store.keys, first.id) == set()
    assert [h.id for h in store.list_pending(index).items] == rest
    assert store.count_pending(index) == others

    again = store.redeliver(first.id, by="U0ADMIN", channel="C0AGAIN").handoff
    assert again.is_pending and again.channel == "C0AGAIN"
    lasted = (again.expires_at - again.created_at).total_seconds()  # type: ignore[operator]
    asked = (first.expires_at - first.created_at).total_seconds()  # type: ignore[operator]
    assert lasted == asked
    assert [h.id for h in store.list_pending(index).items] == sorted([*rest, again.id])
    assert store.count_pending(index) == others + 1
    assert store.redeliver(first.id, by="U0ADMIN").handoff.id == again.id  # once

    for handoff_id in [*rest, again.id]:
        store.cancel(handoff_id, cancelled_by="U0ADMIN")
    assert anything_pending(redis, store.keys) == []
