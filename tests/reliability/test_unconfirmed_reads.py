"""What an agent or an admin is told must survive a failover with HANDOFF_MIN_REPLICA_ACKS:
a decision the replicas do not have yet (its clicker was told "try again") must not be
handed to the agent waiting for it, and a revoked API key must not come back.

Real servers of the test's own: a master and a replica, the replica frozen (SIGSTOP:
cut off (it stops replicating and keeps what it has), then the master killed: the replica
is the master now, as after a failover, which shows what was lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.api_keys import ApiKeys
from store.exceptions import ReplicasNotConfirmed
from store.lua import ReplicaAcks
from store.models import Status
from tests.support.redis_ha import master_with_replica
from tests.support.redis_server import RedisServer
from worker.client import Handoffs

ACKS = ReplicaAcks(replicas=1, timeout_seconds=0.3)
PATIENT = ReplicaAcks(replicas=1, timeout_seconds=10)
"""For the steps taken while the replica keeps up: on a loaded machine a replica just
started can take longer than 0.3 s to confirm a write, which is not what these tests are
about (WAIT returns as soon as the replica has it, so this costs nothing when it is quick)."""


@pytest.fixture
def master_and_replica(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    with master_with_replica(tmp_path) as servers:
        yield servers


def _cut_off(replica: RedisServer) -> None:
    """The replica stops getting the master's writes (a partition): it keeps what it has."""
    replica_client = Redis(port=replica.port)
    replica_client.replicaof("NO", "ONE")
    replica_client.close()


def _fail_over(master: RedisServer, replica: RedisServer) -> Redis:
    """The master dies; the replica cut off before the last writes is the master now (what
    Sentinel does). Returns a client of the new master."""
    master.kill()
    return Redis(port=replica.port)


def test_a_waiting_agent_is_not_given_a_decision_the_replicas_lack(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = master_and_replica
    setup = Handoffs(Redis.from_url(master.url), replica_acks=PATIENT)
    created = setup.request_approval(run_id="r", thread_id="t", action="deploy", channel="C0HA")
    # A first decision while the replica keeps up: the server has the script loaded.
    warm = setup.request_approval(run_id="r", thread_id="t2", action="deploy", channel="C0HA")
    setup.decide(warm.id, Status.REJECTED, by="U0BOB")
    assert setup.wait(warm.id, timeout=15).status is Status.REJECTED  # confirmed: returned
    agent = Handoffs(Redis.from_url(master.url), replica_acks=ACKS)
    reviewer = Handoffs(Redis.from_url(master.url), replica_acks=ACKS)

    seen: list[Status] = []
    refused: list[str] = []

    def wait() -> None:
        try:
            seen.append(agent.wait(created.id, timeout=2).status)
        except TimeoutError as exc:
            refused.append(str(exc))

    waiter = threading.Thread(target=wait, daemon=True)
    _cut_off(replica)
    waiter.start()
    with pytest.raises(ReplicasNotConfirmed):  # the clicker is told "try again"
        reviewer.decide(created.id, Status.APPROVED, by="U0ALICE")
    waiter.join(timeout=5)
    # The agent saw the decision but waits for the replicas to have it.
    assert refused and "not confirmed" in refused[0], (seen, refused)
    # An agent that polls is told to try again, not given the decision.
    with pytest.raises(ReplicasNotConfirmed):
        agent.get(created.id)

    promoted = _fail_over(master, replica)
    after = Handoffs(promoted).get(created.id)
    # Either the agent was not told, or what it was told survived.
    assert not seen or after.status in seen, (
        f"the agent was given {seen} but after the failover the handoff is {after.status}"
    )


def test_a_revoked_key_stays_revoked_across_a_failover(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = master_and_replica
    agent = Handoffs(Redis.from_url(master.url), replica_acks=ACKS)
    leaked = ApiKeys(agent.redis, agent.store.keys, acks=PATIENT).create("leaked").key
    keys = ApiKeys(agent.redis, agent.store.keys, acks=ACKS)

    _cut_off(replica)
    told_revoked = True
    try:
        keys.revoke("leaked")  # `handoff keys revoke` prints "revoked" when this returns
    except ReplicasNotConfirmed:
        told_revoked = False

    promoted = _fail_over(master, replica)
    back = ApiKeys(promoted, agent.store.keys).authenticate(leaked)
    assert not (told_revoked and back is not None), "a key revoked is live again"
