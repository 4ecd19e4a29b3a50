"""The compact layout of 0.3 (``store.keys``): a body that leaves out what the request or the
hash already says (its index keys, the 'created' event's detail, the idempotency key, an
expiry of whole milliseconds, an empty metadata) and keeps an approval's digest in 128 bits,
a policy named by 8 hex digits, no route or resume flag of its own,
idempotency keys, message links and deadlines in small bucket sets; and handoffs the
previous release (0.2) wrote, which still read, decide, expire, resume and purge alike."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
from redis import Redis

from store import defaults
from store.canonical import action_digest
from store.exceptions import ArgumentsChanged, HandoffNotFound
from store.ids import new_handoff_id
from store.keys import KeySpace, body_fields, body_string, bucket_of
from store.models import HandoffRequest, Status, TaskKind, TaskState
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.conftest import WorkerProcesses, wait_until
from tests.support import resume_targets
from tests.support.indexes import indexed_under
from worker.client import Handoffs

RESUME_TARGET = "tests.support.resume_targets:record"
REVIEWER = "U0PREVSHAPE"
CHANNEL = "C0PREVSHAPE"
TS = "1760000000.000300"


def _request(run_id: str, **changes: Any) -> HandoffRequest:
    fields: dict[str, Any] = {
        "run_id": run_id,
        "thread_id": f"{run_id}-thread",
        "request_type": "approval",
        "context": "Charged twice for order A-7",
        "payload": {
            "kind": "approval",
            "action": {"name": "issue_refund", "args": {"order_id": "A-7", "amount": 30}},
        },
        "channel": CHANNEL,
        "reviewers": [REVIEWER],
        "resume_target": RESUME_TARGET,
        "idempotency_key": f"{run_id}-refund",
        "expires_in_seconds": 3600,
    }
    fields.update(changes)
    return HandoffRequest.model_validate(fields)


def write_previous_shape(
    redis: Redis,
    store: HandoffStore,
    tasks: TaskPolicy,
    run_id: str,
    *,
    expires_ms: int = 3_600_000,
) -> str:
    """A pending approval, posted to Slack, as 0.2 wrote it, command for command: the body
    holding the digest, the index list, the whole request (its idempotency key, an empty
    metadata) and the trail (the 'created' event with its detail); the policy named by its
    whole SHA-1; the delivery's route kept; the idempotency key, the message link and the
    deadline in one hash or set each for the namespace; the stream pointing at the trail."""
    keys, handoff_id = store.keys, new_handoff_id()
    request = _request(run_id)
    now = int(time.time() * 1000)
    policy = tasks.for_request(request).as_script_arg()
    sha1 = hashlib.sha1(policy.encode()).hexdigest()
    redis.hset(keys.policies, sha1, policy)
    indexes = [
        keys.pending_by_run(run_id),
        keys.pending_by_type("approval"),
        keys.pending_by_channel(CHANNEL),
        keys.pending_by_reviewer(REVIEWER),
    ]
    redis.hset(
        keys.handoff(handoff_id),
        mapping={
            "status": "pending",
            "request_type": "approval",
            "created_at": now,
            "expires_at": now + expires_ms,
            "idem_key": f"{run_id}-refund",
            "version": 3,
            "has_resume": 1,
            "policy": "@" + sha1,
            "deliver_state": "completed",
            "deliver_limit": tasks.delivery_max_attempts,
            "route": CHANNEL,
            "deliver_route": CHANNEL,
            "deliver_attempt": 1,
            "deliver_started": now + 5,
            "deliver_done_at": now + 9,
            "message_refs": json.dumps({"channel": CHANNEL, "ts": TS}, separators=(",", ":")),
        },
    )
    trail = [
        [now, "agent", "created", {"run_id": run_id, "request_type": "approval"}],
        [now + 5, "worker", "delivery_started", {"attempt": 1}],
        [now + 9, "worker", "delivered", {"attempt": 1}],
    ]
    body = {
        "args_digest": action_digest("issue_refund", {"order_id": "A-7", "amount": 30}).encode(),
        "indexes": json.dumps([k.removeprefix(keys.pending) for k in indexes]).encode(),
        "request": request.model_dump_json(exclude_none=True).encode(),
        "trail": b"\n".join(json.dumps(line, separators=(",", ":")).encode() for line in trail),
    }
    assert b'"metadata":{}' in body["request"] and b"idempotency_key" in body["request"]
    redis.set(keys.handoff_body(handoff_id), body_string(body))
    for i in range(len(trail)):
        redis.xadd(keys.global_audit, {"p": handoff_id, "i": i})
    redis.hset(keys.idempotency_ids_before, f"{run_id}-refund", handoff_id)
    for key in indexes:
        redis.zadd(key, {handoff_id: 0})
    redis.zadd(keys.deadlines, {handoff_id: now + expires_ms})
    redis.hset(keys.message_links_before, f"{CHANNEL}:{TS}", handoff_id)
    return handoff_id


def _indexed(redis: Redis, key: str, handoff_id: str) -> bool:
    return key in indexed_under(redis, KeySpace(), handoff_id)


def _index_keys(keys: KeySpace, run_id: str) -> list[str]:
    return [
        keys.pending_by_run(run_id),
        keys.pending_by_type("approval"),
        keys.pending_by_channel(CHANNEL),
        keys.pending_by_reviewer(REVIEWER),
    ]


def test_a_previous_shape_handoff_reads_and_is_decided_and_resumed_once(
    redis: Redis, handoffs: Handoffs, fast_tasks: TaskPolicy, workers: WorkerProcesses
) -> None:
    store = handoffs.store
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-prev-1")

    handoff = store.get(handoff_id)
    assert handoff.status is Status.PENDING and handoff.run_id == "run-prev-1"
    assert handoff.idempotency_key == "run-prev-1-refund" and handoff.metadata == {}
    assert handoff.delivery.state is TaskState.COMPLETED
    assert handoff.delivery.max_attempts == fast_tasks.delivery_max_attempts
    assert handoff.message_refs == {"channel": CHANNEL, "ts": TS}
    trail = store.audit_trail(handoff_id)
    assert [e.event for e in trail] == ["created", "delivery_started", "delivered"]
    assert trail[0].detail == {"run_id": "run-prev-1", "request_type": "approval"}
    assert store.global_audit() == trail
    assert store.handoff_for_message(CHANNEL, TS) == handoff_id
    assert store.created_under("run-prev-1-refund") == handoff_id
    assert [h.id for h in store.list_pending().items] == [handoff_id]
    # Its idempotency key, in the namespace's one hash, still finds it.
    again = store.create(_request("run-prev-1"), handoff_id=new_handoff_id())
    assert (again.created, again.handoff.id) == (False, handoff_id)

    workers.start()
    decided = handoffs.decide(handoff_id, "approved", by=REVIEWER)

    assert decided.status is Status.APPROVED
    for key in _index_keys(store.keys, "run-prev-1"):
        assert not _indexed(redis, key, handoff_id), key
    assert redis.zscore(store.keys.deadlines, handoff_id) is None
    wait_until(lambda: store.get(handoff_id).resume.state is TaskState.COMPLETED)
    [resumed] = resume_targets.recorded(redis)
    assert (resumed["handoff_id"], resumed["status"]) == (handoff_id, "approved")


def test_a_previous_shape_approval_keeps_its_digest_check(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-prev-2")
    body_key = store.keys.handoff_body(handoff_id)
    fields = body_fields(redis.get(body_key))
    fields["args_digest"] = action_digest(
        "issue_refund", {"order_id": "A-7", "amount": 3000}
    ).encode()
    redis.set(body_key, body_string(fields))

    read = action_digest("issue_refund", {"order_id": "A-7", "amount": 30})
    with pytest.raises(ArgumentsChanged):
        store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER, seen_digest=read)
    assert store.get(handoff_id).is_pending


def test_a_previous_shape_handoff_expires_from_the_old_deadlines_set_and_is_purged(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=0))
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-prev-3", expires_ms=1)
    time.sleep(0.01)

    assert store.expire_due() == [handoff_id]

    assert store.get(handoff_id).status is Status.EXPIRED
    assert redis.zscore(store.keys.deadlines, handoff_id) is None
    for key in _index_keys(store.keys, "run-prev-3"):
        assert not _indexed(redis, key, handoff_id), key
    # Its run is resumed (with the expiry), then the retention sweep takes it.
    start = store.begin_task(handoff_id, TaskKind.RESUME, run_token="t-prev-3")
    store.finish_task(handoff_id, TaskKind.RESUME, attempt=start.attempt)
    time.sleep(0.01)
    assert store.purge_decided() == 1
    with pytest.raises(HandoffNotFound):
        store.get(handoff_id)
    # Its idempotency key and its message link went with it, from the hashes they were in.
    assert redis.hget(store.keys.idempotency_ids_before, "run-prev-3-refund") is None
    assert redis.hget(store.keys.message_links_before, f"{CHANNEL}:{TS}") is None
    assert store.created_under("run-prev-3-refund") is None
    assert store.handoff_for_message(CHANNEL, TS) is None


def test_a_previous_shape_handoff_is_reassigned_then_cancelled(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = write_previous_shape(redis, store, fast_tasks, "run-prev-4")

    moved = store.reassign(handoff_id, by="U0ADMIN", channel="C0MOVEDHERE")

    assert moved.channel == "C0MOVEDHERE"
    assert _indexed(redis, store.keys.pending_by_channel("C0MOVEDHERE"), handoff_id)
    assert not _indexed(redis, store.keys.pending_by_channel(CHANNEL), handoff_id)
    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    assert not _indexed(redis, store.keys.pending_by_channel("C0MOVEDHERE"), handoff_id)
    assert not _indexed(redis, store.keys.pending_by_run("run-prev-4"), handoff_id)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"channel": None},
        {"reviewers": ["U0B", "U0A", "U0B", "S0GROUP"]},
        {"reviewers": []},
        {"api_key": "ci-bot"},
        {"run_id": 'run \u00e9t\u00e9 / "quoted" \\ back'},
        {"metadata": {"trace": "t-1"}},
    ],
)
def test_the_index_keys_a_request_names_are_worked_out_alike_by_store_and_scripts(
    redis: Redis, fast_tasks: TaskPolicy, changes: dict[str, Any]
) -> None:
    """CREATE leaves a request's index keys out of the body, and the scripts work them out
    from the request again (``request_index_keys``): they must be the keys the store
    indexed it under (``HandoffStore._pending_indexes``), or a decision would leave it
    listed as pending forever."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    request = _request(changes.pop("run_id", "run-derive"), **changes)
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id
    expected = store._pending_indexes(request)

    body = body_fields(redis.get(store.keys.handoff_body(handoff_id)))
    assert set(body) == {"args_digest", "request", "trail"}
    assert "expires_in_seconds" not in json.loads(body["request"])
    for key in expected:
        assert _indexed(redis, key, handoff_id), key
    read = store.get(handoff_id)
    assert read.metadata == request.metadata and read.reviewers == request.reviewers
    assert read.idempotency_key == request.idempotency_key

    store.decide(handoff_id, Status.REJECTED, decided_by="U0A")

    assert indexed_under(redis, store.keys, handoff_id) == set()


