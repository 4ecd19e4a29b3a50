"""Break-it checks of the compact layout (``store.keys``, 0.3) against what 0.2 wrote: what a
purge, an expiry or a read must still do when a handoff's lookups, deadlines or trail are
kept in both the new and the old places."""

from __future__ import annotations

import io
import json
import time

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
    assert store.looked_up("msglinks", [link]) == [handoff_id]
    assert redis.hget(store.keys.message_links_before, link) == handoff_id.encode()

    store.cancel(handoff_id, cancelled_by="U0ADMIN01", resume=False)
    time.sleep(0.01)
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)

    assert store.handoff_for_message(CHANNEL, TS) is None
    assert store.looked_up("msglinks", [link]) == [None]
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


def test_reading_the_stream_decodes_only_the_head_of_each_pending_request(
    redis: Redis,
) -> None:
    """An audit page names the 'created' event of hundreds of pending handoffs; putting back
    each one's detail decoded each request (up to 64 KiB) whole, which held Redis for about a
    millisecond a handoff (200 ms for a page of 200, every click waiting). Only the head is
    decoded now: a request whose tail no JSON parser would take (written by hand here) still
    reads back, which decoding it whole could not."""
    store = HandoffStore(redis)
    request = HandoffRequest.model_validate(
        {
            "run_id": "run-head",
            "thread_id": "t",
            "request_type": "approval",
            "payload": {"kind": "approval", "action": {"name": "x", "args": {"a": 1}}},
        }
    )
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id
    key = store.keys.handoff_body(handoff_id)
    fields = body_fields(redis.get(key))
    assert fields["request"].startswith(b'{"run_id":"run-head","thread_id":"t","request_type"')
    fields["request"] = fields["request"][:-1] + b',"tail": not JSON at all}'
    redis.set(key, body_string(fields))

    (line,) = store._trail_events([(handoff_id, 0)])
    assert AuditEvent.from_json(line, handoff_id).detail == {
        "run_id": "run-head",
        "request_type": "approval",
    }


def test_a_long_request_keeps_its_index_list_so_closing_it_decodes_nothing(
    redis: Redis,
) -> None:
    """Closing a handoff takes it out of its pending indexes; worked out from its request,
    that decoded up to 64 KiB of JSON in every decision, expiry and reassignment (an expiry
    sweep of 150 such handoffs held Redis about 3 times as long). A request over 4 KiB keeps
    its list: with the tail of its stored request made undecodable by hand, it still expires
    and leaves every index."""
    store = HandoffStore(redis)
    args = {"a": [{} for _ in range(2_000)]}
    handoff_id = store.create(
        HandoffRequest.model_validate(
            {
                "run_id": "run-long-list",
                "thread_id": "t",
                "request_type": "approval",
                "channel": "C0BIGREQS1",
                "reviewers": ["U0BIGREQS1"],
                "expires_in_seconds": 0.05,
                "payload": {"kind": "approval", "action": {"name": "x", "args": args}},
            }
        ),
        handoff_id=new_handoff_id(),
    ).handoff.id
    key = store.keys.handoff_body(handoff_id)
    fields = body_fields(redis.get(key))
    assert "indexes" in fields
    fields["request"] = fields["request"][:-1] + b',"tail": not JSON at all}'
    redis.set(key, body_string(fields))
    time.sleep(0.1)

    assert store.expire_due() == [handoff_id]
    assert store.count_pending() == 0
    assert store.index_size(store.keys.pending_by_run("run-long-list")) == 0
    assert not list(redis.scan_iter(match=store.keys.prefix + "pending:*"))
