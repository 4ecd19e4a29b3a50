"""A retried decision is confirmed only once the replicas have the first one.

``WAIT`` counts the writes of its own connection. A decision whose ``WAIT`` timed out (the
person told to try again) is stored; the retry, on another connection, writes nothing (the
store answers with the decision already made). That retry must not be confirmed before a
replica has the first write: on Redis 7 a connection that wrote nothing waits like the
others (this test holds that). Real servers: a master and a replica of the test's
own, the replica frozen (SIGSTOP: connected, acknowledging nothing)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.exceptions import ReplicasNotConfirmed
from store.lua import ReplicaAcks
from store.models import Status
from tests.support.redis_ha import master_with_replica
from tests.support.redis_server import RedisServer
from worker.client import Handoffs

ACKS = ReplicaAcks(replicas=1, timeout_seconds=0.3)


@pytest.fixture
def master_and_replica(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    with master_with_replica(tmp_path) as servers:
        yield servers


def test_a_retried_decision_waits_for_the_replica_to_have_the_first(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = master_and_replica
    agent = Handoffs(Redis.from_url(master.url), replica_acks=ACKS)
    # Created unconfirmed, then seen on the replica: on a loaded machine a replica just
    # started can take longer than ACKS' 0.3 s to confirm the first write, which is not
    # what this test is about.
    creator = Handoffs(Redis.from_url(master.url))
    created = creator.request_approval(run_id="r", thread_id="t", action="deploy", channel="C0HA")
    copy = Redis(port=replica.port)
    deadline = time.monotonic() + 10
    while not copy.exists(creator.store.keys.handoff(created.id)):
        assert time.monotonic() < deadline, "the replica never had the handoff"
        time.sleep(0.01)

    assert replica.process is not None
    os.killpg(replica.process.pid, signal.SIGSTOP)  # connected, acknowledging nothing
    with pytest.raises(ReplicasNotConfirmed):
        agent.decide(created.id, Status.APPROVED, by="U0ALICE")

    # The same decision again, from another process's connection: still not confirmed.
    retry = Handoffs(Redis.from_url(master.url), replica_acks=ACKS)
    with pytest.raises(ReplicasNotConfirmed):
        retry.decide(created.id, Status.APPROVED, by="U0ALICE")

    os.killpg(replica.process.pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while True:
        try:
            decided = retry.decide(created.id, Status.APPROVED, by="U0ALICE")
            break
        except ReplicasNotConfirmed:
            assert time.monotonic() < deadline, "the replica never confirmed"
    assert decided.status is Status.APPROVED
    assert Redis(port=replica.port).exists(retry.store.keys.handoff(created.id))
    assert [e.event for e in retry.audit(created.id)].count("decided") == 1
