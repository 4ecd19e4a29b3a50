"""The storage layout of a handoff (``store.keys``): short fields in a hash Redis keeps as a
listpack, the long ones in the handoff's body, the task policy stored once; and records
written in the previous shape (everything in the hash, the policy's JSON in each, audit
events naming their handoff) still read, decided, reassigned, resumed and purged."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis import Redis

from store.canonical import action_digest
from store.exceptions import ArgumentsChanged, HandoffNotFound
from store.ids import new_handoff_id
from store.keys import body_fields, body_string, trail_lines
from store.models import HandoffRequest, Status, TaskKind, TaskState
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.conftest import WorkerProcesses, wait_until
from tests.support import resume_targets
from worker.client import Handoffs

RESUME_TARGET = "tests.support.resume_targets:record"
REVIEWER = "U0OLDREVIEWER"
CHANNEL = "C0OLDSHAPE"


def _request(run_id: str) -> HandoffRequest:
    return HandoffRequest.model_validate(
        {
            "run_id": run_id,
            "thread_id": f"{run_id}-thread",
            "request_type": "approval",
            "context": "Charged twice for order A-1",
            "payload": {
                "kind": "approval",
                "action": {"name": "issue_refund", "args": {"order_id": "A-1", "amount": 30}},
            },
            "channel": CHANNEL,
            "reviewers": [REVIEWER],
            "resume_target": RESUME_TARGET,
            "idempotency_key": f"{run_id}-refund",
            "expires_in_seconds": 3600,
        }
    )


def write_old_shape(redis: Redis, store: HandoffStore, tasks: TaskPolicy, run_id: str) -> str:
    """A pending approval, posted to Slack, as the store wrote it before the body and the
    shared policies existed: raw commands, field for field what CREATE, BEGIN_TASK,
    link_message and FINISH_TASK left behind."""
    keys, handoff_id = store.keys, new_handoff_id()
    request = _request(run_id)
    now = int(time.time() * 1000)
    indexes = [
        keys.pending,
        keys.pending_by_run(run_id),
        keys.pending_by_type("approval"),
        keys.pending_by_channel(CHANNEL),
        keys.pending_by_reviewer(REVIEWER),
    ]
    fields: dict[str, Any] = {
        "request": request.model_dump_json(exclude_none=True),
        "status": "pending",
        "request_type": "approval",
        "created_at": now,
        "expires_at": now + 3_600_000,
        "indexes": json.dumps(indexes),
        "idem_key": f"{run_id}-refund",
        "version": 3,
        "has_resume": 1,
        "policy": tasks.for_request(request).as_script_arg(),
        "deliver_state": "completed",
        "deliver_limit": tasks.delivery_max_attempts,
        "route": CHANNEL,
        "args_digest": action_digest("issue_refund", {"order_id": "A-1", "amount": 30}),
        "deliver_route": CHANNEL,
        "deliver_attempt": 1,
        "deliver_lease": 0,
        "deliver_token": "0123456789abcdef0123456789abcdef",
        "deliver_dirty": 0,
        "deliver_started": now + 5,
        "deliver_done_at": now + 9,
        "deliver_deferred": 0,
        "deliver_failures": 0,
        "message_refs": json.dumps({"channel": CHANNEL, "ts": "1760000000.000100"}),
    }
    redis.hset(keys.handoff(handoff_id), mapping=fields)
    for at, event, actor, detail in (
        (now, "created", "agent", {"run_id": run_id, "request_type": "approval"}),
        (now + 5, "delivery_started", "worker", {"attempt": 1}),
        (now + 9, "delivered", "worker", {"attempt": 1}),
    ):
        entry = {"event": event, "handoff_id": handoff_id, "actor": actor, "at": at}
        redis.rpush(keys.audit(handoff_id), json.dumps({**entry, "detail": detail}))
    redis.set(keys.idempotency(f"{run_id}-refund"), handoff_id)
    for key in indexes:
        redis.zadd(key, {handoff_id: 0})
    redis.zadd(keys.deadlines, {handoff_id: now + 3_600_000})
    redis.set(keys.message_link(CHANNEL, "1760000000.000100"), handoff_id)
    return handoff_id


def _indexed(redis: Redis, key: str, handoff_id: str) -> bool:
    return redis.zscore(key, handoff_id) is not None


def test_an_old_shape_handoff_is_read_decided_and_resumed_once(
    redis: Redis, handoffs: Handoffs, fast_tasks: TaskPolicy, workers: WorkerProcesses
) -> None:
    store = handoffs.store
    handoff_id = write_old_shape(redis, store, fast_tasks, "run-old-1")

    handoff = store.get(handoff_id)
    assert handoff.status is Status.PENDING and handoff.run_id == "run-old-1"
    assert handoff.channel == CHANNEL and handoff.reviewers == [REVIEWER]
    assert handoff.payload.action.args == {"order_id": "A-1", "amount": 30}  # type: ignore[union-attr]
    assert handoff.delivery.state is TaskState.COMPLETED
    assert handoff.delivery.max_attempts == fast_tasks.delivery_max_attempts
    assert handoff.message_refs == {"channel": CHANNEL, "ts": "1760000000.000100"}
    assert [e.event for e in store.audit_trail(handoff_id)] == [
        "created",
        "delivery_started",
        "delivered",
    ]
    assert {e.handoff_id for e in store.audit_trail(handoff_id)} == {handoff_id}
    assert store.handoff_for_message(CHANNEL, "1760000000.000100") == handoff_id
    assert [h.id for h in store.list_pending(store.keys.pending_by_reviewer(REVIEWER)).items] == [
        handoff_id
    ]
    # In the index of all pending handoffs it was written to, and in its type's, which the
    # listing of all reads.
    assert [h.id for h in store.list_pending().items] == [handoff_id]
    assert store.count_pending() == 1
    # Its idempotency key still finds it: the same request is not created again.
    again = store.create(_request("run-old-1"), handoff_id=new_handoff_id())
    assert (again.created, again.handoff.id) == (False, handoff_id)

    workers.start()
    decided = handoffs.decide(handoff_id, "approved", by=REVIEWER)

    assert decided.status is Status.APPROVED
    for key in (
        store.keys.pending,
        store.keys.pending_by_run("run-old-1"),
        store.keys.pending_by_channel(CHANNEL),
        store.keys.pending_by_reviewer(REVIEWER),
    ):
        assert not _indexed(redis, key, handoff_id), key
    wait_until(lambda: store.get(handoff_id).resume.state is TaskState.COMPLETED)
    [resumed] = resume_targets.recorded(redis)
    assert (resumed["handoff_id"], resumed["status"]) == (handoff_id, "approved")
    trail = [e.event for e in store.audit_trail(handoff_id)]
    assert trail[:3] == ["created", "delivery_started", "delivered"]
    assert "decided" in trail and "resumed" in trail


def test_an_old_shape_approval_read_with_other_arguments_is_refused(
    redis: Redis, handoffs: Handoffs, fast_tasks: TaskPolicy
) -> None:
    # Its digest stays in the hash: an approval of other arguments is still refused.
    store = handoffs.store
    handoff_id = write_old_shape(redis, store, fast_tasks, "run-old-2")
    stale = action_digest("issue_refund", {"order_id": "A-1", "amount": 3000})
    redis.hset(store.keys.handoff(handoff_id), "args_digest", stale)

    read = action_digest("issue_refund", {"order_id": "A-1", "amount": 30})
    with pytest.raises(ArgumentsChanged):
        store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER, seen_digest=read)

    assert store.get(handoff_id).is_pending


def test_an_old_shape_handoff_is_reassigned_then_cancelled_and_purged(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    handoff_id = write_old_shape(redis, store, fast_tasks, "run-old-3")

    moved = store.reassign(handoff_id, by="U0ADMIN", channel="C0NEWPLACE")

    assert moved.channel == "C0NEWPLACE"
    assert _indexed(redis, store.keys.pending_by_channel("C0NEWPLACE"), handoff_id)
    assert not _indexed(redis, store.keys.pending_by_channel(CHANNEL), handoff_id)
    # The rewritten index list moved to the body; nothing stale is left in the hash.
    assert redis.hget(store.keys.handoff(handoff_id), "indexes") is None
    body = body_fields(redis.get(store.keys.handoff_body(handoff_id)))
    assert "C0NEWPLACE" in body["indexes"].decode()
    assert "request" not in body  # still in the hash: only what is rewritten moves
    assert store.get(handoff_id).payload.action.args == {"order_id": "A-1", "amount": 30}  # type: ignore[union-attr]

    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    for key in (store.keys.pending, store.keys.pending_by_channel("C0NEWPLACE")):
        assert not _indexed(redis, key, handoff_id)
    # Its run is not resumed: the retention sweep takes every key of it (a moment after the
    # decision: events of the decision's own millisecond are not past retention yet).
    time.sleep(0.01)
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)
    for key in (
        store.keys.handoff(handoff_id),
        store.keys.handoff_body(handoff_id),
        store.keys.audit(handoff_id),
        store.keys.idempotency("run-old-3-refund"),
        store.keys.message_link(CHANNEL, "1760000000.000100"),
    ):
        assert not redis.exists(key), key


def test_a_posted_handoff_keeps_a_listpack_hash_its_body_and_one_shared_policy(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    assert redis.config_get("hash-max-listpack-value")["hash-max-listpack-value"] == "64"
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    ids = []
    for n in range(2):
        handoff_id = store.create(_request(f"run-new-{n}"), handoff_id=new_handoff_id()).handoff.id
        start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=f"d{n}")
        store.link_message(handoff_id, CHANNEL, f"1760000000.00020{n}")
        refs = {"channel": CHANNEL, "ts": f"1760000000.00020{n}"}
        store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, message_refs=refs)
        ids.append(handoff_id)

    for handoff_id in ids:
        hkey = store.keys.handoff(handoff_id)
        assert redis.object("encoding", hkey) == b"listpack"
        assert not redis.hexists(hkey, "request") and not redis.hexists(hkey, "indexes")
        assert redis.hget(hkey, "policy").startswith(b"@")  # type: ignore[union-attr]
        assert redis.type(store.keys.handoff_body(handoff_id)) == b"string"
        body = body_fields(redis.get(store.keys.handoff_body(handoff_id)))
        # No index list (the request names them all): the arguments' digest (128 bits), the
        # request and the trail.
        assert set(body) == {"args_digest", "request", "trail"}
        assert len(body["args_digest"]) == 32
        # The trail is the body's: no list of its own.
        assert not redis.exists(store.keys.audit(handoff_id))
        run_id = f"run-new-{ids.index(handoff_id)}"
        assert store.index_range(store.keys.pending_by_run(run_id), "-", "+", 10) == [handoff_id]
        stored = json.loads(body["request"])
        handoff = store.get(handoff_id)
        assert stored["run_id"] == handoff.run_id
        # What the hash holds (the idempotency key) and an empty metadata are left out; the
        # handoff read back has them.
        assert "idempotency_key" not in stored and "metadata" not in stored
        assert handoff.idempotency_key == f"{run_id}-refund" and handoff.metadata == {}
        # The 'created' event keeps no detail (the request's run and type): read back, it
        # has it.
        assert json.loads(trail_lines_as_stored(redis.get(store.keys.handoff_body(handoff_id)))[0])[
            2:
        ] == ["created"]
        # The trail, an event a line as [at, actor, event, detail], leaves the id out;
        # reading it puts it back.
        lines = trail_lines(redis.get(store.keys.handoff_body(handoff_id)))
        assert [json.loads(line)[1:3] for line in lines] == [
            ["agent", "created"],
            ["worker", "delivery_started"],
            ["worker", "delivered"],
        ]
        trail = store.audit_trail(handoff_id)
        assert [(e.handoff_id, e.event, e.actor) for e in trail] == [
            (handoff_id, "created", "agent"),
            (handoff_id, "delivery_started", "worker"),
            (handoff_id, "delivered", "worker"),
        ]
        assert trail[1].detail == {"attempt": 1}
        assert trail[0].detail == {"run_id": run_id, "request_type": "approval"}
        exported = [e.event for e in store.global_audit() if e.handoff_id == handoff_id]
        assert exported[0] == "created"
        created = next(e for e in store.global_audit() if e.handoff_id == handoff_id)
        assert created.detail == {"run_id": run_id, "request_type": "approval"}
    # Idempotency keys and message links are fields of one hash each, not keys of their own.
    for n, handoff_id in enumerate(ids):
        key, link = f"run-new-{n}-refund", f"{CHANNEL}:1760000000.00020{n}"
        assert store.looked_up("idemkeys", [key]) == [handoff_id]
        assert store.looked_up("msglinks", [link]) == [handoff_id]
        assert store.created_under(key) == handoff_id
        assert store.handoff_for_message(CHANNEL, f"1760000000.00020{n}") == handoff_id
    assert not redis.exists(store.keys.idempotency_ids_before, store.keys.message_links_before)
    assert not list(redis.scan_iter(match=store.keys.prefix + "idem:*"))
    assert not list(redis.scan_iter(match=store.keys.prefix + "msg:*"))
    # One policy for both, stored once, as the scripts read it.
    assert redis.hlen(store.keys.policies) == 1
    (policy,) = store.stored_fields(ids[0], "policy")
    assert json.loads(policy or b"{}")["deliver_max"] == fast_tasks.delivery_max_attempts


def _posted(store: HandoffStore, run_id: str) -> str:
    handoff_id = store.create(_request(run_id), handoff_id=new_handoff_id()).handoff.id
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=f"t-{run_id}")
    store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, message_refs={})
    return handoff_id


def _stream_fields(redis: Redis, store: HandoffStore) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in redis.xrange(store.keys.global_audit) or []]


def test_a_pending_handoffs_events_are_kept_once_and_read_whole_from_the_stream(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = _posted(store, "run-once-1")
    trail = store.audit_trail(handoff_id)
    assert [e.event for e in trail] == ["created", "delivery_started", "delivered"]

    # The stream points at the trail's copies...
    pointers = _stream_fields(redis, store)
    assert pointers == [{b"p": handoff_id.encode(), b"i": str(i).encode()} for i in range(3)]
    # ...and every reader gets whole events, the id first, as whole entries hold it.
    entries = list(store.audit_entries())
    assert [e.event for e in entries] == trail
    assert all(e.raw.startswith(f'{{"handoff_id":"{handoff_id}",'.encode()) for e in entries)
    assert store.global_audit() == trail

    # From the decision on, events go into the stream whole (they may outlive the handoff).
    store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER)
    decided = _stream_fields(redis, store)[3]
    assert set(decided) == {b"e"} and json.loads(decided[b"e"])["event"] == "decided"
    assert [e.event.event for e in store.audit_entries()][3] == "decided"


def test_whole_stream_entries_of_a_pending_handoff_written_before_still_read(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = write_old_shape(redis, store, fast_tasks, "run-once-2")
    whole = {"event": "created", "handoff_id": handoff_id, "actor": "agent", "at": 1, "detail": {}}
    redis.xadd(store.keys.global_audit, {"e": json.dumps(whole)})
    later = _posted(store, "run-once-3")  # pointers after it

    read = [(e.event.handoff_id, e.event.event) for e in store.audit_entries()]
    assert read == [
        (handoff_id, "created"),
        (later, "created"),
        (later, "delivery_started"),
        (later, "delivered"),
    ]


def test_a_trail_kept_as_a_list_before_keeps_growing_there_and_reads_alike(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """Before the body held the trail, a handoff with a body kept its events in a list of
    objects at ``{ns}:audit:<id>``: its later events go on there (one trail, in order), the
    stream's pointers read them, and the purge removes it."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    handoff_id = _posted(store, "run-list-1")
    body_key = store.keys.handoff_body(handoff_id)
    # The same handoff as the previous release wrote it: the events a list, the body without.
    fields = body_fields(redis.get(body_key))
    for line in fields.pop("trail").split(b"\n"):
        at, actor, event, *rest = json.loads(line)
        detail = rest[0] if rest else {"run_id": "run-list-1", "request_type": "approval"}
        entry = {"event": event, "actor": actor, "at": at, "detail": detail}
        redis.rpush(store.keys.audit(handoff_id), json.dumps(entry))
    redis.set(body_key, body_string(fields))

    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    events = ["created", "delivery_started", "delivered", "cancelled"]
    assert [e.event for e in store.audit_trail(handoff_id)] == events
    assert redis.llen(store.keys.audit(handoff_id)) == 4
    assert "trail" not in body_fields(redis.get(body_key))
    entries = [(e.event.handoff_id, e.event.event) for e in store.audit_entries()]
    assert entries == [(handoff_id, event) for event in events]

    redis.zadd(store.keys.retention, {handoff_id: 0})
    # A moment after the decision: a purge in the decision's own millisecond is "sooner than
    # retention" (0 here), which keeps the trail a while for the stream's pointers.
    time.sleep(0.01)
    assert store.purge_decided() == 1
    assert not redis.exists(store.keys.audit(handoff_id), body_key)


