"""Handoffs of one run created and decided at once from several threads, through real
workers, in both shapes (0.3's, and 0.2's with its resume flag and route in the hash): each
is decided once, a handoff with a resume target is resumed exactly once and one without
never (whether to resume is read off the stored request), and the run's index ends empty
whichever shape (bucket field, set) it went through."""

from __future__ import annotations

import json
import random
import threading

from redis import Redis

from store.exceptions import AlreadyDecided
from store.models import TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support import resume_targets
from tests.support.indexes import anything_pending
from tests.test_storage_compact import write_previous_shape
from worker.client import Handoffs

RUN = "run: race ü *"
TARGET = "tests.support.resume_targets:record"


def test_racing_creates_and_decisions_of_one_run_resume_each_resumable_handoff_once(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    store = handoffs.store
    workers.start()
    old = write_previous_shape(redis, store, store.config.tasks, RUN)
    resumable: set[str] = {old}
    silent: set[str] = set()
    lock = threading.Lock()
    won: dict[str, list[str]] = {}

    def create(n: int) -> None:
        for i in range(6):
            with_target = (n + i) % 2 == 0
            made = handoffs.request_approval(
                run_id=RUN,
                thread_id="t",
                action="ship",
                args={"n": n, "i": i},
                resume=TARGET if with_target else None,
            )
            with lock:
                (resumable if with_target else silent).add(made.id)

    def decide(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200):
            with lock:
                ids = sorted(resumable | silent)
            if len(ids) >= 13 and all(i in won for i in ids):
                return
            target = rng.choice(ids)
            try:
                step = rng.random()
                if step < 0.4:
                    handoffs.decide(target, rng.choice(["approved", "rejected"]), by="U0X")
                elif step < 0.7:
                    handoffs.cancel(target, by="U0X")
                else:
                    store.expire_now(target, expired_by="U0X")
            except AlreadyDecided:
                continue
            with lock:
                won.setdefault(target, []).append(f"{seed}")

    threads = [threading.Thread(target=create, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=decide, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = resumable | silent
    for handoff_id in everything - won.keys():
        handoffs.cancel(handoff_id, by="U0X")
        won[handoff_id] = ["end"]
    assert all(len(w) == 1 for w in won.values()), won

    def settled() -> bool:
        return all(
            handoffs.get(i).resume.state in (TaskState.COMPLETED, TaskState.NONE)
            for i in everything
        )

    wait_until(settled, timeout=60)
    recorded = [
        json.loads(raw)["handoff_id"] for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)
    ]
    assert sorted(recorded) == sorted(resumable)
    for handoff_id in silent:
        assert handoffs.get(handoff_id).resume.state is TaskState.NONE
    assert handoffs.list_pending(run_id=RUN).items == []
    assert store.count_pending(store.keys.pending_by_run(RUN)) == 0
    assert anything_pending(redis, store.keys) == []
