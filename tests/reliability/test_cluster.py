"""Redis Cluster: three masters with two replicas each, started here on loopback; the store
on the cluster (``redis+cluster://``), RQ's queues on a Redis of their own
(``HANDOFF_QUEUE_REDIS_URL``, RQ does not run on Cluster), two namespaces whose slots live on
different masters, a real `handoff worker` for each.

Promise under test (docs/deployment.md, "Cluster"; docs/guarantees.md, "Failover"): the
worker loop (create, deliver, decide, resume once) runs on each namespace's master; and
when the master of one namespace is SIGKILLed during decisions, the cluster promotes one of
its replicas, every process follows it, and with ``HANDOFF_MIN_REPLICA_ACKS=1`` no
acknowledged creation or decision is lost, none is decided twice, each is resumed once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from store.exceptions import HandoffNotFound
from store.keys import KeySpace
from store.models import Status, TaskState
from store.settings import StoreSettings, connect
from tests.conftest import WorkerProcesses
from tests.reliability.test_redis_restart import Traffic as Clicking
from tests.support import resume_targets
from tests.support.ha_traffic import (
    DECIDER,
    Traffic,
    agent,
    check_clicks_kept,
    click_figures,
    decided_by_the_decider,
    decided_twice,
    resumes,
    worker_env,
)
from tests.support.redis_ha import ClusterNodes, running, wait_for
from tests.support.slack_env import ALICE, BOB, SlackEnv, started
from worker.client import Handoffs

HANDOFFS_PER_NAMESPACE = 10
TRAFFIC_BEFORE_KILL_SECONDS = 1.5
CLICKING_AFTER_FAILOVER_SECONDS = 3.0
"""How long people go on clicking on the promoted master before the traffic stops."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterNodes]:
    # Two replicas a master: with HANDOFF_MIN_REPLICA_ACKS=1 the promoted one still has one.
    with running(ClusterNodes(tmp_path / "cluster", replicas=2)) as started_nodes:
        yield started_nodes


def _namespaces_on_two_masters(cluster: ClusterNodes) -> tuple[str, str]:
    """Two namespaces whose slots (one each: the ``{ns}`` hash tag) are on different
    masters."""
    first = "team-a"
    first_master = cluster.master_of(KeySpace(first).prefix)
    for n in range(100):
        other = f"team-b{n}"
        if cluster.master_of(KeySpace(other).prefix) != first_master:
            return first, other
    raise AssertionError("no second namespace on another master")


