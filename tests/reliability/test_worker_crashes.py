"""Worker crashes: `handoff worker` machines die (SIGKILL to the RQ worker, its work horse
and its dispatcher at once) 50 times at random moments while handoffs are being posted to
Slack, resumed and their messages updated; a replacement starts after each death.

Promise under test: nothing is lost and nothing completes twice. Every handoff is posted
and its message shows the decision, and every run is recorded resumed to completion exactly
once (attempts may repeat: a killed attempt is retried once its lease lapses, and a target
whose machine died right after it returned runs again as a later attempt with the same
idempotency key, which is what targets dedupe their effects on). ``--soak`` kills
200 times (RELIABILITY_KILLS sets another number). The seed is printed; set
RELIABILITY_SEED to replay a run's kill schedule.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.standin import Message
from store.models import TaskKind
from tests.conftest import wait_until
from tests.support import resume_targets
from tests.support.machines import dispatcher_connected, kill_machine
from tests.support.policies import task_policy
from tests.support.runs import run_size, seeded
from tests.support.slack_env import ALICE, CHANNEL, SlackEnv, started
from worker.client import Handoffs

KILLS = 50
SOAK_KILLS = 200
LIVE_WORKERS = 3
KILL_DELAY = (0.05, 0.5)
"""Seconds between two deaths, drawn uniformly..."""
MID_JOB = 0.7
"""...and the chance that the next death waits for a worker running a job rather than
taking any worker that is up."""
NEW_HANDOFF_EVERY = 0.05
"""Seconds between two handoffs the agent creates while machines die..."""
IN_FLIGHT = 30
"""...as long as fewer than this many are created and not yet resumed."""
SLACK_LATENCY = 0.03
FLEET: list[tuple[str, ...]] = [(), ("--fork",)]
"""Replacements alternate between the default worker (jobs in its own process) and one
that forks a work horse per job."""
POLICY = task_policy(attempts=10, timeout=2, backoff=(0.05, 0.5), lease_grace=0.3)
"""Short leases, so that a killed attempt is retried within about 2.5 s; attempts enough
for one handoff to lose several workers."""


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    env = SlackEnv(
        redis,
        redis_url,
        tmp_path,
        # A dispatched job lost with its worker is dispatched again after this long.
        extra_env={"HANDOFF_DISPATCH_TIMEOUT_SECONDS": "5"},
    )
    # Slack answers after a round trip, so that deaths land between a post and its record.
    env.standin.latency = SLACK_LATENCY
    yield from started(env, workers=LIVE_WORKERS, serves=0, before_stop=_kill_live_machines)


def _kill_live_machines(env: SlackEnv) -> None:
    for process in env.workers:
        if process.poll() is None:
            kill_machine(process)


def test_workers_killed_at_random_moments_lose_nothing_and_resume_each_run_once(
    slack: SlackEnv, redis: Redis, soak: bool
) -> None:
    kills = run_size("RELIABILITY_KILLS", default=KILLS, soak_size=SOAK_KILLS, soak=soak)
    rng = seeded(f"worker crashes: {kills} kills")
    handoffs = Handoffs(redis, tasks=POLICY)
    agent = _Agent(handoffs)
    started = time.monotonic()

    agent.start()
    horses = 0
    fleet = _Fleet(slack, redis)
    for death in range(kills):
        time.sleep(rng.uniform(*KILL_DELAY))
        victim = fleet.victim(rng)
        if os.environ.get("RELIABILITY_TRACE"):
            print(f"{time.monotonic() - started:.1f} s: {agent}; killing {victim.pid}", flush=True)
        horses += len(kill_machine(victim))
        slack.start_worker(*FLEET[death % len(FLEET)])
    agent.stop()
    killed_at = time.monotonic()

    created = agent.created
    wait_until(lambda: _completed(redis, handoffs, created, "resume_state"), timeout=60)
    wait_until(lambda: _completed(redis, handoffs, created, "notify_state"), timeout=60)
    finished_at = time.monotonic()

    # A target that returned can run again only if its machine died before the worker
    # recorded that it returned: then the repeat is a later attempt with the same
    # idempotency key (what a target dedupes its effect on). The store's own record of a
    # completed resume is exactly one per run (the "resumed" audit event, below).
    completed = _entries(redis, "completed")
    by_key: dict[str, list[int]] = defaultdict(list)
    for entry in completed:
        by_key[entry["idempotency_key"]].append(entry["attempt"])
    assert Counter({key: 1 for key in by_key}) == Counter(created), "a run never completed"
    for key, attempts in by_key.items():
        assert attempts == sorted(set(attempts)), f"{key}: one attempt completed twice"
    repeated_after_return = sum(len(a) - 1 for a in by_key.values())
    assert handoffs.store.failed_tasks() == []
    posts = _posts(slack)
    for handoff_id in created:
        handoff = handoffs.get(handoff_id)
        assert handoff.message_refs.get("ts"), f"{handoff_id} never posted"
        events = [event.event for event in handoffs.audit(handoff_id)]
        assert events.count("decided") == 1 and events.count("resumed") == 1, events
        assert len(posts[handoff_id]) == 1, f"{handoff_id} posted {len(posts[handoff_id])} times"
        [shown] = posts[handoff_id]  # posted once, although deaths cut posts short
        assert shown.ts == handoff.message_refs["ts"]
        assert not _buttons(shown.blocks), f"{handoff_id}: its message still has buttons"
    for entry in _entries(redis, "completed"):
        assert entry["idempotency_key"] == entry["handoff_id"]
        assert entry["status"] == "approved"

    retried = _retried(handoffs, created)
    interrupted = _interrupted_targets(redis)
    print(f"targets run again after they returned: {repeated_after_return}")
    print(
        f"{len(created)} handoffs; {kills} machines killed ({horses} work horses among them) in "
        f"{killed_at - started:.1f} s, all done {finished_at - killed_at:.1f} s later; "
        f"attempts repeated: {dict(retried)}; resume targets killed midway: {interrupted}"
    )
    assert sum(retried.values()) > 0, "no kill landed on a delivery, resume or update"


class _Fleet:
    """Picks which worker dies next, among those that are up: listening on the queue, their
    dispatcher running (killing machines faster than they boot tests nothing)."""

    def __init__(self, slack: SlackEnv, redis: Redis) -> None:
        self.slack = slack
        self.redis = redis
        self.redis_port = redis.connection_pool.connection_kwargs.get("port", 6379)
        self.up: set[int] = set()

    def victim(self, rng: random.Random) -> subprocess.Popen[bytes]:
        """A settled worker; by chance ``MID_JOB``, one in the middle of a job."""
        mid_job = rng.random() < MID_JOB
        started = time.monotonic()
        while time.monotonic() < started + 30:
            running = self._running_jobs()
            alive = [p for p in self.slack.workers if p.poll() is None and p.pid in running]
            for process in alive:
                if process.pid not in self.up and dispatcher_connected(process, self.redis_port):
                    self.up.add(process.pid)
            up = [p for p in alive if p.pid in self.up]
            busy = [p for p in up if running[p.pid]]
            if busy or (up and not mid_job):
                return rng.choice(busy or up)
            if up and time.monotonic() > started + 2:  # no job in 2 s: take any
                return rng.choice(up)
            time.sleep(0.005)
        raise AssertionError("no worker came up within 30 s:\n" + self.slack.logs()[-3000:])

    def _running_jobs(self) -> dict[int, int]:
        """How many jobs each RQ worker that has registered runs, by pid."""
        pipe = self.redis.pipeline(transaction=False)
        for key in self.redis.smembers("rq:workers"):
            pipe.hget(key, "pid")
            pipe.scard(key + b":executions")
        answers = pipe.execute()
        return {
            int(pid): jobs for pid, jobs in zip(answers[0::2], answers[1::2], strict=True) if pid
        }


class _Agent:
    """Creates approvals at a steady pace, and decides each one once it has been posted.

    It keeps at most ``IN_FLIGHT`` handoffs not yet resumed, as an agent waiting on its
    runs would: the work then fits whatever the machine (and the deaths) leave of the
    workers, and the backlog left when the deaths stop is small.
    """

    def __init__(self, handoffs: Handoffs) -> None:
        self.handoffs = handoffs
        self.created: list[str] = []
        self.decided = 0
        self._undecided: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._create, daemon=True),
            threading.Thread(target=self._decide, daemon=True),
        ]

    def __str__(self) -> str:
        resumed = self.handoffs.redis.llen(resume_targets.COMPLETED)
        return f"{len(self.created)} created, {self.decided} decided, {resumed} resumed"

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop creating; return once every handoff created so far is decided."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        assert not self._undecided, f"never posted: {self._undecided}"

    def _create(self) -> None:
        number = 0
        while not self._stop.wait(NEW_HANDOFF_EVERY):
            resumed = self.handoffs.redis.llen(resume_targets.COMPLETED)
            if len(self.created) - resumed >= IN_FLIGHT:
                continue
            handoff = self.handoffs.request_approval(
                run_id=f"crash-{number}",
                thread_id="t",
                action="issue_refund",
                args={"order_id": f"A-{number}", "amount": 30},
                channel=CHANNEL,
                resume="tests.support.resume_targets:record_slowly",
            )
            self.created.append(handoff.id)
            self._undecided.append(handoff.id)
            number += 1

    def _decide(self) -> None:
        deadline: float | None = None
        while True:
            if self._stop.is_set():
                deadline = deadline or time.monotonic() + 45
                if not self._undecided or time.monotonic() > deadline:
                    return
            for handoff_id in list(self._undecided):
                if self.handoffs.get(handoff_id).delivery.state.value == "completed":
                    self.handoffs.decide(handoff_id, "approved", by=ALICE)
                    self._undecided.remove(handoff_id)
                    self.decided += 1
            time.sleep(0.05)


def _completed(redis: Redis, handoffs: Handoffs, ids: list[str], state_field: str) -> bool:
    pipe = redis.pipeline(transaction=False)
    for handoff_id in ids:
        pipe.hget(handoffs.store.keys.handoff(handoff_id), state_field)
    return all(state == b"completed" for state in pipe.execute())


def _entries(redis: Redis, which: str) -> list[dict[str, Any]]:
    key = resume_targets.COMPLETED if which == "completed" else resume_targets.STARTED
    return [json.loads(raw) for raw in redis.lrange(key, 0, -1)]


def _retried(handoffs: Handoffs, ids: list[str]) -> Counter[str]:
    """How many handoffs needed more than one attempt, per task."""
    retried: Counter[str] = Counter()
    for handoff_id in ids:
        handoff = handoffs.get(handoff_id)
        for kind, task in (
            (TaskKind.DELIVER, handoff.delivery),
            (TaskKind.RESUME, handoff.resume),
            (TaskKind.NOTIFY, handoff.notify),
        ):
            if task.attempt > 1:
                retried[kind.value] += 1
    return retried


def _interrupted_targets(redis: Redis) -> int:
    done = {(e["handoff_id"], e["attempt"]) for e in _entries(redis, "completed")}
    return sum((e["handoff_id"], e["attempt"]) not in done for e in _entries(redis, "started"))


def _posts(slack: SlackEnv) -> dict[str, list[Message]]:
    """The channel messages posted for each handoff (known by their metadata)."""
    posts: dict[str, list[Message]] = defaultdict(list)
    for message in slack.standin.messages(CHANNEL):
        if message.thread_ts is None and message.metadata:
            posts[message.metadata["event_payload"]["handoff_id"]].append(message)
    return posts


def _buttons(blocks: list[dict[str, Any]]) -> bool:
    return any(block.get("type") == "actions" for block in blocks)
