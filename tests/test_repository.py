"""HandoffStore: the atomic transitions of handoffs in Redis, tested against a real server."""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from redis import Redis

from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    HandoffNotFound,
    IdempotencyConflict,
    InvalidDecision,
    NotRetryable,
)
from store.ids import new_handoff_id
from store.models import (
    Handoff,
    HandoffRequest,
    PostWindow,
    RequestType,
    ResumeData,
    Status,
    TaskKind,
    TaskState,
)
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.support.redis_state import snapshot

RESUME_TARGET = "tests.support.resume_targets:record"
UNKNOWN_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"

PAYLOADS: dict[RequestType, dict[str, Any]] = {
    RequestType.APPROVAL: {"kind": "approval", "action": {"name": "refund", "args": {"n": 30}}},
    RequestType.QUESTION: {"kind": "question", "question": "Which customer?"},
    RequestType.CORRECTION: {"kind": "correction", "draft": "Dear customer"},
    RequestType.ESCALATION: {"kind": "escalation", "summary": "Angry customer"},
}


@pytest.fixture
def store(redis: Redis, fast_tasks: TaskPolicy) -> HandoffStore:
    return HandoffStore(redis, StoreConfig(tasks=fast_tasks))


def make_request(request_type: RequestType = RequestType.APPROVAL, **fields: Any) -> HandoffRequest:
    data: dict[str, Any] = {
        "run_id": "run-1",
        "thread_id": "t-1",
        "request_type": request_type,
        "payload": PAYLOADS[request_type],
        "resume_target": RESUME_TARGET,
        **fields,
    }
    return HandoffRequest.model_validate(data)


def create(
    store: HandoffStore,
    request_type: RequestType = RequestType.APPROVAL,
    *,
    handoff_id: str | None = None,
    **fields: Any,
) -> Handoff:
    request = make_request(request_type, **fields)
    return store.create(request, handoff_id=handoff_id or new_handoff_id()).handoff


def outbox(redis: Redis, store: HandoffStore) -> list[str]:
    return [m.decode() for m in redis.zrange(store.keys.outbox, 0, -1)]


def events(store: HandoffStore, handoff_id: str) -> list[str]:
    return [e.event for e in store.audit_trail(handoff_id)]


def handoff_hash(redis: Redis, store: HandoffStore, handoff_id: str) -> dict[bytes, bytes]:
    return redis.hgetall(store.keys.handoff(handoff_id))


def server_ms(redis: Redis) -> int:
    seconds, micros = redis.time()
    return seconds * 1000 + micros // 1000


# -- creation -------------------------------------------------------------------------


def test_new_handoff_is_pending_with_its_delivery_queued(redis: Redis, store: HandoffStore) -> None:
    created = store.create(make_request(), handoff_id=new_handoff_id())

    assert created.created
    handoff = created.handoff
    assert handoff.status is Status.PENDING
    assert handoff.delivery.state is TaskState.QUEUED
    assert handoff.resume.state is TaskState.NONE
    assert outbox(redis, store) == [f"deliver:{handoff.id}"]
    assert events(store, handoff.id) == ["created"]
    assert store.get(handoff.id) == handoff
    assert store.wait_for_work(timeout=0.01)


def test_retried_create_with_same_idempotency_key_returns_the_first_handoff(
    redis: Redis, store: HandoffStore
) -> None:
    first = store.create(make_request(idempotency_key="k1"), handoff_id=new_handoff_id())
    second_id = new_handoff_id()
    second = store.create(make_request(idempotency_key="k1"), handoff_id=second_id)

    assert first.created
    assert not second.created
    assert second.handoff.id == first.handoff.id
    assert second.handoff == store.get(first.handoff.id)
    assert store.pending_ids() == [first.handoff.id]
    assert events(store, first.handoff.id) == ["created"]
    assert [e.event for e in store.global_audit()] == ["created"]
    assert outbox(redis, store) == [f"deliver:{first.handoff.id}"]
    assert not redis.exists(store.keys.handoff(second_id))
    with pytest.raises(HandoffNotFound):
        store.get(second_id)


def test_create_with_an_existing_id_does_not_overwrite_it(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, context="first")
    before = snapshot(redis)

    again = store.create(make_request(context="second"), handoff_id=handoff.id)

    assert not again.created
    assert again.handoff.context == "first"
    assert snapshot(redis) == before


def test_the_stored_request_leaves_unset_fields_out_and_keeps_the_agents_nulls(
    redis: Redis, store: HandoffStore
) -> None:
    request = HandoffRequest.model_validate(
        {
            "run_id": "run-1",
            "thread_id": "t-1",
            "request_type": "approval",
            "payload": {"kind": "approval", "action": {"name": "refund", "args": {"note": None}}},
            "metadata": {"trace": None},
        }
    )
    created = store.create(request, handoff_id=new_handoff_id()).handoff

    (raw,) = store.stored_fields(created.id, "request")
    stored = json.loads(raw or b"{}")

    assert "requester" not in stored and "args_schema" not in stored["payload"]["action"]
    assert stored["payload"]["action"]["args"] == {"note": None}
    assert stored["metadata"] == {"trace": None}
    assert store.get(created.id) == created
    assert created.payload.action.args_schema is None  # type: ignore[union-attr]


def test_idempotency_key_reused_for_another_run_is_a_conflict(
    redis: Redis, store: HandoffStore
) -> None:
    create(store, idempotency_key="k1")
    before = snapshot(redis)

    with pytest.raises(IdempotencyConflict, match="k1"):
        store.create(
            make_request(idempotency_key="k1", run_id="run-2"), handoff_id=new_handoff_id()
        )
    assert snapshot(redis) == before


# -- deciding -------------------------------------------------------------------------


def test_deciding_with_the_loaded_handoff_returns_it_decided_without_reading_back(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)

    decided = store.decide(handoff.id, Status.REJECTED, decided_by="U1", current=handoff)

    stored = store.get(handoff.id)
    assert decided.status is Status.REJECTED is stored.status
    assert decided.resume_data is not None and stored.resume_data is not None
    assert decided.resume_data.decided_by == "U1"
    assert decided.decided_at == stored.decided_at == decided.resume_data.decided_at
    assert decided.version == stored.version
    assert f"resume:{handoff.id}" in outbox(redis, store)


