"""store.connection: the URLs every process takes (plain, Sentinel, Cluster), and
HANDOFF_MIN_REPLICA_ACKS on a server without replicas (so every write is unconfirmed): the
caller is told to try again, the write stays, and the API answers 503 with Retry-After.
Failover itself is proven with real servers in tests/reliability/test_sentinel_failover.py
and tests/reliability/test_cluster.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from redis import Redis
from redis.sentinel import SentinelConnectionPool

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from store.connection import open_client, parse_redis_url
from store.exceptions import ConfigurationError, ReplicasNotConfirmed
from store.lua import ReplicaAcks
from store.models import Status
from store.policies import load_policy
from store.repository import TaskPolicy
from store.settings import StoreSettings, redacted_url
from tests.support.api_server import serve_api
from worker.client import Handoffs


def test_a_sentinel_url_names_the_sentinels_the_master_the_database_and_the_passwords() -> None:
    target = parse_redis_url(
        "rediss+sentinel://app:secret@10.0.0.1:26379,10.0.0.2,[::1]:26380/handoff/3"
        "?sentinel_password=sp"
    )
    assert target.kind == "sentinel"
    assert target.hosts == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert (target.master, target.db, target.tls) == ("handoff", 3, True)
    assert target.node_options() == {"username": "app", "password": "secret", "ssl": True}
    assert target.sentinel_options() == {"password": "sp", "ssl": True}


def test_a_sentinel_client_asks_the_sentinels_for_the_master() -> None:
    client = open_client("redis+sentinel://127.0.0.1:1,127.0.0.1:2/handoff/2")
    assert isinstance(client.connection_pool, SentinelConnectionPool)
    assert client.connection_pool.service_name == "handoff"
    assert client.connection_pool.connection_kwargs["db"] == 2


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://10.0.0.1:26379", "master's name"),
        ("redis+sentinel://10.0.0.1:x/handoff", "host:port"),
        ("redis+sentinel://10.0.0.1:99999/handoff", "host:port"),
        ("redis+cluster://10.0.0.1:0", "host:port"),
        ("redis+sentinel://10.0.0.1:26379:5/handoff", "one port per host"),
        ("redis+sentinel://::1/handoff", "in brackets"),
        ("redis+sentinel://10.0.0.1:26379/handoff/zero", "is a number"),
        ("redis+sentinel://10.0.0.1:26379/handoff/0?timeout=3", "takes the options"),
        ("redis+cluster://10.0.0.1:7000/2", "database 0 only"),
        ("http://10.0.0.1", "redis+sentinel://"),
    ],
)
def test_a_bad_url_is_refused_naming_the_fix(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match="REDIS_URL") as refused:
        StoreSettings.from_env(redis_url=url)
    assert says in str(refused.value)
    assert "10.0.0.1" not in str(refused.value)  # the URL is not echoed


def test_the_queues_may_not_be_on_a_cluster() -> None:
    with pytest.raises(ConfigurationError, match=r"HANDOFF_QUEUE_REDIS_URL.*Cluster"):
        StoreSettings.from_env(queue_redis_url="redis+cluster://10.0.0.1:7000")
    settings = StoreSettings.from_env(redis_url="redis+cluster://10.0.0.1:7000")
    with pytest.raises(ConfigurationError, match="set HANDOFF_QUEUE_REDIS_URL"):
        settings.require_queue_redis_url()
    queued = StoreSettings.from_env(
        redis_url="redis+cluster://10.0.0.1:7000", queue_redis_url="redis://10.0.0.2/0"
    )
    assert queued.require_queue_redis_url() == "redis://10.0.0.2/0"


def test_a_sentinel_password_is_not_shown() -> None:
    shown = redacted_url("redis+sentinel://:pw@h:26379/m/0?sentinel_password=sp")
    assert "pw" not in shown.replace("sentinel_password", "") and "sp" not in shown


def _unconfirmed(redis: Redis) -> Handoffs:
    return Handoffs(redis, replica_acks=ReplicaAcks(replicas=1, timeout_seconds=0.05))


def test_an_unconfirmed_write_is_refused_as_try_again_and_stays(redis: Redis) -> None:
    # The test server has no replica: WAIT confirms nothing.
    agent = _unconfirmed(redis)
    started = time.monotonic()
    with pytest.raises(ReplicasNotConfirmed, match="try again") as refused:
        agent.request_approval(
            run_id="r", thread_id="t", action="deploy", channel="C0HA", idempotency_key="k1"
        )
    assert time.monotonic() - started < 1  # bounded by the timeout, not a hang
    assert (refused.value.wanted, refused.value.confirmed) == (1, 0)
    # The write stays; a retry with the same key is the same handoff, found again.
    plain = Handoffs(redis)
    again = plain.request_approval(
        run_id="r", thread_id="t", action="deploy", channel="C0HA", idempotency_key="k1"
    )
    assert plain.store.count_pending() == 1
    with pytest.raises(ReplicasNotConfirmed):
        agent.decide(again.id, Status.APPROVED, by="U0ALICE")
    decided = plain.get(again.id)
    assert decided.status is Status.APPROVED
    assert [e.event for e in plain.audit(again.id)].count("decided") == 1


def test_with_acks_zero_nothing_waits(redis: Redis) -> None:
    agent = Handoffs(redis, replica_acks=ReplicaAcks(replicas=0, timeout_seconds=0.05))
    created = agent.request_approval(run_id="r", thread_id="t", action="deploy", channel="C0HA")
    assert agent.decide(created.id, Status.APPROVED, by="U0ALICE").status is Status.APPROVED


def test_the_api_answers_an_unconfirmed_write_with_503_and_retry_after(
    redis: Redis, redis_url: str
) -> None:
    store = _unconfirmed(redis).store
    key = ApiKeys(redis, store.keys).create("agent").key
    with serve_api(store, ApiConfig(redis_url=redis_url, creates_per_minute=1000)) as url:
        answer = httpx.post(
            f"{url}/v1/handoffs",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "request_type": "approval",
                "run_id": "run-1",
                "thread_id": "t",
                "action": {"name": "deploy", "args": {}},
                "channel": "C0HA",
            },
            timeout=30,
        )
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"]
    assert "try again" in answer.text


def test_a_routed_creation_waits_for_the_replicas_after_its_transaction(redis: Redis) -> None:
    # A rule that decides at once: CREATE, the routed event and DECIDE in one MULTI/EXEC,
    # with WAIT after EXEC on the same connection.
    policy = load_policy(Path(__file__).parent / "fixtures" / "policies" / "refunds.yaml")
    acked = Handoffs(
        redis, policy=policy, replica_acks=ReplicaAcks(replicas=1, timeout_seconds=0.05)
    )
    with pytest.raises(ReplicasNotConfirmed):
        acked.request_approval(
            run_id="r",
            thread_id="t",
            action="issue_refund",
            args={"amount": 20},
            channel="C0HA",
            idempotency_key="small",
        )
    plain = Handoffs(redis, policy=policy)
    again = plain.request_approval(
        run_id="r",
        thread_id="t",
        action="issue_refund",
        args={"amount": 20},
        channel="C0HA",
        idempotency_key="small",
    )
    assert again.status is Status.APPROVED
    assert again.resume_data is not None
    assert again.resume_data.decided_by == "policy:small-refunds"
    assert [e.event for e in plain.audit(again.id)] == ["created", "routed", "decided"]


def test_handoff_check_looks_for_workers_on_the_queues_redis(redis_url: str) -> None:
    from bot.cli.check import check_redis

    apart = StoreSettings.from_env(redis_url=redis_url, queue_redis_url="redis://127.0.0.1:1/0")
    findings = check_redis(apart)
    [workers] = [f for f in findings if f.topic == "workers"]
    assert workers.level.name == "FAIL" and "queues' Redis is not answering" in workers.message
    assert workers.fix is not None and "HANDOFF_QUEUE_REDIS_URL" in workers.fix
    beside = check_redis(StoreSettings.from_env(redis_url=redis_url))
    [workers] = [f for f in beside if f.topic == "workers"]
    assert "RQ workers" in workers.message


def test_an_unreachable_cluster_is_a_clear_check_failure_not_a_traceback() -> None:
    from bot.cli.check import check_redis

    # Made eagerly (the slot map is read at once), a cluster client whose nodes are all
    # down raised RedisClusterException, no RedisError: `handoff check` crashed.
    settings = StoreSettings.from_env(redis_url="redis+cluster://:s3cret@127.0.0.1:1")
    [finding] = check_redis(settings)
    assert finding.level.name == "FAIL"
    assert "cannot read the Redis Cluster's slot map from 127.0.0.1:1" in finding.message
    assert "s3cret" not in finding.message


def test_an_attempt_whose_start_is_unconfirmed_spends_no_attempt(redis: Redis) -> None:
    from store.models import TaskKind

    # Every start unconfirmed (no replicas), each attempt's RQ job ends at begin_task; the
    # lease lapses, the dispatcher hands the delivery out again. Counted as attempts whose
    # worker was lost, a replica down for a few leases closed the handoff undeliverable.
    tasks = TaskPolicy(
        delivery_timeout_seconds=0.2, lease_grace_seconds=0.0, delivery_max_attempts=2
    )
    agent = Handoffs(redis, namespace="unconfirmed-start", tasks=tasks)
    acked = Handoffs(
        redis,
        namespace="unconfirmed-start",
        tasks=tasks,
        replica_acks=ReplicaAcks(replicas=1, timeout_seconds=0.05),
    )
    created = agent.request_approval(run_id="r", thread_id="t", action="deploy", channel="C0HA")
    for _ in range(4):
        with pytest.raises(ReplicasNotConfirmed):
            acked.store.begin_task(created.id, TaskKind.DELIVER, run_token=uuid.uuid4().hex)
        time.sleep(0.25)  # past the lease
    handoff = agent.get(created.id)
    assert handoff.status is Status.PENDING
    assert handoff.delivery.state.value == "retrying"
    # Once the replicas are back (here: acks 0), the delivery runs, with attempts to spare.
    start = agent.store.begin_task(created.id, TaskKind.DELIVER, run_token="w")
    assert start.action == "run"


def test_the_api_gives_no_decision_the_replicas_lack(redis: Redis, redis_url: str) -> None:
    # No replica: the decision stays on the master, its reviewer told to try again. Read
    # through the API (or waited for), it was answered 200 "approved": the caller's run
    # acted on a decision a failover may undo.
    plain = Handoffs(redis)
    acked = _unconfirmed(redis)
    admin = ApiKeys(redis, plain.store.keys).create("ops", admin=True).key
    decided = plain.request_approval(run_id="r", thread_id="t", action="deploy", channel="C0HA")
    pending = plain.request_approval(run_id="r", thread_id="t2", action="deploy", channel="C0HA")
    with pytest.raises(ReplicasNotConfirmed):
        acked.decide(decided.id, Status.APPROVED, by="U0ALICE")
    headers = {"Authorization": f"Bearer {admin}"}
    with serve_api(acked.store, ApiConfig(redis_url=redis_url, creates_per_minute=1000)) as url:
        for path in (f"/v1/handoffs/{decided.id}", f"/v1/handoffs/{decided.id}?wait=2"):
            answer = httpx.get(url + path, headers=headers, timeout=10)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["retry-after"]
        still = httpx.get(f"{url}/v1/handoffs/{pending.id}", headers=headers, timeout=10)
    assert still.status_code == 200 and still.json()["status"] == "pending"


def test_a_retry_of_failed_work_waits_for_the_replicas(redis: Redis) -> None:
    from store.models import TaskKind, TaskState
    from store.repository import HandoffStore, StoreConfig
    from tests.test_lost_attempts import _lost_last_attempt

    # `handoff retry` said the resume was queued again although no replica had it: after a
    # failover the resume was failed again, and nobody retried it.
    handoff_id = _lost_last_attempt(HandoffStore(redis, StoreConfig()))
    acked = HandoffStore(redis, StoreConfig(replica_acks=ReplicaAcks(1, timeout_seconds=0.05)))
    with pytest.raises(ReplicasNotConfirmed):
        acked.retry_task(handoff_id, TaskKind.RESUME, requested_by="U_ADMIN")
    assert acked.get(handoff_id).resume.state is not TaskState.FAILED  # the write stands


def test_the_cli_says_an_unconfirmed_write_is_to_be_tried_again_not_that_redis_is_down(
    redis: Redis, redis_url: str
) -> None:
    created = Handoffs(redis).request_approval(
        run_id="r", thread_id="t", action="deploy", channel="C0HA"
    )
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "HANDOFF_MIN_REPLICA_ACKS": "1",
        "HANDOFF_REPLICA_ACK_TIMEOUT_SECONDS": "0.05",
    }
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "cancel", created.id, "--reason", "not needed"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 5, result.stderr
    assert "only 0 of the 1 replicas" in result.stderr and "try again" in result.stderr
    assert "cannot reach Redis" not in result.stderr
    assert "Traceback" not in result.stderr