def test_a_trail_the_stream_still_points_at_outlives_an_early_purge(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """The purge runs retention after the decision; a handoff purged sooner (its retention
    entry due early, as after a shorter setting) keeps its trail until the stream has
    trimmed the pointers into it, and a pointer to a trail that is gone is skipped."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=3600))
    handoff_id = _posted(store, "run-once-4")
    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    redis.zadd(store.keys.retention, {handoff_id: 0})  # due now

    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)
    # The trail is the body's: the body stays, retention after the decision and the
    # sweep's recheck period (an hour) to spare.
    trail_key = store.keys.handoff_body(handoff_id)
    assert 7_100_000 < redis.pttl(trail_key) <= 7_200_000
    assert [e.event.event for e in store.audit_entries()][:3] == [
        "created",
        "delivery_started",
        "delivered",
    ]

    redis.delete(trail_key)
    left = list(store.audit_entries())
    assert [e.raw for e in left[:3]] == [b"", b"", b""]  # skipped by every reader
    assert [e.event for e in store.global_audit()] == ["cancelled"]


def test_a_key_ending_in_body_is_not_taken_for_the_api_record_of_another_key(
    redis: Redis, handoffs: Handoffs
) -> None:
    """The HTTP API kept the body digest of its key ``K`` at ``{ns}:idem:K:body``, where the
    keys written before ``{ns}:idem`` became a hash were (it keeps them apart now, at
    ``idempotency_body``): the key ``K:body`` must not read such a digest, left from before,
    as the id of a handoff created under it."""
    store = handoffs.store
    redis.set(store.keys.idempotency("agent/K") + ":body", "ab" * 32)
    assert store.created_under("agent/K:body") is None
    request = _request("run-body-key").model_copy(update={"idempotency_key": "agent/K:body"})
    made = store.create(request, handoff_id=new_handoff_id())
    assert made.created and store.get(made.handoff.id).run_id == "run-body-key"
    assert store.created_under("agent/K:body") == made.handoff.id
    again = store.create(request, handoff_id=new_handoff_id())
    assert not again.created and again.handoff.id == made.handoff.id


def trail_lines_as_stored(body: bytes | None) -> list[bytes]:
    """The trail's lines as the body holds them (``trail_lines`` puts details back)."""
    trail = body_fields(body).get("trail")
    return trail.split(b"\n") if trail else []