def test_a_decision_queues_the_resume_ahead_of_the_message_update(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")

    resume_at = redis.zscore(store.keys.outbox, f"resume:{handoff.id}")
    notify_at = redis.zscore(store.keys.outbox, f"notify:{handoff.id}")
    assert resume_at is not None and notify_at is not None
    assert resume_at < notify_at


def test_decision_closes_the_handoff_and_queues_its_resume(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)

    decided = store.decide(
        handoff.id, Status.APPROVED, decided_by="U1", via="slack", edited_args={"n": 25}
    )

    assert decided.status is Status.APPROVED
    assert decided.decided_at is not None
    assert decided.resume_data is not None
    assert decided.resume_data.outcome is Status.APPROVED
    assert decided.resume_data.decided_by == "U1"
    assert decided.resume_data.via == "slack"
    assert decided.resume_data.edited_args == {"n": 25}
    assert decided.resume_data.decided_at == decided.decided_at
    assert decided.resume.state is TaskState.QUEUED
    assert f"resume:{handoff.id}" in outbox(redis, store)
    assert events(store, handoff.id) == ["created", "decided"]
    assert store.get(handoff.id) == decided


def test_decision_without_resume_target_queues_no_resume(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store, resume_target=None)

    decided = store.decide(handoff.id, Status.REJECTED, decided_by="U1")

    assert decided.resume.state is TaskState.NONE
    assert f"resume:{handoff.id}" not in outbox(redis, store)


def test_second_decision_is_told_who_decided_first_and_changes_nothing(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    first = store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    hash_before = handoff_hash(redis, store, handoff.id)
    before = snapshot(redis)

    with pytest.raises(AlreadyDecided) as caught:
        store.decide(handoff.id, Status.REJECTED, decided_by="U2")

    assert caught.value.decided_by == "U1"
    assert caught.value.status == "approved"
    assert caught.value.decided_at == first.decided_at
    assert "U1" in str(caught.value)
    assert handoff_hash(redis, store, handoff.id) == hash_before
    assert snapshot(redis) == before


@pytest.mark.parametrize(
    ("request_type", "outcome", "extra"),
    [
        (RequestType.QUESTION, "answered", {}),
        (RequestType.QUESTION, "answered", {"answer": "   "}),
        (RequestType.QUESTION, "approved", {}),
        (RequestType.QUESTION, "answered", {"answer": "A", "edited_args": {"n": 1}}),
        (RequestType.APPROVAL, "answered", {"answer": "yes"}),
        (RequestType.APPROVAL, "rejected", {"edited_args": {"n": 1}}),
        (RequestType.APPROVAL, "approved", {"corrected_draft": "x"}),
        (RequestType.APPROVAL, "rejected", {"answer": "no"}),
        (RequestType.CORRECTION, "approved", {"edited_args": {"n": 1}}),
        (RequestType.CORRECTION, "rejected", {"corrected_draft": "x"}),
        (RequestType.CORRECTION, "answered", {"answer": "x"}),
        (RequestType.ESCALATION, "approved", {}),
        (RequestType.APPROVAL, "expired", {}),
        (RequestType.APPROVAL, "cancelled", {}),
        (RequestType.APPROVAL, "pending", {}),
        (RequestType.APPROVAL, "maybe", {}),
    ],
)
def test_decision_that_does_not_fit_the_request_type_is_refused_and_writes_nothing(
    redis: Redis,
    store: HandoffStore,
    request_type: RequestType,
    outcome: str,
    extra: dict[str, Any],
) -> None:
    handoff = create(store, request_type)
    before = snapshot(redis)

    with pytest.raises(InvalidDecision):
        store.decide(handoff.id, outcome, decided_by="U1", **extra)

    assert snapshot(redis) == before
    assert store.get(handoff.id).is_pending


@pytest.mark.parametrize(
    ("request_type", "outcome", "extra", "message"),
    [
        (RequestType.QUESTION, "answered", {}, "needs a non-empty answer"),
        (RequestType.ESCALATION, "answered", {"answer": " "}, "needs a non-empty answer"),
        (RequestType.QUESTION, "answered", {"answer": "A", "edited_args": {}}, "only apply to"),
        (RequestType.CORRECTION, "approved", {"edited_args": {}}, "only apply to approvals"),
        (RequestType.QUESTION, "approved", {}, "answered or rejected"),
    ],
)
def test_refused_decision_explains_what_this_handoff_needs(
    store: HandoffStore,
    request_type: RequestType,
    outcome: str,
    extra: dict[str, Any],
    message: str,
) -> None:
    handoff = create(store, request_type)

    with pytest.raises(InvalidDecision) as caught:
        store.decide(handoff.id, outcome, decided_by="U1", **extra)

    assert message in str(caught.value)
    assert "approval can be" not in str(caught.value)


def test_decision_without_decider_is_refused(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store)
    before = snapshot(redis)

    with pytest.raises(InvalidDecision, match="decided_by"):
        store.decide(handoff.id, Status.APPROVED, decided_by="")

    assert snapshot(redis) == before


@pytest.mark.parametrize(
    ("request_type", "outcome", "extra", "field", "value"),
    [
        (RequestType.APPROVAL, "approved", {"edited_args": {"n": 2}}, "edited_args", {"n": 2}),
        (RequestType.APPROVAL, "rejected", {"comment": "no"}, "comment", "no"),
        (RequestType.QUESTION, "answered", {"answer": "ACME"}, "answer", "ACME"),
        (RequestType.QUESTION, "rejected", {}, "outcome", Status.REJECTED),
        (RequestType.CORRECTION, "approved", {"corrected_draft": "Hi"}, "corrected_draft", "Hi"),
        (RequestType.CORRECTION, "rejected", {}, "outcome", Status.REJECTED),
    ],
)
def test_fitting_decision_is_handed_back_in_resume_data(
    store: HandoffStore,
    request_type: RequestType,
    outcome: str,
    extra: dict[str, Any],
    field: str,
    value: Any,
) -> None:
    handoff = create(store, request_type)

    decided = store.decide(handoff.id, outcome, decided_by="U1", **extra)

    assert decided.status is Status(outcome)
    assert decided.resume_data is not None
    assert getattr(decided.resume_data, field) == value


def test_deciding_an_unknown_handoff_raises_not_found(redis: Redis, store: HandoffStore) -> None:
    with pytest.raises(HandoffNotFound):
        store.decide(UNKNOWN_ID, Status.APPROVED, decided_by="U1")
    assert redis.dbsize() == 0


def test_rerun_of_the_same_decision_succeeds_instead_of_reporting_already_decided(
    redis: Redis, store: HandoffStore
) -> None:
    # redis-py resends a script whose reply was lost: the second run must report success.
    handoff = create(store)
    decision = ResumeData(decision_id="decision-1", outcome=Status.APPROVED, decided_by="U1")

    def close() -> Handoff:
        return store._close(
            handoff.id,
            decision,
            event="decided",
            resume=True,
            fitting_types="approval",
        )

    first = close()
    second = close()

    assert second.status is Status.APPROVED
    assert second.resume_data == first.resume_data
    assert events(store, handoff.id).count("decided") == 1
    assert outbox(redis, store).count(f"resume:{handoff.id}") == 1
    other = decision.model_copy(update={"decision_id": "decision-2", "decided_by": "U2"})
    with pytest.raises(AlreadyDecided, match="U1"):
        store._close(handoff.id, other, event="decided", resume=True, fitting_types="approval")


def test_fifty_concurrent_deciders_produce_exactly_one_decision_and_one_resume(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    deciders = 50
    barrier = threading.Barrier(deciders)
    winners: list[str] = []
    losers: list[AlreadyDecided] = []
    unexpected: list[BaseException] = []

    def decide(user: str) -> None:
        outcome = Status.APPROVED if int(user[1:]) % 2 else Status.REJECTED
        barrier.wait()
        try:
            store.decide(handoff.id, outcome, decided_by=user)
            winners.append(user)
        except AlreadyDecided as exc:
            losers.append(exc)
        except BaseException as exc:
            unexpected.append(exc)

    threads = [threading.Thread(target=decide, args=(f"U{i}",)) for i in range(deciders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert unexpected == []
    assert len(winners) == 1
    assert len(losers) == deciders - 1
    assert {exc.decided_by for exc in losers} == {winners[0]}
    final = store.get(handoff.id)
    assert final.resume_data is not None
    assert final.resume_data.decided_by == winners[0]
    assert {exc.status for exc in losers} == {final.status.value}
    assert outbox(redis, store).count(f"resume:{handoff.id}") == 1
    assert events(store, handoff.id).count("decided") == 1
    assert [e.event for e in store.global_audit()].count("decided") == 1


# -- escalations ----------------------------------------------------------------------


def test_escalation_must_be_claimed_before_it_is_resolved(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, RequestType.ESCALATION)
    before = snapshot(redis)

    with pytest.raises(ClaimRequired, match="claim"):
        store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="Refunded")

    assert snapshot(redis) == before
    claimed = store.claim(handoff.id, claimed_by="U1")
    assert claimed.claimed_by == "U1"
    assert claimed.claimed_at is not None
    resolved = store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="Refunded")
    assert resolved.status is Status.ANSWERED
    assert resolved.resume_data is not None
    assert resolved.resume_data.answer == "Refunded"
    assert events(store, handoff.id) == ["created", "claimed", "decided"]


def test_escalation_claimed_by_someone_else_cannot_be_resolved_or_claimed(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, RequestType.ESCALATION)
    store.claim(handoff.id, claimed_by="U1")
    before = snapshot(redis)

    with pytest.raises(ClaimedByOther) as resolving:
        store.decide(handoff.id, Status.ANSWERED, decided_by="U2", answer="Done")
    with pytest.raises(ClaimedByOther) as claiming:
        store.claim(handoff.id, claimed_by="U2")

    assert resolving.value.claimed_by == "U1"
    assert claiming.value.claimed_by == "U1"
    assert snapshot(redis) == before


def test_claiming_twice_by_the_same_person_is_a_no_op(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store, RequestType.ESCALATION)
    store.claim(handoff.id, claimed_by="U1")
    before = snapshot(redis)

    again = store.claim(handoff.id, claimed_by="U1")

    assert again.claimed_by == "U1"
    assert snapshot(redis) == before


def test_take_over_moves_the_claim_and_records_the_previous_owner(store: HandoffStore) -> None:
    handoff = create(store, RequestType.ESCALATION)
    store.claim(handoff.id, claimed_by="U1")

    taken = store.claim(handoff.id, claimed_by="U2", take_over=True)

    assert taken.claimed_by == "U2"
    claims = [e for e in store.audit_trail(handoff.id) if e.event == "claimed"]
    assert [(e.actor, e.detail.get("previous")) for e in claims] == [("U1", ""), ("U2", "U1")]
    with pytest.raises(ClaimedByOther):
        store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="mine")
    resolved = store.decide(handoff.id, Status.ANSWERED, decided_by="U2", answer="ok")
    assert resolved.status is Status.ANSWERED


def test_escalation_can_be_rejected_without_a_claim(store: HandoffStore) -> None:
    handoff = create(store, RequestType.ESCALATION)

    rejected = store.decide(handoff.id, Status.REJECTED, decided_by="U3", comment="not ours")

    assert rejected.status is Status.REJECTED
    assert rejected.claimed_by is None


def test_a_claimed_escalation_is_sent_back_only_by_its_claimer_or_an_admin(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, RequestType.ESCALATION)
    store.claim(handoff.id, claimed_by="U1")
    before = snapshot(redis)

    with pytest.raises(ClaimedByOther) as sending_back:
        store.decide(handoff.id, Status.REJECTED, decided_by="U2", comment="not mine")

    assert sending_back.value.claimed_by == "U1"
    assert snapshot(redis) == before
    admin = store.decide(
        handoff.id, Status.REJECTED, decided_by="U0ADMIN", comment="over", respect_claim=False
    )
    assert (admin.status, admin.resume_data and admin.resume_data.decided_by) == (
        Status.REJECTED,
        "U0ADMIN",
    )


def test_the_claimer_sends_a_claimed_escalation_back(store: HandoffStore) -> None:
    handoff = create(store, RequestType.ESCALATION)
    store.claim(handoff.id, claimed_by="U1")

    sent_back = store.decide(handoff.id, Status.REJECTED, decided_by="U1", comment="wrong team")

    assert sent_back.status is Status.REJECTED


def test_only_pending_escalations_can_be_claimed(redis: Redis, store: HandoffStore) -> None:
    approval = create(store, RequestType.APPROVAL)
    escalation = create(store, RequestType.ESCALATION)
    store.decide(escalation.id, Status.REJECTED, decided_by="U1")
    before = snapshot(redis)

    with pytest.raises(InvalidDecision, match="only escalations"):
        store.claim(approval.id, claimed_by="U1")
    with pytest.raises(AlreadyDecided) as caught:
        store.claim(escalation.id, claimed_by="U2")
    with pytest.raises(HandoffNotFound):
        store.claim(UNKNOWN_ID, claimed_by="U1")

    assert caught.value.decided_by == "U1"
    assert snapshot(redis) == before


# -- cancelling -----------------------------------------------------------------------


def test_cancel_resumes_the_run_with_cancelled_by_default(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, channel="C01")

    cancelled = store.cancel(handoff.id, cancelled_by="agent", reason="user left")

    assert cancelled.status is Status.CANCELLED
    assert cancelled.resume_data is not None
    assert cancelled.resume_data.outcome is Status.CANCELLED
    assert cancelled.resume_data.comment == "user left"
    assert cancelled.resume.state is TaskState.QUEUED
    assert f"resume:{handoff.id}" in outbox(redis, store)
    assert events(store, handoff.id) == ["created", "cancelled"]
    assert store.count_pending() == 0
    assert store.count_pending(store.keys.pending_by_channel("C01")) == 0


def test_cancel_without_resume_queues_nothing(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store)

    cancelled = store.cancel(handoff.id, cancelled_by="agent", resume=False)

    assert cancelled.status is Status.CANCELLED
    assert cancelled.resume.state is TaskState.NONE
    assert f"resume:{handoff.id}" not in outbox(redis, store)


def test_cancelling_a_decided_handoff_is_refused(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store)
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    before = snapshot(redis)

    with pytest.raises(AlreadyDecided, match="U1"):
        store.cancel(handoff.id, cancelled_by="agent")
    with pytest.raises(HandoffNotFound):
        store.cancel(UNKNOWN_ID, cancelled_by="agent")

    assert snapshot(redis) == before


# -- pending indexes and listing ------------------------------------------------------


def test_pending_indexes_list_a_new_handoff_and_drop_it_when_decided(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(
        store, channel="C01", run_id="run-7", reviewers=["U01", "S01", "U01"], expires_in_seconds=60
    )
    keys = store.keys
    indexes = [
        keys.pending_by_channel("C01"),
        keys.pending_by_run("run-7"),
        keys.pending_by_reviewer("U01"),
        keys.pending_by_reviewer("S01"),
        keys.pending_by_type("approval"),
    ]

    for index in indexes:
        assert store.index_range(index, "-", "+", 10) == [handoff.id], index
        assert [h.id for h in store.list_pending(index).items] == [handoff.id], index
    assert redis.zscore(keys.deadline_bucket(handoff.id), handoff.id) is not None
    assert store.count_pending(keys.pending_by_type("question")) == 0
    # No index of every pending handoff: its type's index is where "all" finds it.
    assert not redis.exists(keys.pending)
    assert store.pending_ids() == [handoff.id] and store.count_pending() == 1

    store.decide(handoff.id, Status.REJECTED, decided_by="U1")

    for index in indexes:
        assert store.index_size(index) == 0, index
        assert store.list_pending(index).items == []
    assert redis.zscore(keys.deadline_bucket(handoff.id), handoff.id) is None


def test_cursor_pagination_returns_every_pending_handoff_once_oldest_first(
    store: HandoffStore,
) -> None:
    base_ms = int(time.time() * 1000)
    created = [create(store, handoff_id=new_handoff_id(base_ms + i)).id for i in range(45)]

    pages = []
    cursor = None
    while True:
        page = store.list_pending(cursor=cursor, limit=20)
        pages.append([h.id for h in page.items])
        cursor = page.next_cursor
        if cursor is None:
            break

    assert [len(p) for p in pages] == [20, 20, 5]
    assert [i for page in pages for i in page] == created


def test_every_pending_handoff_of_every_type_is_listed_once_in_id_order(
    store: HandoffStore,
) -> None:
    """The listing of every pending handoff merges the four type indexes: each handoff
    once, oldest first, across pages whose cursors fall between types."""
    base_ms = int(time.time() * 1000)
    kinds = list(RequestType)
    created = [
        create(store, kinds[i % 3 if i % 7 else 3], handoff_id=new_handoff_id(base_ms + i)).id
        for i in range(23)
    ]

    listed, cursor = [], None
    while True:
        page = store.list_pending(cursor=cursor, limit=4)
        listed += [h.id for h in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert listed == created
    assert store.count_pending() == 23
    assert store.pending_ids(created[20], limit=5) == created[21:]
    store.cancel(created[7], cancelled_by="U1", resume=False)
    assert created[7] not in store.pending_ids(limit=30) and store.count_pending() == 22


def test_last_full_page_has_no_next_cursor(store: HandoffStore) -> None:
    for _ in range(40):
        create(store)

    first = store.list_pending(limit=20)
    second = store.list_pending(cursor=first.next_cursor, limit=20)

    assert first.next_cursor is not None
    assert len(second.items) == 20
    assert second.next_cursor is None


def test_handoff_decided_between_pages_is_skipped_without_losing_others(
    store: HandoffStore,
) -> None:
    base_ms = int(time.time() * 1000)
    ids = [create(store, handoff_id=new_handoff_id(base_ms + i)).id for i in range(6)]
    first = store.list_pending(limit=3)

    store.decide(ids[4], Status.APPROVED, decided_by="U1")
    store.decide(ids[0], Status.APPROVED, decided_by="U1")
    second = store.list_pending(cursor=first.next_cursor, limit=3)

    assert [h.id for h in first.items] == ids[:3]
    assert [h.id for h in second.items] == [ids[3], ids[5]]
    assert second.next_cursor is None


# -- deadlines ------------------------------------------------------------------------


def test_expire_due_expires_only_overdue_pending_handoffs(
    redis: Redis, store: HandoffStore
) -> None:
    overdue = create(store, expires_in_seconds=0.05, channel="C01")
    later = create(store, expires_in_seconds=60)
    forever = create(store)
    decided = create(store, expires_in_seconds=0.05)
    store.decide(decided.id, Status.REJECTED, decided_by="U1")
    time.sleep(0.1)

    assert store.expire_due() == [overdue.id]

    expired = store.get(overdue.id)
    assert expired.status is Status.EXPIRED
    assert expired.resume_data is not None
    assert expired.resume_data.outcome is Status.EXPIRED
    assert expired.resume_data.decided_by == "system"
    assert expired.resume.state is TaskState.QUEUED
    assert f"resume:{overdue.id}" in outbox(redis, store)
    assert events(store, overdue.id) == ["created", "expired"]
    assert store.count_pending(store.keys.pending_by_channel("C01")) == 0
    assert store.get(later.id).is_pending
    assert store.get(forever.id).is_pending
    assert store.get(decided.id).status is Status.REJECTED
    assert store.expire_due() == []


def test_expiry_never_approves(store: HandoffStore) -> None:
    handoffs = [
        create(store, request_type, expires_in_seconds=0.01) for request_type in RequestType
    ]
    time.sleep(0.05)

    store.expire_due()

    for handoff in handoffs:
        final = store.get(handoff.id)
        assert final.status is Status.EXPIRED
        assert final.resume_data is not None
        assert final.resume_data.outcome is Status.EXPIRED
        assert final.resume_data.edited_args is None
        assert final.resume_data.answer is None


def test_expired_handoff_cannot_be_decided_afterwards(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store, expires_in_seconds=0.01)
    time.sleep(0.05)
    store.expire_due()
    before = snapshot(redis)

    with pytest.raises(AlreadyDecided) as caught:
        store.decide(handoff.id, Status.APPROVED, decided_by="U1")

    assert caught.value.status == "expired"
    assert caught.value.decided_by == "system"
    assert snapshot(redis) == before


def test_a_decision_after_the_deadline_expires_the_handoff_without_a_sweeper(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store, expires_in_seconds=0.02)
    time.sleep(0.05)  # overdue, and no sweeper has run

    with pytest.raises(AlreadyDecided) as caught:
        store.decide(handoff.id, Status.APPROVED, decided_by="U1")

    assert caught.value.status == "expired"
    assert caught.value.decided_by == "system"
    final = store.get(handoff.id)
    assert final.status is Status.EXPIRED
    assert final.resume_data is not None
    assert final.resume_data.outcome is Status.EXPIRED
    assert events(store, handoff.id) == ["created", "expired"]
    assert outbox(redis, store).count(f"resume:{handoff.id}") == 1
    assert store.expire_due() == []  # the sweeper finds nothing left to do


def test_expiry_racing_decisions_lets_exactly_one_win_per_handoff(
    redis: Redis, store: HandoffStore
) -> None:
    """Half the handoffs fall due while decisions and two sweepers race: each handoff ends
    decided or expired, once, and whatever a decision sees past the deadline is expired."""
    handoffs = [create(store, expires_in_seconds=0.05 if i % 2 else 60) for i in range(40)]
    time.sleep(0.04)
    barrier = threading.Barrier(len(handoffs) + 2)
    decided: list[str] = []
    refused: dict[str, AlreadyDecided] = {}
    swept: list[str] = []

    def decide(handoff_id: str) -> None:
        barrier.wait()
        time.sleep(random.uniform(0, 0.02))
        try:
            store.decide(handoff_id, Status.APPROVED, decided_by="U1")
            decided.append(handoff_id)
        except AlreadyDecided as exc:
            refused[handoff_id] = exc

    def sweep() -> None:
        barrier.wait()
        for _ in range(10):
            swept.extend(store.expire_due(limit=5))
            time.sleep(0.003)

    threads = [threading.Thread(target=decide, args=(h.id,)) for h in handoffs]
    threads += [threading.Thread(target=sweep), threading.Thread(target=sweep)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    all_ids = {h.id for h in handoffs}
    assert set(decided) | set(refused) == all_ids
    assert not set(decided) & set(refused)
    assert len(swept) == len(set(swept))
    for handoff_id in all_ids:
        final = store.get(handoff_id)
        trail = events(store, handoff_id)
        if handoff_id in decided:
            assert final.status is Status.APPROVED
            assert handoff_id not in swept
        else:
            assert final.status is Status.EXPIRED
            assert refused[handoff_id].status == "expired"
        assert trail.count("decided") + trail.count("expired") == 1
        assert outbox(redis, store).count(f"resume:{handoff_id}") == 1
    never_due = {h.id for i, h in enumerate(handoffs) if not i % 2}
    assert never_due <= set(decided)


# -- delivery and resume tasks --------------------------------------------------------


def decided_with_resume(store: HandoffStore, tasks: TaskPolicy | None = None) -> Handoff:
    """An approved handoff whose resume is queued (with ``tasks`` instead of the defaults)."""
    handoff = store.create(make_request(), handoff_id=new_handoff_id(), tasks=tasks).handoff
    return store.decide(handoff.id, Status.APPROVED, decided_by="U1")


def test_resume_attempt_runs_under_a_lease_and_completes(redis: Redis, store: HandoffStore) -> None:
    handoff = decided_with_resume(store)

    start = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    assert start.action == "run"
    assert start.attempt == 1
    assert start.handoff is not None
    assert start.handoff.resume.state is TaskState.RUNNING
    assert start.handoff.status is Status.APPROVED

    assert store.finish_task(handoff.id, TaskKind.RESUME, attempt=1) == "completed"
    done = store.get(handoff.id)
    assert done.resume.state is TaskState.COMPLETED
    assert done.resume.completed_at is not None
    assert f"resume:{handoff.id}" not in outbox(redis, store)
    assert events(store, handoff.id)[-2:] == ["resume_started", "resumed"]
    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2").action == "completed"


def test_second_attempt_while_lease_is_live_is_told_busy(redis: Redis, store: HandoffStore) -> None:
    handoff = decided_with_resume(store)
    store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    before = snapshot(redis)

    busy = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2")

    assert busy.action == "busy"
    assert busy.handoff is None
    assert snapshot(redis) == before


def test_begin_with_the_same_run_token_returns_the_same_attempt(store: HandoffStore) -> None:
    handoff = decided_with_resume(store)

    first = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    again = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")

    assert (first.action, again.action) == ("run", "run")
    assert again.attempt == first.attempt == 1
    assert events(store, handoff.id).count("resume_started") == 1


def test_stale_attempt_cannot_finish_after_its_lease_lapsed(
    redis: Redis, store: HandoffStore
) -> None:
    quick = TaskPolicy(resume_timeout_seconds=0.05, lease_grace_seconds=0.01)
    handoff = decided_with_resume(store, quick)
    old = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    time.sleep(0.1)
    new = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2")
    assert (old.attempt, new.action, new.attempt) == (1, "run", 2)
    before = snapshot(redis)

    assert store.finish_task(handoff.id, TaskKind.RESUME, attempt=1) == "stale"
    assert store.finish_task(handoff.id, TaskKind.RESUME, attempt=1, error="late") == "stale"

    assert snapshot(redis) == before
    assert store.finish_task(handoff.id, TaskKind.RESUME, attempt=2) == "completed"


def test_finishing_an_attempt_that_never_began_is_stale(redis: Redis, store: HandoffStore) -> None:
    handoff = decided_with_resume(store)
    before = snapshot(redis)

    assert store.finish_task(handoff.id, TaskKind.RESUME, attempt=1) == "stale"
    assert snapshot(redis) == before


def test_failed_attempts_retry_with_doubling_capped_backoff_then_fail(
    redis: Redis, store: HandoffStore
) -> None:
    policy = TaskPolicy(resume_max_attempts=6, backoff_seconds=0.1, backoff_max_seconds=0.5)
    handoff = decided_with_resume(store, policy)
    member = f"resume:{handoff.id}"

    verdicts = []
    for attempt in range(1, 7):
        start = store.begin_task(handoff.id, TaskKind.RESUME, run_token=f"job-{attempt}")
        assert (start.action, start.attempt) == ("run", attempt)
        now = server_ms(redis)
        verdicts.append(
            store.finish_task(handoff.id, TaskKind.RESUME, attempt=attempt, error=f"boom {attempt}")
        )
        if attempt == 1:
            due_in = redis.zscore(store.keys.outbox, member) - now
            assert 90 <= due_in <= 150
            assert store.get(handoff.id).resume.state is TaskState.RETRYING

    assert verdicts == ["retrying"] * 5 + ["failed"]
    delays = [
        e.detail["retry_in_ms"]
        for e in store.audit_trail(handoff.id)
        if e.event == "resume_attempt_failed"
    ]
    assert delays == [100, 200, 400, 500, 500]
    failed = store.get(handoff.id)
    assert failed.resume.state is TaskState.FAILED
    assert failed.resume.last_error == "boom 6"
    assert member not in outbox(redis, store)
    assert store.failed_tasks() == [(TaskKind.RESUME, handoff.id)]
    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-7").action == "failed"


def test_retry_task_requeues_a_failed_resume_for_another_round(
    redis: Redis, store: HandoffStore, fast_tasks: TaskPolicy
) -> None:
    handoff = decided_with_resume(store)
    for attempt in range(1, fast_tasks.resume_max_attempts + 1):
        store.begin_task(handoff.id, TaskKind.RESUME, run_token=f"job-{attempt}")
        store.finish_task(handoff.id, TaskKind.RESUME, attempt=attempt, error="down")
    assert store.get(handoff.id).resume.state is TaskState.FAILED

    retried = store.retry_task(handoff.id, TaskKind.RESUME, requested_by="U5")

    assert retried.resume.state is TaskState.QUEUED
    assert retried.resume.max_attempts == 2 * fast_tasks.resume_max_attempts
    assert store.failed_tasks() == []
    assert f"resume:{handoff.id}" in outbox(redis, store)
    requested = store.audit_trail(handoff.id)[-1]
    assert (requested.event, requested.actor) == ("resume_retry_requested", "U5")
    start = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-again")
    assert (start.action, start.attempt) == ("run", fast_tasks.resume_max_attempts + 1)


def test_retry_failed_requeues_whatever_failed_delivery_included(
    redis: Redis, store: HandoffStore, fast_tasks: TaskPolicy
) -> None:
    handoff = store.create(make_request(), handoff_id=new_handoff_id(), tasks=fast_tasks).handoff
    # Decided before it was shown (through the API): a failed delivery leaves it decided.
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    for attempt in range(1, fast_tasks.delivery_max_attempts + 1):
        store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"job-{attempt}")
        store.finish_task(handoff.id, TaskKind.DELIVER, attempt=attempt, error="slack down")
    assert store.get(handoff.id).delivery.state is TaskState.FAILED

    assert store.retry_failed(handoff.id, requested_by="U5") == [TaskKind.DELIVER]

    assert store.get(handoff.id).delivery.state is TaskState.QUEUED
    assert f"deliver:{handoff.id}" in outbox(redis, store)
    assert store.failed_tasks() == []
    before = snapshot(redis)
    with pytest.raises(NotRetryable, match="nothing of handoff"):
        store.retry_failed(handoff.id, requested_by="U5")
    assert snapshot(redis) == before


def fail_delivery(
    store: HandoffStore, handoff_id: str, *, attempt: int, error: str, permanent: bool = False
) -> str:
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token=f"job-{attempt}")
    assert (start.action, start.attempt) == ("run", attempt)
    return store.finish_task(
        handoff_id, TaskKind.DELIVER, attempt=attempt, error=error, permanent=permanent
    )


def test_a_permanent_delivery_failure_closes_the_handoff_undeliverable_at_once(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    reason = "Slack refused the message to C0APPROVALS: is_archived (the channel is archived)"

    verdict = fail_delivery(store, handoff.id, attempt=1, error=reason, permanent=True)

    assert verdict == "undeliverable"
    closed = store.get(handoff.id)
    assert closed.status is Status.UNDELIVERABLE
    assert closed.resume_data is not None
    assert (closed.resume_data.outcome, closed.resume_data.decided_by) == (
        Status.UNDELIVERABLE,
        "system",
    )
    assert closed.resume_data.comment == reason
    assert closed.delivery.state is TaskState.FAILED
    assert closed.delivery.attempt == 1  # not retried: no attempt could have helped
    assert closed.resume.state is TaskState.QUEUED  # the run is told, like any decision
    assert f"resume:{handoff.id}" in outbox(redis, store)
    assert f"deliver:{handoff.id}" not in outbox(redis, store)
    assert events(store, handoff.id)[-2:] == ["delivery_failed", "undeliverable"]
    assert store.count_pending() == 0
    with pytest.raises(AlreadyDecided):
        store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    with pytest.raises(AlreadyDecided):
        store.reassign(handoff.id, by="U9", channel="C0OTHER")


def test_the_last_failed_delivery_attempt_closes_the_handoff_undeliverable(
    store: HandoffStore, fast_tasks: TaskPolicy
) -> None:
    handoff = create(store)
    verdicts = [
        fail_delivery(store, handoff.id, attempt=attempt, error=f"SlackApiError: down {attempt}")
        for attempt in range(1, fast_tasks.delivery_max_attempts + 1)
    ]

    assert verdicts == ["retrying"] * (fast_tasks.delivery_max_attempts - 1) + ["undeliverable"]
    closed = store.get(handoff.id)
    assert closed.status is Status.UNDELIVERABLE
    assert closed.resume_data.comment == f"SlackApiError: down {fast_tasks.delivery_max_attempts}"


def test_a_delivery_lost_with_no_attempts_left_closes_the_handoff_undeliverable(
    store: HandoffStore,
) -> None:
    quick = TaskPolicy(
        delivery_max_attempts=1, delivery_timeout_seconds=0.05, lease_grace_seconds=0.01
    )
    handoff = store.create(make_request(), handoff_id=new_handoff_id(), tasks=quick).handoff
    assert store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1").action == "run"
    time.sleep(0.1)  # the worker died: its lease lapses

    assert store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2").action == "failed"
    assert store.get(handoff.id).status is Status.UNDELIVERABLE


def test_a_failed_delivery_of_a_decided_handoff_leaves_its_decision(store: HandoffStore) -> None:
    handoff = create(store)
    store.decide(handoff.id, Status.REJECTED, decided_by="U1")

    verdict = fail_delivery(store, handoff.id, attempt=1, error="is_archived", permanent=True)

    assert verdict == "failed"
    assert store.get(handoff.id).status is Status.REJECTED


def test_an_undeliverable_handoff_is_not_posted_again_by_a_retry(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    fail_delivery(store, handoff.id, attempt=1, error="not_in_channel", permanent=True)
    before = snapshot(redis)

    with pytest.raises(NotRetryable, match=r"undeliverable.*ask again"):
        store.retry_failed(handoff.id, requested_by="U5")
    with pytest.raises(NotRetryable, match="undeliverable"):
        store.retry_task(handoff.id, TaskKind.DELIVER, requested_by="U5")
    assert snapshot(redis) == before


def test_work_asked_for_during_the_last_delivery_attempt_gets_a_fresh_round(
    redis: Redis, store: HandoffStore
) -> None:
    one = TaskPolicy(delivery_max_attempts=1)
    handoff = store.create(make_request(), handoff_id=new_handoff_id(), tasks=one).handoff
    assert store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1").action == "run"
    # An admin moves it elsewhere while its last attempt fails to post to the old channel.
    store.reassign(handoff.id, by="U9", channel="C0OTHER")

    verdict = store.finish_task(handoff.id, TaskKind.DELIVER, attempt=1, error="is_archived")

    assert verdict == "retrying"
    moved = store.get(handoff.id)
    assert moved.status is Status.PENDING
    assert moved.delivery.state is TaskState.QUEUED
    assert f"deliver:{handoff.id}" in outbox(redis, store)
    assert store.failed_tasks() == []
    start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2")
    assert (start.action, start.attempt) == ("run", 2)
    assert start.handoff is not None and start.handoff.channel == "C0OTHER"


def test_a_message_update_asked_for_during_its_last_attempt_is_not_dropped(
    redis: Redis, store: HandoffStore
) -> None:
    one = TaskPolicy(delivery_max_attempts=1)
    handoff = store.create(
        make_request(RequestType.ESCALATION), handoff_id=new_handoff_id(), tasks=one
    ).handoff
    store.claim(handoff.id, claimed_by="U1")  # queues a message update
    assert store.begin_task(handoff.id, TaskKind.NOTIFY, run_token="job-1").action == "run"
    store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="done")  # marks it dirty

    verdict = store.finish_task(handoff.id, TaskKind.NOTIFY, attempt=1, error="slack down")

    assert verdict == "retrying"
    assert store.get(handoff.id).notify.state is TaskState.QUEUED
    assert f"notify:{handoff.id}" in outbox(redis, store)


def test_only_a_failed_task_can_be_retried(redis: Redis, store: HandoffStore) -> None:
    pending = create(store)
    decided = decided_with_resume(store)
    before = snapshot(redis)

    with pytest.raises(NotRetryable, match="none"):
        store.retry_task(pending.id, TaskKind.RESUME, requested_by="U1")
    with pytest.raises(NotRetryable, match="queued"):
        store.retry_task(decided.id, TaskKind.RESUME, requested_by="U1")
    with pytest.raises(HandoffNotFound):
        store.retry_task(UNKNOWN_ID, TaskKind.RESUME, requested_by="U1")

    assert snapshot(redis) == before


def test_attempt_lost_with_no_attempts_left_is_marked_failed_on_next_begin(
    redis: Redis, store: HandoffStore
) -> None:
    policy = TaskPolicy(resume_max_attempts=1, resume_timeout_seconds=0.02, lease_grace_seconds=0)
    handoff = decided_with_resume(store, policy)
    store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    time.sleep(0.05)

    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2").action == "failed"
    failed = store.get(handoff.id)
    assert failed.resume.state is TaskState.FAILED
    assert "never finished" in (failed.resume.last_error or "")
    assert store.failed_tasks() == [(TaskKind.RESUME, handoff.id)]


def test_begin_task_reports_why_there_is_nothing_to_run(store: HandoffStore) -> None:
    pending = create(store)

    assert store.begin_task(pending.id, TaskKind.RESUME, run_token="j").action == "none"
    missing = store.begin_task(UNKNOWN_ID, TaskKind.RESUME, run_token="j")
    assert missing.action == "missing"


def test_successful_delivery_stores_the_message_refs(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store)

    start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1")
    verdict = store.finish_task(
        handoff.id, TaskKind.DELIVER, attempt=start.attempt, message_refs={"C1": "1700.0001"}
    )

    assert verdict == "completed"
    delivered = store.get(handoff.id)
    assert delivered.delivery.state is TaskState.COMPLETED
    assert delivered.message_refs == {"C1": "1700.0001"}
    assert f"deliver:{handoff.id}" not in outbox(redis, store)
    assert delivered.is_pending


def test_claim_due_hides_claimed_entries_for_the_visibility_time(
    redis: Redis, store: HandoffStore, fast_tasks: TaskPolicy
) -> None:
    handoff = create(store)

    first = store.claim_due(limit=10, visibility_seconds=0.2)
    hidden = store.claim_due(limit=10, visibility_seconds=0.2)
    time.sleep(0.25)
    again = store.claim_due(limit=10, visibility_seconds=0.2)

    assert [(t.kind, t.handoff_id) for t in first] == [(TaskKind.DELIVER, handoff.id)]
    assert first[0].timeout_seconds == fast_tasks.delivery_timeout_seconds
    assert hidden == []
    assert [(t.kind, t.handoff_id) for t in again] == [(TaskKind.DELIVER, handoff.id)]


def test_claim_due_takes_at_most_limit_and_drops_entries_of_vanished_handoffs(
    redis: Redis, store: HandoffStore
) -> None:
    ids = {create(store).id for _ in range(5)}
    redis.zadd(store.keys.outbox, {f"resume:{UNKNOWN_ID}": 0})

    taken = store.claim_due(limit=3, visibility_seconds=60)
    rest = store.claim_due(limit=10, visibility_seconds=60)

    claimed = [t.handoff_id for t in taken + rest]
    assert len(taken) <= 3
    assert sorted(claimed) == sorted(ids)
    assert f"resume:{UNKNOWN_ID}" not in outbox(redis, store)


# -- retention ------------------------------------------------------------------------


def test_purge_removes_decided_handoffs_only_once_their_resume_is_done(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=0.05, tasks=fast_tasks))
    no_resume = create(store, resume_target=None, idempotency_key="k-no-resume")
    resumed = create(store)
    resume_queued = create(store)
    resume_failed = create(store)
    pending = create(store)
    for handoff in (no_resume, resumed, resume_queued, resume_failed):
        store.decide(handoff.id, Status.REJECTED, decided_by="U1")
    store.begin_task(resumed.id, TaskKind.RESUME, run_token="j")
    store.finish_task(resumed.id, TaskKind.RESUME, attempt=1)
    time.sleep(0.1)
    # Failed just now, well after its decision: kept for the retention period from here.
    for attempt in range(1, fast_tasks.resume_max_attempts + 1):
        store.begin_task(resume_failed.id, TaskKind.RESUME, run_token=f"j{attempt}")
        store.finish_task(resume_failed.id, TaskKind.RESUME, attempt=attempt, error="down")

    assert store.purge_decided() == 2

    for gone in (no_resume, resumed):
        with pytest.raises(HandoffNotFound):
            store.get(gone.id)
        assert not redis.exists(store.keys.audit(gone.id))
        assert not redis.exists(store.keys.handoff_body(gone.id))
        assert redis.zscore(store.keys.retention, gone.id) is None
        assert f"deliver:{gone.id}" not in outbox(redis, store)
    assert store.created_under("k-no-resume") is None
    assert store.get(resume_queued.id).resume.state is TaskState.QUEUED
    assert store.get(resume_failed.id).resume.state is TaskState.FAILED
    assert store.get(pending.id).is_pending
    # Kept handoffs are looked at again later, not on every sweep.
    recheck = redis.zscore(store.keys.retention, resume_queued.id)
    assert recheck is not None and recheck > server_ms(redis) + 60_000
    assert store.purge_decided() == 0


def test_nothing_is_purged_before_retention_passes(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store, resume_target=None)
    store.decide(handoff.id, Status.REJECTED, decided_by="U1")

    assert store.purge_decided() == 0
    assert store.get(handoff.id).status is Status.REJECTED


def test_idempotency_key_of_a_purged_handoff_can_be_used_again(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=0.01, tasks=fast_tasks))
    first = create(store, resume_target=None, idempotency_key="k1")
    store.decide(first.id, Status.REJECTED, decided_by="U1")
    time.sleep(0.05)
    store.purge_decided()

    second = store.create(make_request(idempotency_key="k1"), handoff_id=new_handoff_id())

    assert second.created
    assert second.handoff.id != first.id


def _run_like_a_job(
    store: HandoffStore, handoff_id: str, kind: TaskKind, refs: dict[str, Any], *links: str
) -> None:
    """What ``worker.jobs`` does with the notifier's answer: link each message
    (``channel:ts``), then record the refs."""
    start = store.begin_task(handoff_id, kind, run_token=new_handoff_id())
    assert start.action == "run", start.action
    for link in links:
        store.link_message(handoff_id, *link.split(":"))
    assert store.finish_task(handoff_id, kind, attempt=start.attempt, message_refs=refs) == (
        "completed"
    )


def _link_keys(redis: Redis, store: HandoffStore) -> dict[str, str]:
    """Every message link of the namespace (``<channel>:<ts>`` -> handoff id): in their
    buckets, in the one hash they were kept in before, and under keys of their own as links
    were kept before that."""
    links = {
        k.decode(): v.decode() for k, v in redis.hgetall(store.keys.message_links_before).items()
    }
    for bucket in redis.scan_iter(match=store.keys.prefix + "msglinks:*"):
        links.update({k.decode(): v.decode() for k, v in redis.hgetall(bucket).items()})
    for key in redis.scan_iter(match=store.keys.prefix + "msg:*"):
        links[key.decode().removeprefix(store.keys.prefix + "msg:")] = redis.get(key).decode()
    return links


def test_purge_removes_every_message_link_of_a_handoff(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=0.05, tasks=fast_tasks))
    handoff = create(
        store,
        RequestType.QUESTION,
        resume_target=None,
        channel="C01",
        escalate_after_seconds=0.001,
        escalate_to="C0ONCALL",
    )
    kept = create(store, RequestType.QUESTION, resume_target=None)
    # Posted to C01, reassigned to C02 (the C01 message is left pointing there), then
    # escalated: a copy in C0ONCALL. Three messages, three links.
    _run_like_a_job(store, handoff.id, TaskKind.DELIVER, {"channel": "C01", "ts": "1.1"}, "C01:1.1")
    store.reassign(handoff.id, by="U0ADMIN", channel="C02")
    moved = {"channel": "C01", "ts": "1.1", "moved_to": "C02"}
    reposted = {"channel": "C02", "ts": "2.2", "copies": [moved], "record_ts": None}
    _run_like_a_job(store, handoff.id, TaskKind.DELIVER, reposted, "C02:2.2")
    escalated = {**reposted, "copies": [moved, {"channel": "C0ONCALL", "ts": "3.3"}]}
    _run_like_a_job(store, handoff.id, TaskKind.ESCALATE, escalated, "C01:1.1", "C0ONCALL:3.3")
    _run_like_a_job(store, kept.id, TaskKind.DELIVER, {"channel": "C01", "ts": "4.4"}, "C01:4.4")
    assert store.handoff_for_message("C0ONCALL", "3.3") == handoff.id
    store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="EU")
    time.sleep(0.1)

    assert store.purge_decided() == 1

    for channel, ts in [("C01", "1.1"), ("C02", "2.2"), ("C0ONCALL", "3.3")]:
        assert store.handoff_for_message(channel, ts) is None
    # Nothing of the purged handoff is left; the pending one keeps its link.
    assert _link_keys(redis, store) == {"C01:4.4": kept.id}
    before = snapshot(redis)
    assert store.purge_decided() == 0  # idempotent: a second sweep finds nothing to do
    assert snapshot(redis) == before


