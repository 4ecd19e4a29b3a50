"""Two task policies whose SHA-1s share their first 8 hex digits (found by a birthday search:
reminders every 3,328 and every 32,924 minutes) are each kept and read as their own: the
second is named by its whole digest (``intern_policy`` in ``store.scripts``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from redis import Redis

from store.ids import new_handoff_id
from store.models import HandoffRequest
from store.repository import HandoffStore, StoreConfig
from tests.support.policies import task_policy

BASE = task_policy(attempts=3, timeout=5, backoff=(0.1, 0.5), lease_grace=0.5)
REQUEST = HandoffRequest.model_validate(
    {
        "run_id": "r",
        "thread_id": "t",
        "request_type": "approval",
        "payload": {"kind": "approval", "action": {"name": "x", "args": {}}},
    }
)


def test_two_policies_sharing_a_short_name_each_keep_their_own(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="coll"))
    first, second = (
        replace(BASE, remind_after_seconds=m * 60, max_reminders=1) for m in (3328, 32924)
    )
    jsons = [p.for_request(REQUEST).as_script_arg() for p in (first, second)]
    digests = [hashlib.sha1(j.encode()).hexdigest() for j in jsons]
    assert digests[0][:8] == digests[1][:8] and jsons[0] != jsons[1]
    made = [
        store.create(REQUEST, handoff_id=new_handoff_id(), tasks=tasks).handoff.id
        for tasks in (first, second, first, second)
    ]
    for handoff_id, tasks in zip(made, (first, second, first, second), strict=True):
        (raw,) = store.stored_fields(handoff_id, "policy")
        assert raw is not None
        assert json.loads(raw) == json.loads(tasks.for_request(REQUEST).as_script_arg())
        outbox = store.keys.outbox
        at = redis.zscore(outbox, f"remind:{handoff_id}")
        created = store.get(handoff_id).created_at.timestamp() * 1000
        assert at is not None and round(at - created) == int(tasks.remind_after_seconds * 1000)
    names = {redis.hget(store.keys.handoff(i), "policy") for i in made}
    assert names == {b"@" + digests[0][:8].encode(), b"@" + digests[1].encode()}