def test_buckets_are_worked_out_alike_by_store_and_scripts(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """Idempotency keys and deadlines are written by the scripts and read (or checked) by
    the store: both must pick the same bucket, whatever the bytes of the name."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    for n, key in enumerate(["plain", "caf\u00e9-\u2603", "with:colons:and spaces", "x" * 200]):
        made = store.create(
            _request(f"run-bucket-{n}", idempotency_key=key), handoff_id=new_handoff_id()
        ).handoff
        assert store.created_under(key) == made.id
        level = defaults.LOOKUP_FIRST_LEVEL  # a new namespace's
        bucket = store.keys.lookup_bucket("idemkeys", key, level)
        assert bucket.endswith(f":{2**level + bucket_of(key, 2**level)}")
        assert redis.hget(bucket, key) == made.id.encode()
        assert redis.zscore(store.keys.deadline_bucket(made.id), made.id) is not None
    assert not redis.exists(store.keys.deadlines, store.keys.idempotency_ids_before)


def test_a_policy_whose_short_name_is_taken_by_another_gets_its_whole_digest(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    policy = fast_tasks.for_request(_request("run-policy")).as_script_arg()
    sha1 = hashlib.sha1(policy.encode()).hexdigest()
    # Another policy's JSON already under this one's 8-digit name (a collision).
    redis.hset(store.keys.policies, sha1[:8], '{"deliver_max": 99}')

    handoff_id = store.create(_request("run-policy"), handoff_id=new_handoff_id()).handoff.id

    assert redis.hget(store.keys.handoff(handoff_id), "policy") == f"@{sha1}".encode()
    (stored,) = store.stored_fields(handoff_id, "policy")
    assert json.loads(stored or b"{}")["deliver_max"] == fast_tasks.delivery_max_attempts
    other = store.create(_request("run-policy-2"), handoff_id=new_handoff_id()).handoff.id
    assert redis.hget(store.keys.handoff(other), "policy") == f"@{sha1}".encode()


def test_a_posted_handoff_keeps_no_route_or_policy_name_longer_than_needed(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = store.create(_request("run-short"), handoff_id=new_handoff_id()).handoff.id
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token="t-short")
    hkey = store.keys.handoff(handoff_id)
    # The attempt posts where the request says: nothing kept besides the request's route.
    assert redis.hget(hkey, "deliver_route") is None
    # Neither the route nor whether it resumes a run: the request says both.
    assert redis.hget(hkey, "route") is None and redis.hget(hkey, "has_resume") is None
    assert len(redis.hget(hkey, "policy") or b"") == 9  # '@' and 8 hex digits
    store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, message_refs={})

    # Moved elsewhere, the next attempt's route is kept.
    store.reassign(handoff_id, by="U0ADMIN", channel="C0ELSEWHERE")
    store.begin_task(handoff_id, TaskKind.DELIVER, run_token="t-short-2")
    assert redis.hget(hkey, "deliver_route") == b"C0ELSEWHERE"


def test_an_approval_keeps_128_bits_of_its_digest_and_still_refuses_other_arguments(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    handoff_id = store.create(_request("run-digest"), handoff_id=new_handoff_id()).handoff.id
    digest = action_digest("issue_refund", {"order_id": "A-7", "amount": 30})
    body = body_fields(redis.get(store.keys.handoff_body(handoff_id)))
    assert body["args_digest"] == digest.removeprefix("sha256:")[:32].encode()

    other = action_digest("issue_refund", {"order_id": "A-7", "amount": 3000})
    # A digest agreeing in its first 128 bits only, or without its prefix, is not it.
    forged = digest[:39] + ("0" if digest[39] != "0" else "1") + digest[40:]
    for seen in (other, digest.removeprefix("sha256:"), digest[:39], forged[:39] + "x" * 32):
        with pytest.raises(ArgumentsChanged):
            store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER, seen_digest=seen)
    assert store.get(handoff_id).is_pending

    decided = store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER, seen_digest=digest)
    assert decided.status is Status.APPROVED


def test_a_redelivered_handoff_keeps_the_expiry_its_request_asked_for(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    for seconds in (3600, 0.25, 1.0005):
        made = store.create(
            _request(f"run-exp-{seconds}", expires_in_seconds=seconds),
            handoff_id=new_handoff_id(),
        ).handoff
        (raw,) = store.stored_fields(made.id, "request")
        stored = json.loads(raw or b"{}")
        # Whole milliseconds: the hash says it; a finer one is kept as it was asked.
        assert ("expires_in_seconds" in stored) == (seconds == 1.0005)
        hkey = store.keys.handoff(made.id)
        redis.hset(hkey, mapping={"status": "undeliverable", "deliver_state": "failed"})
        moved = store.redeliver(made.id, by="U0ADMIN", channel="C0AGAIN").handoff
        lasted = (moved.expires_at - moved.created_at).total_seconds()  # type: ignore[operator]
        assert lasted == pytest.approx(max(seconds, 0.001), abs=0.0011)


# -- a run's index: a field of a bucket for one pending handoff, a set from two on ----------


def test_a_runs_index_is_a_field_for_one_handoff_and_a_set_from_two_on(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    run_key = store.keys.pending_by_run("run-many")
    first = store.create(_request("run-many"), handoff_id=new_handoff_id()).handoff.id

    # One: no set of its own; the bucket names it.
    assert not redis.exists(run_key)
    assert store.looked_up("runs", ["run-many"])[0] == first
    assert store.index_range(run_key, "-", "+", 10) == [first]
    assert store.index_size(run_key) == 1
    assert [h.id for h in store.list_pending(run_key).items] == [first]

    second = store.create(
        _request("run-many", idempotency_key="second"), handoff_id=new_handoff_id()
    ).handoff.id
    third = store.create(
        _request("run-many", idempotency_key="third"), handoff_id=new_handoff_id()
    ).handoff.id

    # Two and more: the set, and the field says so.
    assert store.looked_up("runs", ["run-many"])[0] == "*"
    assert store.index_range(run_key, "-", "+", 10) == [first, second, third]
    assert store.count_pending(run_key) == 3
    page = store.list_pending(run_key, limit=2)
    assert [h.id for h in page.items] == [first, second]
    rest = store.list_pending(run_key, cursor=page.next_cursor, limit=2)
    assert [h.id for h in rest.items] == [third] and rest.next_cursor is None

    for handoff_id in (second, first, third):
        store.decide(handoff_id, Status.REJECTED, decided_by=REVIEWER)
    assert store.index_size(run_key) == 0 and store.list_pending(run_key).items == []
    # Nothing left behind: neither the set nor the field.
    assert not redis.exists(run_key) and store.looked_up("runs", ["run-many"])[0] is None


def test_a_runs_one_handoff_pages_by_cursor_like_a_set(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    run_key = store.keys.pending_by_run("run-one")
    only = store.create(_request("run-one"), handoff_id=new_handoff_id()).handoff.id

    assert store.index_range(run_key, f"({only}", "+", 10) == []
    assert store.index_range(run_key, f"[{only}", "+", 10) == [only]
    assert store.index_range(run_key, "+", f"({only}", 10, desc=True) == []
    assert store.index_range(run_key, "+", "-", 10, desc=True) == [only]
    assert store.index_range(run_key, "-", "+", 0) == []
    page = store.list_pending(run_key, limit=1)
    assert [h.id for h in page.items] == [only] and page.next_cursor is None


def test_a_run_with_a_set_written_before_keeps_using_it(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """A run that was waiting when the store was upgraded has a set (0.2) and no field: its
    next handoff joins the set (and the field says '*'), so none of them is hidden."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    old = write_previous_shape(redis, store, fast_tasks, "run-upgraded")
    run_key = store.keys.pending_by_run("run-upgraded")
    assert redis.zscore(run_key, old) == 0

    new = store.create(
        _request("run-upgraded", idempotency_key="after-upgrade"), handoff_id=new_handoff_id()
    ).handoff.id

    assert store.index_range(run_key, "-", "+", 10) == sorted([old, new])
    assert store.looked_up("runs", ["run-upgraded"]) == ["*"]
    store.decide(old, Status.REJECTED, decided_by=REVIEWER)
    store.decide(new, Status.REJECTED, decided_by=REVIEWER)
    assert store.index_size(run_key) == 0
    assert not redis.exists(run_key)
    assert store.looked_up("runs", ["run-upgraded"]) == [None]


def test_a_reassigned_runs_one_handoff_stays_in_its_runs_index(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    run_key = store.keys.pending_by_run("run-moved")
    handoff_id = store.create(_request("run-moved"), handoff_id=new_handoff_id()).handoff.id

    store.reassign(handoff_id, by="U0ADMIN", channel="C0MOVED")
    store.reassign(handoff_id, by="U0ADMIN", reviewers=["U0OTHER"])

    assert store.index_range(run_key, "-", "+", 10) == [handoff_id]
    assert indexed_under(redis, store.keys, handoff_id) == {
        run_key,
        store.keys.pending_by_type("approval"),
        store.keys.pending_by_channel("C0MOVED"),
        store.keys.pending_by_reviewer("U0OTHER"),
    }
    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    assert indexed_under(redis, store.keys, handoff_id) == set()


def test_a_long_request_keeps_its_index_keys_route_and_resume_flag(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """Working them out decodes the request (in every decision, expiry and delivery): a
    request over 4 KiB keeps them, a short one leaves them to its request."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    long = _request("run-long", context="x" * 5000)
    handoff_id = store.create(long, handoff_id=new_handoff_id()).handoff.id
    hkey = store.keys.handoff(handoff_id)

    assert redis.hmget(hkey, "has_resume", "route") == [b"1", CHANNEL.encode()]
    assert "indexes" in body_fields(redis.get(store.keys.handoff_body(handoff_id)))
    short = store.create(_request("run-short-2"), handoff_id=new_handoff_id()).handoff.id
    assert redis.hmget(store.keys.handoff(short), "has_resume", "route") == [None, None]

    # Both still resume their runs once decided.
    for made in (handoff_id, short):
        store.decide(made, Status.APPROVED, decided_by=REVIEWER)
        assert store.get(made).resume.state is TaskState.QUEUED


@pytest.mark.parametrize("context_bytes", [10, 5000])
def test_a_request_without_a_resume_target_is_never_resumed(
    redis: Redis, fast_tasks: TaskPolicy, context_bytes: int
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    request = _request("run-no-resume", resume_target=None, context="y" * context_bytes)
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id

    store.decide(handoff_id, Status.APPROVED, decided_by=REVIEWER)

    assert store.get(handoff_id).resume.state is TaskState.NONE
    assert redis.zscore(store.keys.outbox, f"resume:{handoff_id}") is None