def test_purge_removes_the_links_its_message_refs_name_and_no_other(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=0.05, tasks=fast_tasks))
    handoff = create(store, resume_target=None)
    refs = {
        "channel": "C2",
        "ts": "2.2",
        "copies": [
            {"channel": "C1", "ts": "1.1", "moved_to": "C2"},
            {"channel": "C3", "ts": "3.3"},
        ],
    }
    _run_like_a_job(store, handoff.id, TaskKind.DELIVER, refs)
    for channel, ts in [("C1", "1.1"), ("C2", "2.2"), ("C3", "3.3")]:
        redis.set(store.keys.message_link(channel, ts), handoff.id)  # as link_message once did
    redis.set(store.keys.message_link("C9", "9.9"), "ho_someone_else")
    store.decide(handoff.id, Status.REJECTED, decided_by="U1")
    time.sleep(0.1)

    assert store.purge_decided() == 1

    assert _link_keys(redis, store) == {"C9:9.9": "ho_someone_else"}


# -- audit ----------------------------------------------------------------------------


def test_audit_trail_records_each_step_of_a_handoff_in_order(store: HandoffStore) -> None:
    handoff = create(store, RequestType.ESCALATION)
    other = create(store)
    store.begin_task(handoff.id, TaskKind.DELIVER, run_token="d1")
    store.finish_task(handoff.id, TaskKind.DELIVER, attempt=1)
    store.record_audit(handoff.id, "viewed_full", actor="U2", detail={"surface": "modal"})
    store.claim(handoff.id, claimed_by="U1")
    store.decide(handoff.id, Status.ANSWERED, decided_by="U1", answer="done")
    store.begin_task(handoff.id, TaskKind.RESUME, run_token="r1")
    store.finish_task(handoff.id, TaskKind.RESUME, attempt=1)

    trail = store.audit_trail(handoff.id)

    assert [e.event for e in trail] == [
        "created",
        "delivery_started",
        "delivered",
        "viewed_full",
        "claimed",
        "decided",
        "resume_started",
        "resumed",
    ]
    assert {e.handoff_id for e in trail} == {handoff.id}
    assert [e.at for e in trail] == sorted(e.at for e in trail)
    assert trail[3].actor == "U2"
    assert trail[3].detail == {"surface": "modal"}
    assert trail[5].actor == "U1"
    assert trail[5].detail == {"status": "answered"}
    assert [e.event for e in store.audit_trail(other.id)] == ["created"]


