"""The Slack loop across a Sentinel failover: `handoff serve` and two `handoff worker`
processes connected through Sentinel (``redis+sentinel://``, ``HANDOFF_MIN_REPLICA_ACKS=1``),
an agent creating approvals, people clicking Approve as signed HTTP from the Slack stand-in;
the replicas fall behind for a second and the master is SIGKILLed.

Promise under test (docs/guarantees.md, "Failover"): every click the bot acknowledged ends
decided by that person on the promoted replica, every handoff is decided and resumed
exactly once, the bot and workers follow the new master with no restart, and meanwhile
people are told to try again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.lua import ReplicaAcks
from store.models import Status, TaskState
from store.settings import connect
from tests.conftest import wait_until
from tests.reliability.test_redis_restart import POLICY, Traffic
from tests.support import resume_targets
from tests.support.redis_ha import SentinelGroup, require_redis_server, wait_for
from tests.support.slack_env import SlackEnv, started
from worker.client import Handoffs

TRAFFIC_SECONDS = 2.5
REPLICA_LAG_SECONDS = 1.0


@pytest.fixture
def slack(tmp_path: Path, redis: Redis, redis_url: str) -> Iterator[tuple[SentinelGroup, SlackEnv]]:
    require_redis_server()
    group = SentinelGroup(tmp_path / "ha", replicas=2)
    try:
        group.start()
        env = SlackEnv(
            connect(group.url),
            group.url,
            tmp_path,
            extra_env={
                "HANDOFF_MIN_REPLICA_ACKS": "1",
                "HANDOFF_DISPATCH_TIMEOUT_SECONDS": "5",
                # The resume target reports to this test's database, which no failover
                # touches (a report on the HA servers could be lost with their master).
                "RESUME_WITNESS_URL": redis_url,
            },
        )
        running = started(env, workers=2)
        yield group, next(running)
        running.close()
    finally:
        group.stop()


def test_clicks_through_a_sentinel_failover_lose_no_acknowledged_decision(
    slack: tuple[SentinelGroup, SlackEnv], redis: Redis
) -> None:
    group, env = slack
    seed = int(os.environ.get("RELIABILITY_SEED") or random.randrange(1 << 30))
    print(f"\nRELIABILITY_SEED={seed}")
    bot_processes = {p.pid for p in env.processes}
    traffic = Traffic(env, seed)
    traffic.agent = Handoffs(env.redis, tasks=POLICY, replica_acks=ReplicaAcks(1, 1.0))
    traffic.start()
    time.sleep(TRAFFIC_SECONDS)
    for server in group.replicas:
        server.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    Redis(port=group.master.port).client_kill_filter(_type="replica")
    time.sleep(REPLICA_LAG_SECONDS)
    killed_at = time.monotonic()
    old_port = group.master.port
    group.master.kill()
    for server in group.replicas:
        server.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    wait_for(
        lambda: group.master_port() != old_port,
        timeout=30,
        what="Sentinel to promote a replica",
        interval=0.1,
    )
    promoted_after = time.monotonic() - killed_at
    time.sleep(TRAFFIC_SECONDS)
    traffic.creating.clear()
    created = list(traffic.created)
    with contextlib.suppress(AssertionError):  # the assertion below says what is missing
        wait_until(
            lambda: traffic.failures or all(not env.handoffs.get(i).is_pending for i in created),
            timeout=45,
        )
    traffic.stop()
    pending = [h for h in env.handoffs.store.get_many(created) if h.is_pending]
    assert not pending, [
        (h.id, h.delivery.state, h.delivery.attempt, h.message_refs, h.created_at) for h in pending
    ]

    # No acknowledged decision lost: decided, by the person the bot acknowledged.
    for handoff_id, user in traffic.acknowledged.items():
        decided = env.handoffs.get(handoff_id)
        assert decided.status is Status.APPROVED, handoff_id
        assert decided.resume_data is not None and decided.resume_data.decided_by == user
    wait_until(
        lambda: all(env.handoffs.get(i).resume.state is TaskState.COMPLETED for i in created),
        timeout=60,
    )
    completed = [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]
    ran = Counter(entry["handoff_id"] for entry in completed)
    assert {i: ran[i] for i in created} == {i: 1 for i in created}
    for handoff_id in created:
        audit = [e.event for e in env.handoffs.audit(handoff_id)]
        assert audit.count("decided") == 1, audit
    # Serve and workers followed the new master by themselves: same processes, all alive.
    assert {p.pid for p in env.processes} == bot_processes
    assert all(p.poll() is None for p in env.processes), env.logs()[-5000:]
    print(
        "sentinel slack figures: "
        + json.dumps(
            {
                "promoted_after_s": round(promoted_after, 2),
                "created": len(created),
                "acknowledged_clicks": len(traffic.acknowledged),
                "clicks": dict(traffic.clicks),
            }
        )
    )
