"""What a handoff's audit trail, the last field of its body, costs to write and to read: a
click anyone may repeat appends its line to a long body instead of writing the whole body
to the append-only file and the replicas again, and reading the audit stream moves only the
events its pointers name, not the bodies (requests and all) holding them."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.ids import new_handoff_id
from store.models import HandoffRequest, Status, TaskKind
from store.repository import HandoffStore, StoreConfig
from tests.support.redis_server import RedisServer
from worker.client import Handoffs


def _make(handoffs: Handoffs, kind: str, n: int) -> str:
    if kind == "approval":
        return handoffs.request_approval(run_id=f"r{n}", thread_id="t", action="ship").id
    if kind == "question":
        return handoffs.ask(run_id=f"r{n}", thread_id="t", question="why?").id
    if kind == "correction":
        return handoffs.request_correction(run_id=f"r{n}", thread_id="t", draft="d").id
    return handoffs.escalate(run_id=f"r{n}", thread_id="t", summary="s").id


def test_all_pending_pages_over_four_type_indexes_and_old_all_index(
    redis: Redis, handoffs: Handoffs
) -> None:
    store = handoffs.store
    rng = random.Random(25)
    kinds = ["approval", "question", "correction", "escalation"]
    made = [_make(handoffs, rng.choice(kinds), n) for n in range(90)]
    # Some written the old way: also in the old index of all pending handoffs.
    for handoff_id in made[::3]:
        redis.zadd(store.keys.pending, {handoff_id: 0})
    for handoff_id in rng.sample(made, 25):
        store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    pending = sorted(h for h in made if store.get(h).status is Status.PENDING)
    assert store.count_pending() == len(pending)
    for limit in (1, 4, 7, 20, 200):
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list_pending(None, cursor=cursor, limit=limit)
            seen.extend(h.id for h in page.items)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        assert seen == pending, limit
    assert store.pending_ids(None, limit=1000) == pending


# -- write and read amplification of the trail in the body -------------------------------

BIG_CONTEXT = "x" * 60_000
"""Under the 64 KiB payload limit: what an agent may send as context."""


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[Redis, Path]]:
    """A server of this test's own (append-only, fsynced per write, no rewrites), so that its
    append-only file and its byte counters show this test's traffic only."""
    server = RedisServer(tmp_path / "redis", extra=("--auto-aof-rewrite-percentage", "0"))
    server.start()
    try:
        yield Redis.from_url(server.url), tmp_path / "redis"
    finally:
        server.stop()


def _aof_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "appendonlydir").glob("*.incr.aof"))


def _big_posted(store: HandoffStore, run_id: str) -> str:
    request = HandoffRequest.model_validate(
        {
            "run_id": run_id,
            "thread_id": "t",
            "request_type": "question",
            "context": BIG_CONTEXT,
            "payload": {"kind": "question", "question": "ship it?"},
        }
    )
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=f"t-{run_id}")
    store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, message_refs={})
    return handoff_id


def test_a_click_anyone_may_repeat_does_not_rewrite_the_whole_body_to_disk(
    own_redis: tuple[Redis, Path],
) -> None:
    """A "View full" click is open to anyone who sees the message, and a refused click is audited
    too: each is a trail event (up to 200 a handoff). Each must cost the append-only file
    (and the replication stream) about its own line, not a copy of the whole request."""
    redis, data_dir = own_redis
    store = HandoffStore(redis, StoreConfig())
    handoff_id = _big_posted(store, "run-aof")
    before = _aof_bytes(data_dir)
    clicks = 20
    for n in range(clicks):
        store.record_audit(handoff_id, "viewed_full", actor=f"U0VIEWER{n}")
    grown = _aof_bytes(data_dir) - before
    assert grown < clicks * 2_000, f"{clicks} clicks wrote {grown:,} bytes to the AOF"
    # ...and the trail still reads whole, in order, the stream pointing at the right lines.
    events = [(e.event, e.actor) for e in store.audit_trail(handoff_id)]
    assert events[3:] == [("viewed_full", f"U0VIEWER{n}") for n in range(clicks)]
    assert [(e.event.event, e.event.actor) for e in store.audit_entries()][3:] == events[3:]
    # Appended lines, then a whole rewrite (a reassignment's indexes), then more of each.
    store.reassign(handoff_id, channel="C0ELSEWHERE", by="U0ADMIN")
    store.record_audit(handoff_id, "denied", actor="U0STRANGER", detail={"via": "button"})
    store.decide(handoff_id, Status.ANSWERED, decided_by="U0REVIEW", answer="yes")
    assert store.get(handoff_id).status is Status.ANSWERED
    trail = [e.event for e in store.audit_trail(handoff_id)]
    assert trail[-3:] == ["reassigned", "denied", "decided"] and len(trail) == 3 + clicks + 3
    assert [e.event.event for e in store.audit_entries()] == trail
    assert store.get(handoff_id).context == BIG_CONTEXT


def test_reading_the_stream_moves_the_pointed_events_not_whole_bodies(
    own_redis: tuple[Redis, Path],
) -> None:
    """While a handoff is pending the stream only points into its trail: reading it (audit
    export, /handoff stats, the API's /v1/audit, the App Home's catch-up, the unassigned
    index) should fetch the events pointed at, not every pointed-at handoff's whole body
    (request included) once per page."""
    redis, _ = own_redis
    store = HandoffStore(redis, StoreConfig())
    ids = [_big_posted(store, f"run-read-{n}") for n in range(30)]
    time.sleep(0.05)
    before = int(redis.info("stats")["total_net_output_bytes"])
    entries = [e for e in store.audit_entries() if e.raw]
    moved = int(redis.info("stats")["total_net_output_bytes"]) - before
    assert [e.event.handoff_id for e in entries] == [i for i in ids for _ in range(3)]
    assert [e.event.event for e in entries[:3]] == ["created", "delivery_started", "delivered"]
    # 90 events of a few hundred bytes each; the bodies are 30 x 60 KB.
    assert moved < 100_000, f"reading 90 events moved {moved:,} bytes"