def test_global_audit_lists_every_handoff_and_filters_by_time(store: HandoffStore) -> None:
    early = create(store)
    time.sleep(0.02)
    since = datetime.now(UTC)
    time.sleep(0.02)
    late = create(store)
    store.decide(late.id, Status.APPROVED, decided_by="U1")

    everything = store.global_audit()
    recent = store.global_audit(since=since)

    assert [(e.event, e.handoff_id) for e in everything] == [
        ("created", early.id),
        ("created", late.id),
        ("decided", late.id),
    ]
    assert [(e.event, e.handoff_id) for e in recent] == [
        ("created", late.id),
        ("decided", late.id),
    ]
    assert len(store.global_audit(count=2)) == 2


class _CountingRedis:
    """Counts the XRANGE / XREVRANGE calls made through it (everything else passes on)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self.stream_reads = 0

    def __getattr__(self, name: str) -> Any:
        if name in ("xrange", "xrevrange"):
            self.stream_reads += 1
        return getattr(self._redis, name)


def test_audit_pages_read_the_stream_in_pages_both_ways_with_ids(
    store: HandoffStore, redis: Redis
) -> None:
    made = [create(store) for _ in range(7)]
    everything = list(store.audit_entries())
    assert [e.event.handoff_id for e in everything] == [h.id for h in made]
    ids = [e.id for e in everything]
    stream: list[Any] = redis.xrange(store.keys.global_audit) or []
    assert ids == [entry_id.decode() for entry_id, _ in stream]  # stream ids, as text
    # Pending handoffs' events are pointers into their trails, read back as whole events.
    assert all(set(fields) == {b"p", b"i"} for _, fields in stream)
    assert [e.event for e in everything] == [store.audit_trail(h.id)[0] for h in made]

    counting = _CountingRedis(redis)
    store.redis = counting  # type: ignore[assignment]
    pages = list(store.audit_pages(batch=3))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert counting.stream_reads == 3  # the short page ends it: no empty read

    counting.stream_reads = 0
    newest = list(store.audit_entries(newest_first=True, limit=4, batch=1000))
    assert [e.id for e in newest] == ids[::-1][:4]
    assert counting.stream_reads == 1  # a limit below the batch is one round trip

    counting.stream_reads = 0
    assert [e.id for e in store.audit_entries(after=ids[4], batch=2)] == ids[5:]
    assert [e.id for e in store.audit_entries(after=ids[4], newest_first=True)] == [
        ids[6],
        ids[5],
    ]
    assert [e.id for e in store.audit_entries(after=ids[2], limit=2, batch=2)] == ids[3:5]
    assert list(store.audit_entries(after=ids[-1])) == []
    with pytest.raises(ValueError, match="after or since"):
        list(store.audit_entries(after=ids[0], since=datetime.now(UTC)))


def test_audit_position_is_before_every_later_entry(store: HandoffStore) -> None:
    empty = store.audit_position()
    first = create(store)
    assert [e.event.handoff_id for e in store.audit_entries(after=empty)] == [first.id]

    position = store.audit_position()
    assert position == next(store.audit_entries(newest_first=True, limit=1)).id
    second = create(store)
    assert [e.event.handoff_id for e in store.audit_entries(after=position)] == [second.id]


def test_record_audit_on_unknown_handoff_raises_not_found(
    redis: Redis, store: HandoffStore
) -> None:
    with pytest.raises(HandoffNotFound, match=UNKNOWN_ID):
        store.record_audit(UNKNOWN_ID, "viewed_full", actor="U1")
    assert redis.dbsize() == 0


# -- reads ----------------------------------------------------------------------------


def test_get_many_returns_existing_handoffs_in_the_order_asked(store: HandoffStore) -> None:
    a, b = create(store), create(store)

    found = store.get_many([b.id, UNKNOWN_ID, a.id])

    assert [h.id for h in found] == [b.id, a.id]


def test_wait_for_work_wakes_on_new_work_and_times_out_without(store: HandoffStore) -> None:
    create(store)

    assert store.wait_for_work(timeout=0.05) is True
    started = time.monotonic()
    assert store.wait_for_work(timeout=0.1) is False
    assert time.monotonic() - started >= 0.09


def _fail(store: HandoffStore, handoff_id: str, kind: TaskKind, attempts: int) -> None:
    """Run every attempt of ``kind`` to a failure, as jobs whose Slack (or target) is down."""
    for _ in range(attempts):
        start = store.begin_task(handoff_id, kind, run_token=new_handoff_id())
        assert start.action == "run", start.action
        store.finish_task(handoff_id, kind, attempt=start.attempt, error="down")
    assert (kind.value, handoff_id) in [(k.value, i) for k, i in store.failed_tasks()]


def _traces(redis: Redis, store: HandoffStore, handoff_id: str) -> list[str]:
    """Every key of the namespace that names ``handoff_id``, and every sorted-set entry."""
    found = []
    for key in redis.scan_iter(match=store.keys.prefix + "*"):
        name = key.decode()
        if handoff_id in name:
            found.append(name)
        elif redis.type(key) == b"zset":
            found += [
                f"{name} {m.decode()}" for m in redis.zrange(key, 0, -1) if handoff_id.encode() in m
            ]
        elif redis.type(key) == b"string" and redis.get(key) == handoff_id.encode():
            found.append(f"{name} -> {handoff_id}")
    return found


def test_after_the_retention_purge_no_key_or_entry_of_a_handoff_remains(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    store = HandoffStore(redis, StoreConfig(retention_seconds=0.3, tasks=fast_tasks))
    handoff = create(
        store,
        RequestType.QUESTION,
        idempotency_key="k-traces",
        remind_after_seconds=0.001,
        max_reminders=1,
        escalate_after_seconds=0.001,
        escalate_to="C0ONCALL",
    )
    attempts = fast_tasks.resume_max_attempts
    _run_like_a_job(store, handoff.id, TaskKind.DELIVER, {"channel": "C01", "ts": "1.1"}, "C01:1.1")
    # Reminders and the escalation fail for good while it is pending; people click at will.
    _fail(store, handoff.id, TaskKind.REMIND, attempts)
    _fail(store, handoff.id, TaskKind.ESCALATE, attempts)
    for _ in range(250):
        store.record_audit(handoff.id, "denied", actor="U0MALLORY", detail={"via": "button"})
    store.decide(handoff.id, Status.ANSWERED, decided_by="U01", answer="EU")
    _fail(store, handoff.id, TaskKind.RESUME, attempts)  # nobody retries it
    assert _traces(redis, store, handoff.id)

    time.sleep(0.35)  # retention past the decision, and past the resume's failure
    assert store.purge_decided() == 1

    assert _traces(redis, store, handoff.id) == []
    # The audit stream (trimmed to the retention period itself) records how it ended.
    [end] = [e for e in store.global_audit() if e.handoff_id == handoff.id]
    assert end.event == "purged_unresumed"
    assert end.detail["outcome"] == "answered" and end.detail["decided_by"] == "U01"
    assert end.detail["run_id"] == handoff.run_id and end.detail["error"] == "down"


def test_a_handoffs_own_trail_stops_taking_repeated_events_at_200(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    for _ in range(230):
        store.record_audit(handoff.id, "viewed_full", actor="U0BOB", detail={})
    store.decide(handoff.id, Status.APPROVED, decided_by="U01")

    trail = events(store, handoff.id)
    assert len(trail) == 201 and trail.count("viewed_full") == 199  # after "created"
    assert trail[-1] == "decided"  # what changes the handoff is always kept
    streamed = [e.event for e in store.global_audit() if e.handoff_id == handoff.id]
    assert streamed.count("viewed_full") == 230


def test_a_refused_post_after_a_reassignment_leaves_the_posted_handoff_pending(
    redis: Redis, store: HandoffStore
) -> None:
    """An admin reassigns a posted handoff to a channel that refuses it (archived, the bot
    not invited): the first message still shows it, with its buttons, so it stays decidable
    there and the failed delivery waits for an admin; the run is not told undeliverable."""
    handoff = create(store, channel="C0GOOD")
    _run_like_a_job(
        store, handoff.id, TaskKind.DELIVER, {"channel": "C0GOOD", "ts": "1.1"}, "C0GOOD:1.1"
    )
    store.reassign(handoff.id, by="U0ADMIN", channel="C0ARCHIVED")
    start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="again")

    outcome = store.finish_task(
        handoff.id, TaskKind.DELIVER, attempt=start.attempt, error="is_archived", permanent=True
    )

    assert outcome == "failed"
    assert store.get(handoff.id).is_pending
    assert (TaskKind.DELIVER, handoff.id) in store.failed_tasks()
    decided = store.decide(handoff.id, Status.APPROVED, decided_by="U0REVIEWER")
    assert decided.status is Status.APPROVED


# -- Slack's rate limits and lost answers: what an attempt leaves for the next ----------


def test_a_rate_limited_attempt_is_put_off_for_retry_after_without_spending_an_attempt(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)  # 3 delivery attempts (fast_tasks)
    for number in range(1, 6):
        start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"job-{number}")
        assert start.action == "run", f"deferral {number} spent the delivery's attempts"
        verdict = store.finish_task(
            handoff.id,
            TaskKind.DELIVER,
            attempt=start.attempt,
            error="Slack rate-limits chat.postMessage",
            defer_seconds=30,
        )
        assert verdict == "deferred"
        due_at = redis.zscore(store.keys.outbox, f"deliver:{handoff.id}")
        assert due_at is not None
        assert 29_000 <= due_at - redis.time()[0] * 1000 <= 31_000, "due after Retry-After"
        redis.zadd(store.keys.outbox, {f"deliver:{handoff.id}": 0})  # time passes

    progress = store.get(handoff.id).delivery
    assert progress.state is TaskState.RETRYING
    assert progress.max_attempts - progress.attempt == 3, "five deferrals spent no attempt"
    assert events(store, handoff.id).count("delivery_deferred") == 5
    assert store.get(handoff.id).status is Status.PENDING


def test_deferrals_past_the_most_of_a_round_count_as_failed_attempts(
    redis: Redis, store: HandoffStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("store.defaults.MAX_DEFERRALS", 2)
    handoff = create(store)
    verdicts = []
    for number in range(1, 6):
        start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"job-{number}")
        if start.action != "run":
            break
        verdicts.append(
            store.finish_task(
                handoff.id, TaskKind.DELIVER, attempt=start.attempt, error="429", defer_seconds=1
            )
        )
        redis.zadd(store.keys.outbox, {f"deliver:{handoff.id}": 0})

    assert verdicts == ["deferred", "deferred", "retrying", "retrying", "undeliverable"]


def test_an_attempt_that_lost_a_posts_answer_leaves_its_window_to_the_next(
    store: HandoffStore,
) -> None:
    handoff = create(store)
    first = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1")
    assert first.unanswered is None, "nothing is unaccounted for yet"
    store.finish_task(
        handoff.id,
        TaskKind.DELIVER,
        attempt=1,
        error="answer lost",
        unanswered=PostWindow(first.started_at),
    )

    second = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2")

    assert second.unanswered is not None
    assert second.unanswered.start == pytest.approx(first.started_at, abs=0.001)
    assert first.started_at <= second.unanswered.end <= second.started_at
    store.finish_task(
        handoff.id, TaskKind.DELIVER, attempt=2, error="Slack said no", unanswered=None
    )
    third = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-3")
    assert third.unanswered is None, "a look-up that found nothing closes the window"


def test_a_lost_worker_leaves_its_whole_lease_to_be_looked_at(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    first = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1")
    # Its worker dies mid-post; the lease lapses.
    redis.hset(store.keys.handoff(handoff.id), "deliver_lease", int(first.started_at * 1000) + 5)
    time.sleep(0.02)

    second = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2")

    assert second.attempt == 2 and second.unanswered is not None
    assert second.unanswered.start == pytest.approx(first.started_at, abs=0.001)
    assert second.unanswered.end == pytest.approx(first.started_at + 0.005, abs=0.001)


def test_a_narrowed_window_is_kept_as_given_and_a_completed_task_forgets_it(
    store: HandoffStore,
) -> None:
    handoff = create(store)
    store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1")
    store.finish_task(
        handoff.id,
        TaskKind.DELIVER,
        attempt=1,
        error="budget spent",
        defer_seconds=1,
        unanswered=PostWindow(1_796_000_000.000123, 1_796_000_060.250456),
    )
    second = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2")
    # Kept to Slack's microseconds (a look-up narrows it past messages a few µs apart),
    # rounded outwards, never inwards.
    kept = second.unanswered
    assert kept is not None and kept.end is not None
    assert 1_796_000_000.000122 <= kept.start <= 1_796_000_000.000123
    assert 1_796_000_060.250456 <= kept.end <= 1_796_000_060.250457

    store.finish_task(handoff.id, TaskKind.DELIVER, attempt=2, message_refs={"ts": "1.1"})
    assert "deliver_unans_from" not in {
        k.decode() for k in store.redis.hkeys(store.keys.handoff(handoff.id))
    }


def test_resumes_keep_no_post_window(redis: Redis, store: HandoffStore) -> None:
    handoff = create(store)
    store.decide(handoff.id, Status.APPROVED, decided_by="U1")
    start = store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-1")
    store.finish_task(
        handoff.id, TaskKind.RESUME, attempt=1, error="boom", unanswered=PostWindow(1.0)
    )

    assert store.begin_task(handoff.id, TaskKind.RESUME, run_token="job-2").unanswered is None
    assert start.unanswered is None


def test_deferrals_never_lengthen_the_backoff_of_a_real_failure(
    redis: Redis, store: HandoffStore
) -> None:
    handoff = create(store)
    for number in range(1, 6):
        store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"job-{number}")
        store.finish_task(
            handoff.id, TaskKind.DELIVER, attempt=number, error="429", defer_seconds=0.01
        )
        redis.zadd(store.keys.outbox, {f"deliver:{handoff.id}": 0})
    start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-6")

    store.finish_task(handoff.id, TaskKind.DELIVER, attempt=start.attempt, error="Slack said no")

    due_at = redis.zscore(store.keys.outbox, f"deliver:{handoff.id}")
    assert due_at is not None
    seconds, micros = redis.time()
    waited = due_at - (seconds * 1000 + micros / 1000)
    assert waited <= store.config.tasks.backoff_seconds * 1000 + 50, "the first backoff, not 2^5"


def test_a_delivery_remembers_where_each_attempt_posts_across_a_reassignment(
    store: HandoffStore,
) -> None:
    handoff = create(store, channel="C0FIRST")
    first = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-1")
    store.finish_task(
        handoff.id,
        TaskKind.DELIVER,
        attempt=1,
        error="lost",
        unanswered=PostWindow(first.started_at),
    )
    store.reassign(handoff.id, by="U0ADMIN", channel="C0SECOND")

    second = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-2")

    assert second.unanswered is not None and second.unanswered.route == "C0FIRST"
    store.finish_task(
        handoff.id,
        TaskKind.DELIVER,
        attempt=2,
        error="lost",
        unanswered=PostWindow(first.started_at),
    )
    third = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-3")
    assert third.unanswered is not None and third.unanswered.route == "C0SECOND"


def test_a_delivery_that_completes_after_its_handoff_closed_gives_the_update_a_fresh_round(
    redis: Redis, store: HandoffStore
) -> None:
    # Found by the break-it review: the update spent its attempts while the delivery was
    # still looking for a lost post; the post it then adopted kept its buttons for good.
    handoff = create(store)
    start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job-d")
    store.cancel(handoff.id, cancelled_by="agent")
    _fail(store, handoff.id, TaskKind.NOTIFY, store.get(handoff.id).notify.max_attempts)

    refs = {"channel": "C0APPROVALS", "ts": "1700000000.000100"}
    done = store.finish_task(handoff.id, TaskKind.DELIVER, attempt=start.attempt, message_refs=refs)

    assert done == "completed"
    closed = store.get(handoff.id)
    assert closed.notify.state is TaskState.QUEUED
    assert (TaskKind.NOTIFY, handoff.id) not in store.failed_tasks()
    assert f"notify:{handoff.id}" in outbox(redis, store)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("edited_args", {"amount": float("nan")}, "not a JSON number"),
        ("edited_args", {"amount": float("inf")}, "not a JSON number"),
        ("edited_args", {"a": json.loads("[" * 40 + "]" * 40)}, "nested deeper"),
        ("edited_args", {"blob": "x" * 70_000}, "over the"),
        ("edited_args", ["not", "an", "object"], "must be a JSON object"),
    ],
)
def test_edited_arguments_that_cannot_be_stored_are_refused_and_change_nothing(
    store: HandoffStore, field: str, value: object, says: str
) -> None:
    handoff = create(store)
    before = store.get(handoff.id)

    with pytest.raises(InvalidDecision, match=says):
        store.decide(handoff.id, "approved", decided_by="U1", **{field: value})

    assert store.get(handoff.id) == before


def test_a_typed_answer_must_be_finite_and_its_text_made_from_it(store: HandoffStore) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
    payload = {**PAYLOADS[RequestType.QUESTION], "answer_schema": schema}
    handoff = create(store, RequestType.QUESTION, payload=payload)

    with pytest.raises(InvalidDecision, match="not a JSON number"):
        store.decide(handoff.id, "answered", decided_by="U1", answer_data={"n": float("inf")})
    with pytest.raises(InvalidDecision, match="answer_data alone"):
        store.decide(
            handoff.id, "answered", decided_by="U1", answer="n: 99999", answer_data={"n": 5}
        )
    assert store.get(handoff.id).is_pending

    answered = store.decide(handoff.id, "answered", decided_by="U1", answer_data={"n": 5})
    assert answered.resume_data and answered.resume_data.answer_data == {"n": 5}
