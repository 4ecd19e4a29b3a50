"""Creation and what follows it, at its edges (found by a break-it pass; each test names
what went wrong before its fix):

- The HTTP API's record of the body first sent with an Idempotency-Key lives as long as the
  key names a handoff (the purge deletes it with the key). A record written before 0.2
  expired after the retention period and a day, possibly under a pending handoff; then
  another body under the key was answered 200 with the first handoff. Now a request that
  finds the key taken without a record is refused (409), and a refused request's claim goes.
- The API's body-record claim whose reply was lost is resent and known as the request's own
  (a token): a create that then fails releases the key.
- A failed first request may release the record while its twin (same key and body) creates:
  the twin writes it back after its create.
- The API's per-minute create count is a member per create: a resent transaction (its EXEC
  reply lost) counts once.
- Two reassignments of one handoff, the second having read it before the first wrote: the
  script refuses index keys worked out from an older version, and the reassignment reads
  the handoff again.
- A CREATE resent for an id whose handoff was purged early (its body kept for its trail)
  stores nothing.
- A deadline under a millisecond is 1 ms, not "never expires".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from redis import Redis

from bot.api.app import (
    ApiConfig,
    _claim_idempotency,
    _created_before_claim,
    _keep_idempotency,
    _release_idempotency,
)
from bot.api.schemas import CreateHandoff
from store.api_keys import ApiKeys
from store.exceptions import HandoffNotFound
from store.ids import new_handoff_id
from store.models import Handoff, HandoffRequest, Status
from store.repository import HandoffStore, StoreConfig, TaskPolicy
from store.settings import StoreSettings
from tests.support.api_server import serve_api
from tests.support.indexes import indexed_under
from tests.support.redis_proxy import LosingProxy
from worker.client import Handoffs

APPROVAL: dict[str, Any] = {
    "request_type": "approval",
    "run_id": "run-1",
    "thread_id": "ticket-1",
    "context": "Charged twice",
    "action": {"name": "refund", "args": {"amount": 30}},
    "channel": "C0PAY",
}


@pytest.fixture
def handoffs(redis: Redis) -> Handoffs:
    return Handoffs(redis)


@pytest.fixture
def api(handoffs: Handoffs, redis_url: str) -> Iterator[str]:
    config = ApiConfig(redis_url=redis_url, creates_per_minute=1000)
    with serve_api(handoffs.store, config) as url:
        yield url


def _client(api: str, handoffs: Handoffs, name: str) -> httpx.Client:
    key = ApiKeys(handoffs.redis, handoffs.store.keys).create(name).key
    return httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _let_body_records_expire(redis: Redis, handoffs: Handoffs) -> None:
    """What retention + 1 day did to the API's body records written before 0.2 (they had a
    TTL; the handoffs created under their keys may still be pending, and the store's key ->
    id entry lives until the purge). Records written now have none: the purge deletes them
    with the key."""
    for key in redis.scan_iter(match=handoffs.store.keys.idempotency_body("*")):
        redis.pexpire(key, 1)
    time.sleep(0.02)
    assert not list(redis.scan_iter(match=handoffs.store.keys.idempotency_body("*")))


def test_a_body_record_lives_as_long_as_its_key_and_goes_with_the_purge(
    api: str, handoffs: Handoffs, redis: Redis
) -> None:
    agent = _client(api, handoffs, "agent")
    headers = {"Idempotency-Key": "order-6"}
    first = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)
    assert first.status_code == 201
    [record] = redis.scan_iter(match=handoffs.store.keys.idempotency_body("*"))
    assert redis.ttl(record) == -1  # no expiry while the key names the handoff
    # A claim whose request died before creating expires (the key is free again then).
    dead = _claim_idempotency(handoffs.store, "agent/died", CreateHandoff.model_validate(APPROVAL))
    assert dead.claimed and 0 < redis.ttl(dead.where) <= 3600

    other = {**APPROVAL, "context": "else", "action": {"name": "refund", "args": {"amount": 3000}}}
    assert agent.post("/v1/handoffs", json=other, headers=headers).status_code == 409

    handoff_id = first.json()["id"]
    handoffs.cancel(handoff_id, by="U0ADMIN", resume=False)
    redis.zadd(handoffs.store.keys.retention, {handoff_id: 0})  # due now
    assert handoffs.store.purge_decided() == 1
    assert not redis.exists(record)  # gone with the key: the key may be used again
    again = agent.post("/v1/handoffs", json=other, headers=headers)
    assert again.status_code == 201, again.text


def test_another_body_under_a_key_whose_old_record_expired_is_refused_not_answered(
    api: str, handoffs: Handoffs, redis: Redis
) -> None:
    agent = _client(api, handoffs, "agent")
    headers = {"Idempotency-Key": "order-7"}
    first = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)
    assert first.status_code == 201
    _let_body_records_expire(redis, handoffs)
    assert handoffs.get(first.json()["id"]).is_pending

    # The same run and type, another refund: the store's own idempotency gives back the
    # first handoff (what it promises); the API promises a 409 for another body. Before the
    # fix: 200 with the first handoff (an amount of 30, not the 3000 asked for), and the
    # key's record became the other body's.
    other = {**APPROVAL, "context": "else", "action": {"name": "refund", "args": {"amount": 3000}}}
    changed = agent.post("/v1/handoffs", json=other, headers=headers)
    assert changed.status_code == 409, (changed.status_code, changed.json().get("payload"))
    assert "no longer on record" in changed.json()["detail"]
    # Nothing says which body was first: the first body's own retry is refused as well
    # (a clear 409, nothing changed), never answered with a record of another body.
    retry = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)
    assert retry.status_code == 409, retry.text
    assert not list(redis.scan_iter(match=handoffs.store.keys.idempotency_body("*")))
    assert [h.id for h in handoffs.list_pending().items] == [first.json()["id"]]


def test_a_conflicting_request_under_an_expired_record_leaves_the_key_as_it_was(
    api: str, handoffs: Handoffs, redis: Redis
) -> None:
    agent = _client(api, handoffs, "agent")
    headers = {"Idempotency-Key": "order-8"}
    first = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)
    assert first.status_code == 201
    _let_body_records_expire(redis, handoffs)

    # Another run under the key: the store raises IdempotencyConflict, a 409 ...
    conflict = agent.post("/v1/handoffs", json={**APPROVAL, "run_id": "run-2"}, headers=headers)
    assert conflict.status_code == 409
    # ... and the refused request's claim on the key goes (before the fix it stayed, and
    # the first body's retry was told "used with another body").
    assert not list(redis.scan_iter(match=handoffs.store.keys.idempotency_body("*")))


def test_a_key_whose_claim_reply_was_lost_is_released_when_its_create_fails(
    redis: Redis, redis_url: str
) -> None:
    """The body record's SET NX is resent after its reply was lost (the store's client
    retries): it finds its own digest and takes it for another request's claim (claimed=False),
    so when this create then fails (413 here) the key is not released, and the corrected
    request is refused 409 for a month (retention + 1 day). The event-sighting and replay
    markers tell their own resend apart with a token (tests/reliability/test_lost_replies.py);
    this claim does not."""
    with LosingProxy(redis_url) as proxy:
        store = StoreSettings(redis_url=proxy.url).open_store()
        key = ApiKeys(redis, store.keys).create("agent").key
        config = ApiConfig(redis_url=proxy.url, creates_per_minute=1000)
        with serve_api(store, config) as url:
            agent = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"})
            headers = {"Idempotency-Key": "retry-me"}
            proxy.lose_reply(command="SET")
            too_big = agent.post(
                "/v1/handoffs", json={**APPROVAL, "context": "x" * 70_000}, headers=headers
            )
            assert [part[:2] for part in proxy.lost] == [
                [b"SET", store.keys.idempotency_body("agent/retry-me").encode()]
            ]
            assert too_big.status_code == 413

            fixed = agent.post("/v1/handoffs", json=APPROVAL, headers=headers)
            agent.close()

    assert fixed.status_code == 201, fixed.text  # today: 409, "used with another body"


def test_a_create_whose_rate_count_reply_was_lost_is_counted_once(
    redis: Redis, redis_url: str
) -> None:
    """``ApiKeys.take_create`` counts a create with MULTI INCR EXPIRE EXEC; the store's
    client resends the transaction when EXEC's reply is lost, so the create is counted twice:
    a key allowed one create a minute is refused its first (429). The count should be taken
    once per request (an operation id, as the store's scripts do, or the INCR's own count
    read back with a token)."""
    with LosingProxy(redis_url) as proxy:
        store = StoreSettings(redis_url=proxy.url).open_store()
        key = ApiKeys(redis, store.keys).create("agent", creates_per_minute=1).key
        with serve_api(store, ApiConfig(redis_url=proxy.url)) as url:
            agent = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"})
            proxy.lose_reply(command="EXEC")
            question = {"request_type": "question", "run_id": "r", "thread_id": "t"}
            first = agent.post("/v1/handoffs", json={**question, "question": "Ship it?"})
            agent.close()

    assert [part[0] for part in proxy.lost] == [b"EXEC"]
    assert first.status_code == 201, first.text  # today: 429, "created its handoffs"


def test_a_first_request_whose_twin_created_first_is_answered_with_it_not_refused(
    handoffs: Handoffs,
) -> None:
    """The first request claims the key's body record, its twin (same body) finds it and
    its CREATE lands first: the first request's own CREATE then finds the twin's handoff
    (created=False). That handoff came after the claim, so it is this body's: not a key taken
    before with its record lost (16 racing requests once got a 409 here, and a request of
    another body then a 200 with this handoff). Only a handoff older than the claim is."""
    store = handoffs.store
    scoped = "agent/race"
    body = CreateHandoff.model_validate(APPROVAL)
    first = _claim_idempotency(store, scoped, body)
    twin_claim = _claim_idempotency(store, scoped, body)
    request = HandoffRequest.model_validate(
        {
            "run_id": APPROVAL["run_id"],
            "thread_id": APPROVAL["thread_id"],
            "request_type": "approval",
            "payload": {"kind": "approval", "action": APPROVAL["action"]},
            "idempotency_key": scoped,
        }
    )
    made_by_twin = store.create(request, handoff_id=new_handoff_id()).handoff
    assert not _created_before_claim(store, first, made_by_twin)
    _keep_idempotency(store, twin_claim)  # the twin's create made the record permanent
    assert not _created_before_claim(store, first, made_by_twin)

    older = made_by_twin.model_copy(
        update={"created_at": made_by_twin.created_at - timedelta(seconds=1)}
    )
    late = _claim_idempotency(store, "agent/late", body)
    assert _created_before_claim(store, late, older)


def test_a_key_released_by_a_failed_first_request_while_its_twin_creates_keeps_its_body(
    api: str, handoffs: Handoffs
) -> None:
    """Two requests with one key and one body (a client's retry racing its first try): the
    first claims the key's body record, the twin finds it (claimed=False) and goes on to
    create. The first then fails (a 429, say) and releases the record, having checked that
    no handoff exists under the key yet; the twin's CREATE lands after that check. Now a
    handoff exists under the key with no record of its body, and another body under the key
    is answered 200 with it instead of 409. (The steps are the API's own functions, in the
    order the race runs them.)"""
    store = handoffs.store
    agent = _client(api, handoffs, "agent")
    scoped = "agent/twin"
    body = CreateHandoff.model_validate(APPROVAL)
    first = _claim_idempotency(store, scoped, body)  # the first request
    twin_claim = _claim_idempotency(store, scoped, body)  # its twin: the same body
    assert first.claimed and not twin_claim.claimed
    _release_idempotency(store, scoped, first)  # the first fails: nothing under the key yet
    request = HandoffRequest.model_validate(
        {
            "run_id": APPROVAL["run_id"],
            "thread_id": APPROVAL["thread_id"],
            "request_type": "approval",
            "context": APPROVAL["context"],
            "payload": {"kind": "approval", "action": APPROVAL["action"]},
            "channel": APPROVAL["channel"],
            "idempotency_key": scoped,
            "api_key": "agent",
        }
    )
    twin = store.create(request, handoff_id=new_handoff_id())  # the twin's CREATE
    assert twin.created
    _keep_idempotency(store, twin_claim)  # what the API does after a create

    other = {**APPROVAL, "action": {"name": "refund", "args": {"amount": 3000}}}
    changed = agent.post("/v1/handoffs", json=other, headers={"Idempotency-Key": "twin"})

    assert changed.status_code == 409, changed.json().get("payload")  # today: 200, amount 30


# -- reassignments ---------------------------------------------------------------------


def _question(**fields: object) -> HandoffRequest:
    return HandoffRequest.model_validate(
        {
            "run_id": "run-r",
            "thread_id": "t",
            "request_type": "question",
            "payload": {"kind": "question", "question": "Ship it?"},
            **fields,
        }
    )


class _StaleReads:
    """``store.get`` as a second admin's process saw the handoff: its first read before the
    first admin's reassignment wrote (its read and its script are two round trips), any
    read after that as it is."""

    def __init__(self, store: HandoffStore, handoff_id: str) -> None:
        self.read = store.get
        self.seen: Handoff | None = store.get(handoff_id)
        self.stale_reads = 0

    def __call__(self, handoff_id: str) -> Handoff:
        if self.seen is not None:
            seen, self.seen = self.seen, None
            self.stale_reads += 1
            return seen
        return self.read(handoff_id)


def test_two_overlapping_reassignments_leave_the_handoff_in_the_indexes_it_shows(
    redis: Redis, fast_tasks: TaskPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_admin = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    second_admin = HandoffStore(redis, StoreConfig(tasks=fast_tasks))
    keys = first_admin.keys
    handoff_id = first_admin.create(
        _question(channel="C0OLD", reviewers=["U0OLD"]), handoff_id=new_handoff_id()
    ).handoff.id
    # The second admin reads the handoff (to work out its new indexes) ...
    stale = _StaleReads(second_admin, handoff_id)
    monkeypatch.setattr(second_admin, "get", stale)
    # ... the first gives it to other reviewers ...
    first_admin.reassign(handoff_id, by="U0ADMIN1", reviewers=["U0NEW"])
    # ... and the second moves it to another channel.
    second_admin.reassign(handoff_id, by="U0ADMIN2", channel="C0NEW")

    assert stale.stale_reads == 1  # the reassignment read the handoff again and retried
    shown = first_admin.get(handoff_id)
    assert (shown.channel, shown.reviewers) == ("C0NEW", ["U0NEW"])
    # Every pending handoff is in the indexes of what it shows, and in no other.
    assert indexed_under(redis, keys, handoff_id) == {
        keys.pending_by_run("run-r"),
        keys.pending_by_type("question"),
        keys.pending_by_channel("C0NEW"),
        keys.pending_by_reviewer("U0NEW"),
    }


# -- a resent CREATE for an id whose handoff was purged ----------------------------------


def test_a_create_resent_after_an_early_purge_does_not_store_the_handoff_again(
    redis: Redis, fast_tasks: TaskPolicy
) -> None:
    """A CREATE's reply lost, its resend delayed past the handoff's decision and its purge
    (a rule decided it at creation; its retention entry due early, as after a shorter
    setting: the body stays for the stream's pointers into its trail). The resend is the
    same call: it must not make the id a pending handoff again."""
    store = HandoffStore(redis, StoreConfig(tasks=fast_tasks, retention_seconds=3600))
    handoff_id, request = new_handoff_id(), _question()
    store.create(request, handoff_id=handoff_id)
    store.cancel(handoff_id, cancelled_by="U0ADMIN", resume=False)
    redis.zadd(store.keys.retention, {handoff_id: 0})  # due now
    assert store.purge_decided() == 1
    body_key = store.keys.handoff_body(handoff_id)
    old_trail = redis.get(body_key)
    assert redis.pttl(body_key) > 0  # kept a while, for its trail

    try:
        resent = store.create(request, handoff_id=handoff_id)  # what the resend runs
    except HandoffNotFound:
        resent = None  # an honest answer: the handoff is gone

    # Before the fix: created again, pending, its body (the old trail overwritten)
    # expiring with the old one's TTL; once it had, the pending handoff could not be read.
    assert resent is None or not resent.handoff.is_pending, "the purged id is pending again"
    assert redis.get(body_key) == old_trail
    assert store.count_pending() == 0


# -- expiry ------------------------------------------------------------------------------


@pytest.mark.parametrize("expires_in", [0.0004, 0.000_001])
def test_a_deadline_under_a_millisecond_is_not_taken_for_none(
    redis: Redis, fast_tasks: TaskPolicy, expires_in: float
) -> None:
    """``expires_in_seconds`` is taken when > 0 (the API's and the client's check), but the
    store sends whole milliseconds, int(seconds * 1000), and 0 means "never expires": a
    handoff asked to expire at once never expires (fails open). It should expire after at
    least a millisecond (or be refused)."""
    client = Handoffs(redis, tasks=fast_tasks)
    handoff = client.ask(run_id="r", thread_id="t", question="Still there?", expires_in=expires_in)

    assert handoff.expires_at is not None
    time.sleep(0.01)
    assert client.store.expire_due() == [handoff.id]
    assert client.get(handoff.id).status is Status.EXPIRED
