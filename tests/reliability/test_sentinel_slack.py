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

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.lua import ReplicaAcks
from store.settings import connect
from tests.reliability.test_redis_restart import POLICY, Traffic
from tests.support.ha_traffic import check_clicks_kept, click_figures
from tests.support.redis_ha import SentinelGroup, running
from tests.support.slack_env import SlackEnv, started
from worker.client import Handoffs

TRAFFIC_SECONDS = 2.5
REPLICA_LAG_SECONDS = 1.0


@pytest.fixture
def slack(tmp_path: Path, redis: Redis, redis_url: str) -> Iterator[tuple[SentinelGroup, SlackEnv]]:
    with running(SentinelGroup(tmp_path / "ha", replicas=2)) as group:
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
        bot = started(env, workers=2)
        yield group, next(bot)
        bot.close()


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
    _, promoted_after = group.fail_over_while_replicas_lag(REPLICA_LAG_SECONDS)
    time.sleep(TRAFFIC_SECONDS)
    created = check_clicks_kept(traffic, env, redis)
    # Serve and workers followed the new master by themselves: the same processes.
    assert {p.pid for p in env.processes} == bot_processes
    figures = {"promoted_after_s": round(promoted_after, 2), **click_figures(traffic, created)}
    print(f"sentinel slack figures: {json.dumps(figures)}")
