"""Creation under races and lost replies: a routed creation
decided at once whose EXEC reply was lost, idempotency keys raced by threads (the store's and
the HTTP API's), odd run ids through creation, two reassignments and the decision, and a
created handoff as the creator is told it equals the one read back."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from store.decoding import as_text
from store.exceptions import IdempotencyConflict
from store.ids import new_handoff_id
from store.models import HandoffRequest, Status
from store.policies import load_policy, parse_policy
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from tests.support.api_server import serve_api
from tests.support.indexes import anything_pending
from tests.support.redis_proxy import LosingProxy
from worker.client import Handoffs

REFUNDS = Path(__file__).parent / "fixtures" / "policies" / "refunds.yaml"
RESUME = "tests.support.resume_targets:record"


def _small_refund(client: Handoffs) -> str:
    return client.request_approval(
        run_id="r",
        thread_id="t",
        action="issue_refund",
        args={"order_id": "A", "amount": 20},
        resume=RESUME,
        idempotency_key="k",
    ).id


def test_a_routed_creation_decided_at_once_whose_exec_reply_was_lost_happens_once(
    redis: Redis, redis_url: str, fast_tasks: TaskPolicy
) -> None:
    with LosingProxy(redis_url) as proxy:
        client = Handoffs.from_url(proxy.url, tasks=fast_tasks, policy=load_policy(REFUNDS))
        proxy.lose_reply(command="EXEC")
        handoff_id = _small_refund(client)
        assert proxy.lost
        again = _small_refund(client)

    store = client.store
    assert again == handoff_id
    assert store.get(handoff_id).status is Status.APPROVED
    assert [e.event for e in store.audit_trail(handoff_id)] == ["created", "routed", "decided"]
    assert [e.event for e in store.global_audit()] == ["created", "routed", "decided"]
    due = [as_text(m) for m in redis.zrange(store.keys.outbox, 0, -1)]
    assert sorted(due) == sorted(f"{k}:{handoff_id}" for k in ("deliver", "resume", "notify"))


def test_threads_racing_one_key_make_one_handoff_and_the_other_run_a_conflict(
    redis: Redis, redis_url: str, fast_tasks: TaskPolicy
) -> None:
    n = 16
    barrier = threading.Barrier(n)
    results: list[tuple[int, str]] = []

    def create(i: int) -> None:
        client = Handoffs(Redis.from_url(redis_url), tasks=fast_tasks)
        barrier.wait()
        try:
            client.request_approval(
                run_id=f"run-{i % 2}", thread_id="t", action="x", args={}, idempotency_key="k"
            )
            results.append((i % 2, "made"))
        except IdempotencyConflict:
            results.append((i % 2, "conflict"))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(Counter(results).values()) == [n // 2, n // 2]
    assert {run for run, what in results if what == "made"} in ({0}, {1})
    assert len(redis.keys(Handoffs(redis).store.keys.handoff("*"))) == 1


def test_routed_threads_racing_one_key_make_one_handoff_decided_once(
    redis: Redis, redis_url: str, fast_tasks: TaskPolicy
) -> None:
    n = 16
    barrier = threading.Barrier(n)
    made: list[str] = []

    def create() -> None:
        client = Handoffs(Redis.from_url(redis_url), tasks=fast_tasks, policy=load_policy(REFUNDS))
        barrier.wait()
        made.append(_small_refund(client))

    threads = [threading.Thread(target=create) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(made)) == 1
    store = Handoffs(redis).store
    assert [e.event for e in store.global_audit()] == ["created", "routed", "decided"]


@pytest.fixture
def api(redis: Redis, redis_url: str) -> Iterator[str]:
    config = ApiConfig(redis_url=redis_url, creates_per_minute=100_000)
    with serve_api(Handoffs(redis).store, config) as url:
        yield url


@pytest.mark.parametrize("mixed", [False, True])
def test_api_requests_racing_one_key_make_one_handoff(api: str, redis: Redis, mixed: bool) -> None:
    key = ApiKeys(redis, Handoffs(redis).store.keys).create("agent").key
    n = 16
    barrier = threading.Barrier(n)
    answers: list[tuple[int, int, Any]] = []

    def post(i: int) -> None:
        body: dict[str, Any] = {
            "request_type": "approval",
            "run_id": "run-1",
            "thread_id": "t",
            "action": {"name": "refund", "args": {"amount": 30}},
            "context": f"c{i % 2}" if mixed else "",
        }
        with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}) as client:
            barrier.wait()
            answer = client.post("/v1/handoffs", json=body, headers={"Idempotency-Key": "race"})
        answers.append((i % 2, answer.status_code, answer.json().get("context")))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(code for _, code, _ in answers).count(201) == 1
    for side, code, context in answers:
        assert code in (200, 201, 409)
        if code != 409:
            assert context == (f"c{side}" if mixed else "")
    assert len(redis.keys(Handoffs(redis).store.keys.handoff("*"))) == 1


@pytest.mark.parametrize(
    "run_id",
    [
        "run-😀",
        "ü-run",
        'a/b\\c"d',
        "x\u2028y",
        "nul\x00x",
        "{brace}",
        "\U0001d54f" * 60,
        " sp ace ",
    ],
)
def test_odd_run_ids_are_indexed_through_reassignments_and_left_nowhere(
    redis: Redis, fast_tasks: TaskPolicy, run_id: str
) -> None:
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    request = HandoffRequest.model_validate(
        {
            "run_id": run_id,
            "thread_id": "t",
            "request_type": "question",
            "payload": {"kind": "question", "question": "Ship?"},
            "reviewers": ["U0A"],
        }
    )
    handoff_id = store.create(request, handoff_id=new_handoff_id()).handoff.id
    by_run = store.keys.pending_by_run(run_id)
    store.reassign(handoff_id, by="U0ADMIN", reviewers=["U0B"])
    store.reassign(handoff_id, by="U0ADMIN", channel="C0NEW")

    assert [h.id for h in store.list_pending(by_run).items] == [handoff_id]
    assert [h.id for h in store.list_pending(store.keys.pending_by_reviewer("U0B")).items] == [
        handoff_id
    ]
    assert store.list_pending(store.keys.pending_by_reviewer("U0A")).items == []
    store.decide(handoff_id, Status.ANSWERED, decided_by="U0B", answer="yes")
    assert anything_pending(redis, store.keys) == []


_REQUESTS: list[dict[str, Any]] = [
    {
        "request_type": "approval",
        "payload": {
            "kind": "approval",
            "action": {"name": "x", "args": {"a": None, "b": [1, {"c": None}]}},
            "approvals_required": 2,
        },
        "metadata": {"m": None},
    },
    {
        "request_type": "escalation",
        "payload": {"kind": "escalation", "summary": "s"},
        "escalate_to": "S0GRP",
        "escalate_after_seconds": 60,
        "remind_after_seconds": 30,
        "max_reminders": 2,
    },
    {
        "request_type": "question",
        "payload": {"kind": "question", "question": "q", "choices": ["a", "b"]},
        "callback": {"url": "https://example.com/x"},
        "requester": "U0REQ",
        "requester_may_approve": False,
    },
    {
        "request_type": "correction",
        "payload": {"kind": "correction", "draft": "d", "instructions": "i"},
        "expires_in_seconds": 12.3456,
        "channel": "U0DM",
        "reviewers": ["U0A", "U0A", "S0B"],
        "api_key": "k1",
    },
]
_EVERYTHING_SET = """
rules:
  - name: all
    match: {}
    set: {channel: C0ALL, reviewers: [U0Z], expires_in: 1h, escalate_to: C0ESC,
          escalate_after: 2h, remind_after: 10m}
"""


@pytest.mark.parametrize("fields", _REQUESTS)
@pytest.mark.parametrize("routed", [False, True])
def test_the_created_handoff_the_creator_is_told_is_the_one_read_back(
    redis: Redis, fast_tasks: TaskPolicy, fields: dict[str, Any], routed: bool
) -> None:
    policy = parse_policy(_EVERYTHING_SET, source="p.yaml") if routed else None
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, policy=policy))
    request = HandoffRequest.model_validate({"run_id": "r", "thread_id": "t", **fields})

    made = store.create(request, handoff_id=new_handoff_id()).handoff

    assert made == store.get(made.id)
