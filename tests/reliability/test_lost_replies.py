"""A script whose reply is lost after it committed: the client resends it, the resend
answers what the first run did, and the first run's writes (its audit event) happen once.

Every mutating script of ``store.scripts`` is called through ``LosingProxy``, which runs the
command in the real Redis and then cuts the connection instead of answering. The store's
clients (``StoreSettings.open_redis``, ``Handoffs.from_url``) resend on connection errors;
before, such a call raised ``ConnectionError`` (or a false ``NotRetryable``, a second audit
event, a due batch hidden for the dispatch timeout, an attempt's end reported ``stale``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis import Redis

from bot.http.replay import ReplayGuard, Seen
from bot.keys import BotKeys
from store import scripts
from store.ids import new_handoff_id
from store.models import HandoffRequest, Status, TaskKind, TaskState
from store.rate_budget import RateBudget
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from store.settings import StoreSettings, connect
from tests.support.redis_proxy import LosingProxy
from worker.client import Handoffs

CHANNEL = "C0LOST0001"
REVIEWER = "U0LOST0001"


@pytest.fixture
def proxy(redis: Redis, redis_url: str) -> Iterator[LosingProxy]:
    with LosingProxy(redis_url) as running:
        yield running


@pytest.fixture
def store(proxy: LosingProxy, fast_tasks: TaskPolicy) -> HandoffStore:
    """The store as `handoff serve` and `handoff retry` open it, through the proxy."""
    settings = StoreSettings(redis_url=proxy.url)
    config = settings.store_config()
    return HandoffStore(
        settings.open_redis(),
        StoreConfig(namespace=config.namespace, retention_seconds=0.2, tasks=fast_tasks),
    )


@pytest.fixture
def agent(proxy: LosingProxy, fast_tasks: TaskPolicy) -> Handoffs:
    """The agent API as agent code opens it, through the proxy."""
    return Handoffs.from_url(proxy.url, tasks=fast_tasks)


def _create(agent: Handoffs, **options: object) -> str:
    return agent.request_approval(
        run_id="run-lost",
        thread_id="t-1",
        action="refund",
        args={"amount": 5},
        channel=CHANNEL,
        reviewers=[REVIEWER],
        **options,  # type: ignore[arg-type]
    ).id


def events(store: HandoffStore, handoff_id: str) -> list[str]:
    return [event.event for event in store.audit_trail(handoff_id)]


def stream_events(store: HandoffStore) -> list[str]:
    return [event.event for event in store.global_audit()]


def handoff_count(redis: Redis, store: HandoffStore) -> int:
    return len(redis.keys(store.keys.handoff("*")))


@pytest.mark.parametrize("idempotency_key", [None, "order-7"])
def test_a_create_whose_reply_was_lost_returns_one_handoff(
    redis: Redis,
    proxy: LosingProxy,
    agent: Handoffs,
    store: HandoffStore,
    idempotency_key: str | None,
) -> None:
    proxy.lose_reply(script=scripts.CREATE)

    handoff_id = _create(agent, idempotency_key=idempotency_key)

    assert proxy.lost, "the proxy lost no reply"
    assert handoff_count(redis, store) == 1
    assert store.get(handoff_id).status is Status.PENDING
    assert events(store, handoff_id) == ["created"]
    assert stream_events(store) == ["created"]
    assert store.count_pending() == 1


def test_a_resent_create_says_it_created_the_handoff(
    proxy: LosingProxy, store: HandoffStore
) -> None:
    request = HandoffRequest.model_validate(
        {
            "run_id": "run-lost",
            "thread_id": "t-1",
            "request_type": "question",
            "payload": {"kind": "question", "question": "Ship it?"},
        }
    )
    handoff_id = new_handoff_id()
    proxy.lose_reply(script=scripts.CREATE)

    created = store.create(request, handoff_id=handoff_id)

    assert proxy.lost
    assert created.created
    assert created.handoff.id == handoff_id
    assert created.handoff == store.get(handoff_id)


@pytest.mark.parametrize("pass_current", [False, True])
def test_a_decision_whose_reply_was_lost_is_reported_as_made(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore, pass_current: bool
) -> None:
    handoff_id = _create(agent)
    current = store.get(handoff_id) if pass_current else None
    proxy.lose_reply(script=scripts.DECIDE)

    decided = store.decide(
        handoff_id, Status.APPROVED, decided_by=REVIEWER, via="button", current=current
    )

    assert proxy.lost
    assert decided.status is Status.APPROVED
    assert decided.resume_data is not None and decided.resume_data.decided_by == REVIEWER
    assert events(store, handoff_id) == ["created", "decided"]
    assert stream_events(store).count("decided") == 1


def test_an_agents_decision_whose_reply_was_lost_returns_the_decided_handoff(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    proxy.lose_reply(script=scripts.DECIDE)

    decided = agent.decide(handoff_id, "rejected", by=REVIEWER)

    assert decided.status is Status.REJECTED
    assert events(store, handoff_id) == ["created", "decided"]


def test_an_audit_record_whose_reply_was_lost_is_written_once(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    proxy.lose_reply(script=scripts.RECORD_AUDIT)

    store.record_audit(handoff_id, "viewed_full", actor=REVIEWER, detail={"via": "show"})

    assert proxy.lost
    assert events(store, handoff_id) == ["created", "viewed_full"]
    assert stream_events(store) == ["created", "viewed_full"]


def test_a_reassignment_whose_reply_was_lost_is_done_and_audited_once(
    redis: Redis, proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    proxy.lose_reply(script=scripts.REASSIGN)

    moved = store.reassign(handoff_id, by="admin", channel="C0LOST0002")

    assert proxy.lost
    assert moved.channel == "C0LOST0002"
    assert events(store, handoff_id) == ["created", "reassigned"]
    assert stream_events(store).count("reassigned") == 1
    assert redis.zscore(store.keys.pending_by_channel("C0LOST0002"), handoff_id) is not None
    assert redis.zscore(store.keys.pending_by_channel(CHANNEL), handoff_id) is None


def test_a_retry_whose_reply_was_lost_succeeds_and_is_audited_once(
    redis: Redis, proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    # The delivery gave up (set directly: how it fails is not what this test is about).
    redis.hset(store.keys.handoff(handoff_id), mapping={"deliver_state": "failed"})
    redis.zrem(store.keys.outbox, f"deliver:{handoff_id}")
    redis.zadd(store.keys.failed, {f"deliver:{handoff_id}": 1})
    proxy.lose_reply(script=scripts.RETRY_TASK)

    retried = store.retry_task(handoff_id, TaskKind.DELIVER, requested_by="admin")

    assert proxy.lost
    assert retried.delivery.state is TaskState.QUEUED
    assert events(store, handoff_id) == ["created", "delivery_retry_requested"]
    assert store.failed_tasks() == []


def test_a_claim_of_due_tasks_whose_reply_was_lost_gets_the_same_batch(
    redis: Redis, proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    first, second = _create(agent), _create(agent)
    proxy.lose_reply(script=scripts.CLAIM_DUE)

    due = store.claim_due(limit=500, visibility_seconds=30)

    assert proxy.lost
    assert sorted((task.kind, task.handoff_id) for task in due) == sorted(
        [(TaskKind.DELIVER, first), (TaskKind.DELIVER, second)]
    )
    # Hidden once, by this claim; the next claim finds nothing new.
    assert store.claim_due(limit=500, visibility_seconds=30) == []


def test_an_escalation_claim_whose_reply_was_lost_is_audited_once(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = agent.escalate(run_id="run-lost", thread_id="t-1", summary="stuck").id
    proxy.lose_reply(script=scripts.CLAIM)

    claimed = store.claim(handoff_id, claimed_by=REVIEWER)

    assert proxy.lost
    assert claimed.claimed_by == REVIEWER
    assert events(store, handoff_id) == ["created", "claimed"]


def test_an_attempt_start_whose_reply_was_lost_runs_the_same_attempt(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    proxy.lose_reply(script=scripts.BEGIN_TASK)

    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token="job-1")

    assert proxy.lost
    assert (start.action, start.attempt) == ("run", 1)
    assert events(store, handoff_id) == ["created", "delivery_started"]


@pytest.mark.parametrize("error", [None, "Slack said no"], ids=["completed", "failed"])
def test_an_attempts_end_whose_reply_was_lost_is_reported_as_recorded(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore, error: str | None
) -> None:
    handoff_id = _create(agent)
    start = store.begin_task(handoff_id, TaskKind.DELIVER, run_token="job-1")
    proxy.lose_reply(script=scripts.FINISH_TASK)

    outcome = store.finish_task(handoff_id, TaskKind.DELIVER, attempt=start.attempt, error=error)

    assert proxy.lost
    assert outcome == ("completed" if error is None else "retrying"), "not 'stale'"
    ended = "delivered" if error is None else "delivery_attempt_failed"
    assert events(store, handoff_id) == ["created", "delivery_started", ended]


def test_a_budget_call_whose_reply_was_lost_is_still_the_callers(
    proxy: LosingProxy, store: HandoffStore
) -> None:
    budget = RateBudget(store.redis, store.keys, "conversations.history", calls_per_minute=1)
    proxy.lose_reply(script=scripts.TAKE_BUDGET)

    assert budget.take() == 0, "the call the first run took is this caller's"
    assert proxy.lost
    assert 59 < budget.take() <= 60, "and it was taken once"


def test_an_expiry_sweep_whose_reply_was_lost_reports_what_it_expired(
    proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent, expires_in=0.05)
    time.sleep(0.1)
    proxy.lose_reply(script=scripts.EXPIRE_DUE)

    expired = store.expire_due()

    assert proxy.lost
    assert expired == [handoff_id]
    assert store.get(handoff_id).status is Status.EXPIRED
    assert events(store, handoff_id) == ["created", "expired"]


def test_a_purge_whose_reply_was_lost_reports_what_it_purged(
    redis: Redis, proxy: LosingProxy, agent: Handoffs, store: HandoffStore
) -> None:
    handoff_id = _create(agent)
    store.cancel(handoff_id, cancelled_by="agent", resume=False)
    time.sleep(0.3)  # past the store's 0.2 s retention
    proxy.lose_reply(script=scripts.PURGE_DECIDED)

    purged = store.purge_decided()

    assert proxy.lost
    assert purged == 1
    assert handoff_count(redis, store) == 0


def test_the_store_and_agent_clients_resend_on_connection_errors(redis_url: str) -> None:
    for client in (
        StoreSettings(redis_url=redis_url).open_redis(),
        connect(redis_url),
        Handoffs.from_url(redis_url).redis,
    ):
        retry = client.get_retry()
        assert retry is not None and retry.get_retries() > 0


def test_a_replay_marker_whose_reply_was_lost_still_lets_the_request_through_once(
    proxy: LosingProxy, store: HandoffStore
) -> None:
    """The marker's SET NX is resent with the client's retry: finding its own token, it is
    still a first use (a new event is not dropped as seen), and a real second use is not."""
    guard = ReplayGuard(store.redis, BotKeys(store.keys))
    proxy.lose_reply(command="SET")
    assert guard.check_event("Ev0LOSTREPLY") is Seen.FIRST
    assert proxy.lost
    assert guard.check_event("Ev0LOSTREPLY") is Seen.AGAIN

    proxy.lose_reply(command="SET")
    assert guard.check_request("v0=forged", sent_at=int(time.time())).seen is Seen.FIRST
    assert guard.check_request("v0=forged", sent_at=int(time.time())).seen is Seen.AGAIN


def test_an_event_sighting_whose_reply_was_lost_is_still_the_first(
    proxy: LosingProxy, store: HandoffStore
) -> None:
    proxy.lose_reply(command="SET")
    assert store.first_sighting("Ev0SOCKET") is True
    assert proxy.lost
    assert store.first_sighting("Ev0SOCKET") is False