def test_the_worker_loop_runs_on_a_cluster_and_survives_a_master_failover(
    cluster: ClusterNodes, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    namespaces = _namespaces_on_two_masters(cluster)
    masters = {ns: cluster.master_of(KeySpace(ns).prefix) for ns in namespaces}
    assert len(set(masters.values())) == 2
    log_dir = tmp_path / "workers"
    log_dir.mkdir()
    workers = WorkerProcesses(cluster.url, log_dir)
    try:
        for ns in namespaces:
            workers.start(
                extra_env={
                    **worker_env(redis_url, acks=1),
                    "HANDOFF_NAMESPACE": ns,
                    "HANDOFF_QUEUE": f"q-{ns}",
                    # RQ on the test machine's Redis (this test's database): not on Cluster.
                    "HANDOFF_QUEUE_REDIS_URL": redis_url,
                }
            )
        clients = {ns: agent(cluster.url, 1, namespace=ns) for ns in namespaces}

        # The loop on each namespace, each on its own master.
        made: dict[str, list[str]] = {}
        for ns, handoffs in clients.items():
            made[ns] = [
                handoffs.request_approval(
                    run_id=f"{ns}-{n}",
                    thread_id="t",
                    action="deploy",
                    channel="C0HA",
                    resume="tests.support.ha_targets:record",
                ).id
                for n in range(HANDOFFS_PER_NAMESPACE)
            ]
            # Delivered by the worker (its notifier logs the message: no Slack token).
            wait_for(
                lambda h=handoffs, ids=made[ns]: all(
                    h.get(i).delivery.state is TaskState.COMPLETED for i in ids
                ),
                timeout=30,
                what=f"the deliveries of {ns}",
                interval=0.2,
            )
            for handoff_id in made[ns]:
                handoffs.decide(handoff_id, Status.APPROVED, by=DECIDER)
        everything = [i for ids in made.values() for i in ids]
        wait_for(
            lambda: set(everything) <= set(resumes(redis)),
            timeout=30,
            what="every handoff resumed",
            interval=0.2,
        )
        for handoffs in clients.values():
            assert handoffs.list_pending().items == []

        # A master failover inside the cluster while decisions run on its namespace.
        victim_ns = namespaces[0]
        traffic = Traffic(clients[victim_ns])
        traffic.start()
        time.sleep(TRAFFIC_BEFORE_KILL_SECONDS)
        killed_at = cluster.kill_master_of(KeySpace(victim_ns).prefix)
        promoted_after = time.monotonic() - killed_at
        traffic.stop_after_failover(killed_at)

        after = clients[victim_ns]
        lost = []
        for handoff_id in traffic.created:
            try:
                handoff = after.get(handoff_id)
            except HandoffNotFound:
                lost.append(handoff_id)
                continue
            if handoff_id in traffic.decided and not decided_by_the_decider(handoff):
                lost.append(handoff_id)
        twice = decided_twice(after, traffic.decided)
        wait_for(
            lambda: set(traffic.decided) <= set(resumes(redis)),
            timeout=40,
            what="every acknowledged decision resumed",
            interval=0.2,
        )
        time.sleep(1.5)  # a second resume, if any, would show by now
        counts = resumes(redis)
        figures = {
            "promoted_after_s": round(promoted_after, 2),
            "failover_s": round(traffic.failover_seconds(killed_at), 2),
            "created": len(traffic.created),
            "decided": len(traffic.decided),
            "try_again": dict(traffic.try_again),
            "last_refusal": traffic.last_refusal,
            "lost": len(lost),
            "decided_twice": len(twice),
            "resumed_twice": sum(1 for h in everything + traffic.decided if counts[h] > 1),
        }
        print(f"\ncluster failover figures: {json.dumps(figures)}")
        assert traffic.created and traffic.decided, figures
        assert not lost and not twice, figures
        assert figures["resumed_twice"] == 0, figures
        # The other namespace's master was not touched and still answers.
        other = clients[namespaces[1]]
        assert other.get(made[namespaces[1]][0]).status is Status.APPROVED
    finally:
        workers.stop_all()


def test_the_slack_loop_runs_on_a_cluster_through_a_master_failover(
    cluster: ClusterNodes, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    # `handoff serve` and two `handoff worker` processes on the cluster (the queues on this
    # test's database), signed clicks from the stand-in: posted, approved by a click,
    # resumed once, a second click told who decided; then the namespace's master is
    # SIGKILLed while an agent creates and people click: with acks 1 every acknowledged
    # click stays decided by its person, every handoff resumed once, nothing restarted.
    env = SlackEnv(
        connect(cluster.url),
        cluster.url,
        tmp_path,
        extra_env={
            "HANDOFF_QUEUE_REDIS_URL": redis_url,
            "HANDOFF_MIN_REPLICA_ACKS": "1",
            "RESUME_WITNESS_URL": redis_url,
        },
    )
    bot = started(env, workers=2)
    slack = next(bot)
    try:
        env.handoffs = Handoffs.from_settings(
            StoreSettings.from_env(redis_url=cluster.url, min_replica_acks=1)
        )
        handoff_ids = [slack.refund_approval(run_id=f"run-{n}") for n in range(3)]
        for handoff_id in handoff_ids:
            message = slack.posted(handoff_id, timeout=30)
            clicked = slack.standin.click(ALICE, message, ids.APPROVE)
            assert clicked.status == 200, clicked
            again = slack.standin.click(BOB, message, ids.APPROVE)
            assert again.status == 200, again
        for handoff_id in handoff_ids:
            wait_for(
                lambda h=handoff_id: slack.handoffs.get(h).resume.state is TaskState.COMPLETED,
                timeout=30,
                what="the resume",
                interval=0.1,
            )
            decided = slack.handoffs.get(handoff_id)
            assert decided.status is Status.APPROVED
            assert decided.resume_data is not None and decided.resume_data.decided_by == ALICE
            assert [e.event for e in slack.handoffs.audit(handoff_id)].count("decided") == 1
        completed = Counter(
            json.loads(raw)["handoff_id"] for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)
        )
        assert {h: completed[h] for h in handoff_ids} == {h: 1 for h in handoff_ids}
        told = " ".join(e.text for e in slack.standin.ephemerals(BOB))
        assert "Already approved" in told or "already approved" in told, told

        # The namespace's master lost during clicks: the cluster promotes a replica.
        traffic = Clicking(slack, 24)
        traffic.agent = slack.handoffs
        traffic.start()
        time.sleep(TRAFFIC_BEFORE_KILL_SECONDS + 1)
        cluster.kill_master_of(slack.handoffs.store.keys.prefix)
        time.sleep(CLICKING_AFTER_FAILOVER_SECONDS)
        created = check_clicks_kept(traffic, slack, redis)
        print(f"\ncluster slack figures: {json.dumps(click_figures(traffic, created))}")
    finally:
        bot.close()
