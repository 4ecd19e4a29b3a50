"""Losing the Redis machine: a master with a replica and three Sentinels, all started here on
loopback; the master is SIGKILLed while an agent creates handoffs, a person decides them and
a real `handoff worker` (connected through Sentinel) resumes them.

Promise under test (docs/guarantees.md, "Failover"): with ``HANDOFF_MIN_REPLICA_ACKS=1``
every creation and decision that was acknowledged is on the promoted replica afterwards,
none is decided twice, and each decided handoff is resumed exactly once, with no process
restarted; while Sentinel fails over, callers are told to try again. The same run with
acks 0 prints what a failover lost. And a master cut off from its replica, with the
documented ``min-replicas-to-write``, refuses writes rather than acknowledging ones a
failover would discard.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis

from bot.api.app import ApiConfig
from store.api_keys import ApiKeys
from store.exceptions import AlreadyDecided, HandoffNotFound, MasterCutOff, ReplicasNotConfirmed
from store.models import Status
from store.settings import StoreSettings
from tests.conftest import WorkerProcesses
from tests.support.api_server import serve_api
from tests.support.ha_traffic import (
    DECIDER,
    Traffic,
    agent,
    decided_by_the_decider,
    decided_twice,
    resumes,
    worker_env,
)
from tests.support.redis_ha import SentinelGroup, require_redis_server, running, wait_for
from worker.client import Handoffs

REPLICA_LAG_SECONDS = 1.0
"""How long the replicas are paused right before the master is killed."""
RESUME_WAIT_SECONDS = 30.0
"""How long every kept decision has to be resumed after the traffic stopped."""
TRAFFIC_BEFORE_KILL_SECONDS = 2.0


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    # Two replicas: with HANDOFF_MIN_REPLICA_ACKS=1, the promoted one still has one to confirm
    # its writes (with a single replica, nothing could be confirmed after the failover).
    with running(SentinelGroup(tmp_path / "ha", replicas=2)) as started:
        yield started


def _run_failover(
    group: SentinelGroup, redis: Redis, redis_url: str, tmp_path: Path, acks: int
) -> dict[str, object]:
    workers = WorkerProcesses(group.url, tmp_path / "workers")
    (tmp_path / "workers").mkdir()
    try:
        workers.start(extra_env=worker_env(redis_url, acks))
        traffic = Traffic(agent(group.url, acks))
        traffic.start()
        time.sleep(TRAFFIC_BEFORE_KILL_SECONDS)
        killed_at, promoted_after = group.fail_over_while_replicas_lag(REPLICA_LAG_SECONDS)
        traffic.stop_after_failover(killed_at)
        assert group.master_port() in {server.port for server in group.replicas}

        # What the promoted replica holds of what was acknowledged, through a new client.
        after = agent(group.url, 0)
        lost_creations = []
        for handoff_id in traffic.created:
            try:
                after.get(handoff_id)
            except HandoffNotFound:
                lost_creations.append(handoff_id)
        lost_decisions = []
        for handoff_id in traffic.decided:
            try:
                handoff = after.get(handoff_id)
            except HandoffNotFound:
                lost_decisions.append(handoff_id)
                continue
            if not decided_by_the_decider(handoff):
                lost_decisions.append(handoff_id)
        kept = [h for h in traffic.decided if h not in lost_decisions]
        twice = decided_twice(after, kept)

        deadline = time.monotonic() + RESUME_WAIT_SECONDS
        while not set(kept) <= set(resumes(redis)) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)  # a second resume, if any, would show by now
        counts = resumes(redis)
        figures: dict[str, object] = {
            "acks": acks,
            "promoted_after_s": round(promoted_after, 2),
            "failover_s": round(traffic.failover_seconds(killed_at), 2),
            "created": len(traffic.created),
            "decided": len(traffic.decided),
            "try_again": dict(traffic.try_again),
            "last_refusal": traffic.last_refusal,
            "lost_creations": len(lost_creations),
            "found_gone_by_the_decider": len(traffic.vanished),
            "lost_decisions": len(lost_decisions),
            "decided_twice": len(twice),
            "resumed_twice": sum(1 for h in kept if counts[h] > 1),
            "not_resumed": sum(1 for h in kept if counts[h] == 0),
            "resumed_not_decided": sorted(set(counts) - set(traffic.created)),
        }
        print(f"\nsentinel failover figures: {json.dumps(figures)}")
        return {
            **figures,
            "_lost": lost_creations + lost_decisions,
            "_counts": counts,
            "_kept": kept,
        }
    finally:
        workers.stop_all()


def test_failover_with_replica_acks_keeps_every_acknowledged_write(
    group: SentinelGroup, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    figures = _run_failover(group, redis, redis_url, tmp_path, acks=1)
    assert figures["created"] and figures["decided"], figures
    assert figures["lost_creations"] == 0 and figures["lost_decisions"] == 0, figures
    assert figures["decided_twice"] == 0, figures
    assert figures["not_resumed"] == 0, figures
    counts = figures["_counts"]
    assert all(counts[h] == 1 for h in figures["_kept"]), figures  # type: ignore[attr-defined, index]
    assert figures["failover_s"] < 15, figures  # type: ignore[operator]


def test_failover_without_replica_acks_reports_what_was_lost(
    group: SentinelGroup, redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    # Asynchronous replication: what was lost depends on the replica's lag at the kill, so
    # the figure is printed (docs/guarantees.md quotes it), not asserted; the run still
    # follows the failover by itself and decides nothing twice.
    figures = _run_failover(group, redis, redis_url, tmp_path, acks=0)
    assert figures["created"] and figures["decided"], figures
    assert figures["decided_twice"] == 0, figures


def test_a_master_cut_off_from_its_replica_refuses_writes(tmp_path: Path) -> None:
    require_redis_server()
    group = SentinelGroup(
        tmp_path / "ha",
        master_extra=("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"),
    )
    try:
        group.start()
        with_acks = agent(group.url, 1)
        without_acks = agent(group.url, 0)
        before = with_acks.request_approval(
            run_id="run", thread_id="t", action="deploy", channel="C0HA"
        )
        master = Redis(port=group.master.port)
        # Cut off: the replica stops answering (SIGSTOP keeps its sockets open, as a network
        # partition does), so the master hears no acknowledgement from it.
        group.replica.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            # At once: the write is not confirmed within the timeout, so it is refused.
            with pytest.raises(ReplicasNotConfirmed, match="try again"):
                with_acks.decide(before.id, Status.APPROVED, by=DECIDER)
            # Once the replica lags past min-replicas-max-lag, the master itself refuses
            # every write, whoever asks, and nothing is written.
            refused = wait_for(
                lambda: _refused(without_acks),
                timeout=15,
                what="the master to refuse writes",
                interval=0.2,
            )
            assert isinstance(refused, MasterCutOff)
            assert "min-replicas-to-write" in str(refused)
            keys_before = master.dbsize()
            with pytest.raises(MasterCutOff):
                without_acks.request_approval(
                    run_id="run-2", thread_id="t", action="deploy", channel="C0HA"
                )
            # The refused decision stayed on the master (Redis cannot take a write back),
            # the refused creations wrote nothing.
            assert master.dbsize() == keys_before
        finally:
            group.replica.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        # Reconnected, the same decision is confirmed (the one already made, not a second).
        decided = wait_for(
            lambda: _decided_again(with_acks, before.id),
            timeout=20,
            what="the retried decision to be confirmed",
            interval=0.2,
        )
        assert decided.resume_data.decided_by == DECIDER
        assert [e.event for e in with_acks.audit(before.id)].count("decided") == 1
    finally:
        group.stop()


def _refused(handoffs: Handoffs) -> BaseException | None:
    try:
        handoffs.request_approval(run_id="probe", thread_id="t", action="deploy", channel="C0HA")
    except MasterCutOff as exc:
        return exc
    return None


def _decided_again(handoffs: Handoffs, handoff_id: str):  # type: ignore[no-untyped-def]
    try:
        handoffs.decide(handoff_id, Status.APPROVED, by=DECIDER)
    except AlreadyDecided:
        pass
    except ReplicasNotConfirmed:
        return None
    return handoffs.get(handoff_id)


def test_the_api_follows_a_failover_and_answers_503_meanwhile(group: SentinelGroup) -> None:
    # `handoff api` through Sentinel: a wait held across the failover is answered with the
    # decision made on the promoted master; decisions sent meanwhile get 503 + Retry-After,
    # and the one finally acknowledged is the only one.
    settings = StoreSettings.from_env(redis_url=group.url, min_replica_acks=1)
    store = settings.open_store()
    key = ApiKeys(store.redis, store.keys).create("ops", admin=True).key
    config = ApiConfig(redis_url=group.url, creates_per_minute=1000)
    with serve_api(store, config) as url:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        created = client.post(
            "/v1/handoffs",
            json={
                "request_type": "approval",
                "run_id": "run-api",
                "thread_id": "t",
                "action": {"name": "deploy", "args": {}},
                "channel": "C0HA",
            },
        )
        assert created.status_code == 201, created.text
        handoff_id = created.json()["id"]
        answers: list[httpx.Response] = []

        def wait() -> None:
            # As a caller does: a 503 (the store lost meanwhile) is asked again.
            for _ in range(60):
                answers.append(client.get(f"/v1/handoffs/{handoff_id}?wait=25"))
                if answers[-1].status_code != 503:
                    return
                time.sleep(0.5)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        group.master.kill()
        refused = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            decided = client.post(
                f"/v1/handoffs/{handoff_id}/decision", json={"outcome": "approved", "by": DECIDER}
            )
            if decided.status_code != 503:
                break
            assert decided.headers["retry-after"], decided.headers
            refused.append(decided)
            time.sleep(0.2)
        assert decided.status_code == 200, decided.text
        waiter.join(timeout=40)
        answer = answers[-1]
        assert answer.status_code == 200, answer.text
        assert all(a.headers.get("retry-after") for a in answers[:-1])
        assert answer.json()["status"] == "approved"
        assert answer.json()["resume_data"]["decided_by"] == DECIDER
        after = agent(group.url, 0)
        assert [e.event for e in after.audit(handoff_id)].count("decided") == 1
        print(
            f"\napi through the failover: {len(refused)} decisions and "
            f"{len(answers) - 1} waits answered 503 meanwhile"
        )


def test_a_sentinel_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    """The group picks free ports, then starts its Sentinels; in a parallel suite another
    process can take a port in between (seen: a Sentinel dying with "Address already in
    use" and the group waiting 20 s for it). Made certain here: the port is held first."""
    import socket

    require_redis_server()
    group = SentinelGroup(tmp_path / "ha")
    held = socket.socket()
    held.bind(("127.0.0.1", group.sentinel_ports[2]))
    held.listen()
    taken = group.sentinel_ports[2]
    try:
        with running(group):
            assert group.sentinel_ports[2] != taken
            assert Redis(port=group.sentinel_ports[2]).ping()
            assert agent(group.url, 0).request_approval(
                run_id="run", thread_id="t", action="deploy", channel="C0HA"
            )
    finally:
        held.close()
