"""Break-it checks of the compact layout (``store.keys``, 0.3) against what 0.2 wrote: what a
purge, an expiry or a read must still do when a handoff's lookups, deadlines or trail are
kept in both the new and the old places."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable

import pytest
from redis import Redis

from bot.queries.audit_export import export_audit
from store.exceptions import HandoffNotFound
from store.ids import new_handoff_id
from store.keys import body_fields, body_string
from store.models import AuditEvent, HandoffRequest
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.test_storage_compact import CHANNEL, TS, write_previous_shape


def test_a_message_link_kept_in_both_its_bucket_and_the_old_hash_goes_with_the_purge(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """A 0.2 handoff's message was linked in ``{ns}:msgs``; after the upgrade the same message
    is linked again, in its bucket (a delivery or escalation attempt that finds the post an
    attempt before it made, its answer lost, links it again: ``worker.jobs``). The purge
    must remove the link from both places, not stop at the first."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-both-links")
    store.link_message(handoff_id, CHANNEL, TS)  # linked again by 0.3, same message
    link = f"{CHANNEL}:{TS}"
    assert redis.hget(store.keys.message_links(link), link) == handoff_id.encode()
    assert redis.hget(store.keys.message_links_before, link) == handoff_id.encode()

    store.cancel(handoff_id, cancelled_by="U0ADMIN01", resume=False)
    time.sleep(0.01)
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)

    assert store.handoff_for_message(CHANNEL, TS) is None
    assert redis.hget(store.keys.message_links(link), link) is None
    assert redis.hget(store.keys.message_links_before, link) is None


RUN_IDS = [
    'run,"request_type":"question"',  # the head's end, inside the run id (escaped there)
    "ends in a backslash \\",
    '{"run_id":"inner"}',
    "line\nbreak \u2028 \u00fc \U0001f600 / \x00",
    '"created"]',
]


@pytest.mark.parametrize("run_id", RUN_IDS)
def test_the_created_event_of_an_odd_run_id_reads_back_with_its_run_and_type(
    redis: Redis, run_id: str
) -> None:
    """The 'created' event's detail is put back from the request's head (only it is
    decoded): an odd run id, and a request type named again in the metadata and the
    arguments, read back as they were created, in the handoff's trail and in the stream."""
    store = HandoffStore(redis)
    request = HandoffRequest.model_validate(
        {
            "run_id": run_id,
            "thread_id": 't,"request_type":"question"',
            "request_type": "approval",
            "payload": {
                "kind": "approval",
                "action": {"name": "x", "args": {"request_type": "question", "run_id": "no"}},
            },
            "metadata": {"request_type": "question", "run_id": "no"},
        }
    )
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id
    expected = {"run_id": run_id, "request_type": "approval"}

    assert store.audit_trail(handoff_id)[0].detail == expected
    (created,) = [e for e in store.global_audit() if e.handoff_id == handoff_id]
    assert (created.event, created.detail) == ("created", expected)
    exported = io.StringIO()
    assert export_audit(store, exported, run_id=run_id) == 1
    assert json.loads(exported.getvalue())["detail"] == expected


def test_reading_the_stream_does_not_decode_each_pending_request_whole(redis: Redis) -> None:
    """An audit page names the 'created' event of hundreds of pending handoffs; putting back
    each one's detail must not decode each request (up to 64 KiB) whole: that held Redis for
    about a millisecond a handoff (200 ms for 200, every click waiting), against about
    0.2 ms for reading the bodies at all. Timed against a script that reads the same bodies."""
    store = HandoffStore(redis)
    args = {"a": [0] * 31_000}  # about 62 KB of JSON, many values: costly to decode
    ids = [
        store.create(
            HandoffRequest.model_validate(
                {
                    "run_id": f"run-big-{n}",
                    "thread_id": "t",
                    "request_type": "approval",
                    "payload": {"kind": "approval", "action": {"name": "x", "args": args}},
                }
            ),
            handoff_id=new_handoff_id(),
        ).handoff.id
        for n in range(200)
    ]
    bodies = [store.keys.handoff_body(handoff_id) for handoff_id in ids]
    read_bodies = (
        "local n = 0 for _, k in ipairs(KEYS) do local b = redis.call('GET', k) "
        "n = n + #string.sub(b, 2, -2) + (string.find(b, '[', 1, true) or 0) end return n"
    )

    def best_of_three(call: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    baseline = best_of_three(lambda: redis.eval(read_bodies, len(bodies), *bodies))
    trail = best_of_three(lambda: store._trail_events([(i, 0) for i in ids]))

    assert trail < 3 * baseline + 0.02, (trail, baseline)
    assert AuditEvent.from_json(store._trail_events([(ids[7], 0)])[0], ids[7]).detail == {
        "run_id": "run-big-7",
        "request_type": "approval",
    }


def _big_pending(store: HandoffStore, count: int, run: str) -> list[str]:
    """Pending approvals of about 60 KB of JSON each, costly to decode, expiring at once."""
    args = {"a": [{} for _ in range(20_000)]}
    return [
        store.create(
            HandoffRequest.model_validate(
                {
                    "run_id": f"{run}-{n}",
                    "thread_id": "t",
                    "request_type": "approval",
                    "channel": "C0BIGREQS1",
                    "reviewers": ["U0BIGREQS1"],
                    "expires_in_seconds": 0.5,
                    "payload": {"kind": "approval", "action": {"name": "x", "args": args}},
                }
            ),
            handoff_id=new_handoff_id(),
        ).handoff.id
        for n in range(count)
    ]


def test_expiring_long_requests_does_not_decode_each_one_to_find_its_indexes(
    redis: Redis,
) -> None:
    """Closing a handoff takes it out of its pending indexes; worked out from its request,
    that decoded up to 64 KiB of JSON in every decision, expiry and reassignment (an expiry
    sweep of 150 such handoffs held Redis about 3 times as long as with their index list
    kept). Timed against the same handoffs with their list in the body, as 0.2 kept it."""
    fast = HandoffStore(redis, StoreConfig(namespace="withlist"))
    plain = HandoffStore(redis, StoreConfig(namespace="asmade"))
    listed = _big_pending(fast, 150, "listed")
    _big_pending(plain, 150, "made")
    for handoff_id in listed:
        key = fast.keys.handoff_body(handoff_id)
        fields = body_fields(redis.get(key))
        if "indexes" not in fields:
            run = fast.get(handoff_id).run_id
            names = [":run:" + run, ":type:approval", ":channel:C0BIGREQS1", ":reviewer:U0BIGREQS1"]
            fields["indexes"] = json.dumps(names, separators=(",", ":")).encode()
            redis.set(key, body_string(fields))
    time.sleep(0.6)

    def timed(store: HandoffStore) -> float:
        start = time.perf_counter()
        assert len(store.expire_due(limit=500)) == 150
        return time.perf_counter() - start

    with_list, as_made = timed(fast), timed(plain)

    assert as_made < 1.8 * with_list + 0.02, (as_made, with_list)
    for store in (fast, plain):
        assert store.count_pending() == 0
        assert not list(redis.scan_iter(match=store.keys.prefix + "pending:*"))
