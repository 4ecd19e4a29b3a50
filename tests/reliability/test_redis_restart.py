"""Redis restart: a Redis server of the test's own (append-only file, ``appendfsync always``)
is SIGKILLed and restarted on the same port and directory while an agent creates handoffs,
`handoff worker` processes post and resume them, and people decide them by signed clicks
sent to `handoff serve`.

Promise under test: no acknowledged decision is lost (a click the bot answered without a
refusal ends decided in Redis, by the person who clicked); once Redis is back everything
resumes (every handoff decided and resumed to completion exactly once) and `handoff serve`
and `handoff worker` recover by themselves, with no restart. While Redis is down, what a
person does is answered HTTP 200 with a "try again" message (button, modal opening, modal
submission, slash command), events (a thread reply, the App Home opened) get 503 and run
when Slack delivers them again after the outage, and ``/healthz`` answers 503.
``--soak`` restarts Redis 5 times under more traffic. RELIABILITY_SEED replays the clicks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import RedisError

from bot.blockkit import ids
from bot.standin import Message, Response
from store.models import Status, TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support import resume_targets
from tests.support.ha_traffic import check_clicks_kept
from tests.support.policies import task_policy
from tests.support.redis_server import RedisServer
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, OWNER, SlackEnv, started
from worker.client import Handoffs

RESTARTS = 1
SOAK_RESTARTS = 5
OUTAGE_SECONDS = 4.0
"""How long Redis stays down: time for the probes, and longer than a worker's wait in the
second test (HANDOFF_REDIS_WAIT_SECONDS=1)."""
TRAFFIC_SECONDS = 2.5
"""Traffic before the first kill, between restarts, and after the last one."""
NEW_HANDOFF_EVERY = 0.15
READING_SECONDS = 1.0
"""A message is clicked once it has been shown this long (so some are pending at each kill)."""
CLICKERS = (ALICE, BOB)
"""People clicking Approve on whatever is pending; CAROL and ADMIN probe the outage."""
TRY_AGAIN = "try again"
POLICY = task_policy(attempts=20, timeout=30, backoff=(0.2, 1.0), lease_grace=1.0)
"""Attempts enough to outlast the outages; short backoff to keep the run short."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    running = RedisServer(tmp_path / "redis")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def slack(server: RedisServer, tmp_path: Path) -> Iterator[SlackEnv]:
    extra_env = {"HANDOFF_DISPATCH_TIMEOUT_SECONDS": "5"}
    env = SlackEnv(Redis.from_url(server.url), server.url, tmp_path, extra_env=extra_env)
    yield from started(env, workers=2)


class Traffic:
    """The agent creating handoffs and people clicking Approve, each in a thread of its own,
    recording what the bot acknowledged."""

    def __init__(self, slack: SlackEnv, seed: int) -> None:
        self.slack = slack
        self.agent = Handoffs(slack.redis, tasks=POLICY)
        self.random = random.Random(seed)
        self.created: list[str] = []
        self.acknowledged: dict[str, str] = {}
        """handoff id -> the person whose click the bot acknowledged (no refusal)."""
        self.clicks: Counter[str] = Counter()
        self.creating = threading.Event()
        self.clicking = threading.Event()
        self.failures: list[BaseException] = []
        self._threads = [threading.Thread(target=self._create, daemon=True)] + [
            threading.Thread(target=self._click, args=(user,), daemon=True) for user in CLICKERS
        ]
        self._lock = threading.Lock()

    def start(self) -> None:
        self.creating.set()
        self.clicking.set()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.creating.clear()
        self.clicking.clear()
        for thread in self._threads:
            thread.join(timeout=30)
        assert not self.failures, self.failures

    def _create(self) -> None:
        n = 0
        while self.creating.is_set():
            key = f"restart-{n}"
            try:
                # An agent retries with the same key until the store answers.
                handoff = self.agent.request_approval(
                    run_id=f"run-{n}",
                    thread_id="t",
                    action="issue_refund",
                    args={"order_id": f"A-{n}"},
                    resume="tests.support.resume_targets:record_after_a_while",
                    idempotency_key=key,
                )
            except RedisError:
                time.sleep(0.2)
                continue
            except BaseException as exc:  # a bug: report it, not a hang
                self.failures.append(exc)
                return
            with self._lock:
                if handoff.id not in self.created:
                    self.created.append(handoff.id)
            n += 1
            time.sleep(NEW_HANDOFF_EVERY)

    def _click(self, user: str) -> None:
        settled: set[str] = set()
        """Handoffs this person saw decided (by them or someone else): not clicked again."""
        try:
            while self.clicking.is_set():
                # People read a message for a moment before they click.
                read_by = time.time() - READING_SECONDS
                live = [
                    m
                    for m in pending_messages(self.slack)
                    if message_handoff(m) not in settled and float(m.ts) < read_by
                ]
                if not live:
                    time.sleep(0.05)
                    continue
                message = self.random.choice(live)
                if self.click(user, message):
                    settled.add(message_handoff(message))
                time.sleep(self.random.uniform(0.05, 0.2))
        except BaseException as exc:
            self.failures.append(exc)

    def click(self, user: str, message: Message) -> bool:
        """Click Approve and remember the decision if the bot acknowledged it; False when
        the person is told to try again."""
        before = len(replies_to(self.slack, user, message))
        response = self.slack.standin.click(user, message, ids.APPROVE)
        replies = replies_to(self.slack, user, message)[before:]
        outcome = "acknowledged" if not replies else "refused"
        if any(TRY_AGAIN in text for text in replies) or response.status != 200:
            outcome = "try again"
        with self._lock:
            self.clicks[f"{response.status} {outcome}"] += 1
            if outcome == "acknowledged":
                handoff_id = message_handoff(message)
                assert handoff_id not in self.acknowledged, (handoff_id, user, self.acknowledged)
                self.acknowledged[handoff_id] = user
        return outcome != "try again"


def message_handoff(message: Message) -> str:
    return str(((message.metadata or {}).get("event_payload") or {}).get("handoff_id"))


def pending_messages(slack: SlackEnv) -> list[Message]:
    """Messages of the agent's approvals (not the probes) that still show their buttons."""
    return [
        m
        for m in slack.standin.messages(CHANNEL)
        if not m.thread_ts
        and (m.metadata or {}).get("event_type") == "handoff_posted"
        and ((m.metadata or {}).get("event_payload") or {}).get("run_id", "").startswith("run-")
        and any(b.get("type") == "actions" for b in m.blocks)
    ]


def replies_to(slack: SlackEnv, user: str, message: Message) -> list[str]:
    """The private replies ``user`` got to clicks on ``message``."""
    return [e.text for e in slack.standin.ephemerals(user) if e.message_ts == message.ts]


def health(slack: SlackEnv) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{slack.port}/healthz", timeout=3) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def probe_every_surface_while_down(
    slack: SlackEnv, approval: Message, question: Message
) -> tuple[list[float], list[Response]]:
    """Each surface answers (within Slack's 3 s): 200 and "try again" to the person, or 503
    to an event, which Slack delivers again later. Returns how long each answer took, and
    the events to deliver again."""
    standin = slack.standin
    assert health(slack) == 503

    clicked = standin.click(CAROL, approval, ids.APPROVE)
    assert clicked.status == 200, clicked
    assert TRY_AGAIN in " ".join(replies_to(slack, CAROL, approval))

    # A modal opened before the outage is submitted during it.
    [modal] = [v for v in standin.views(CAROL) if not v.closed]
    submitted = standin.submit_view(CAROL, modal, {ids.REASON_BLOCK: {ids.VALUE: "no"}})
    assert submitted.status == 200, submitted
    assert TRY_AGAIN in json.dumps(submitted.json().get("errors")), submitted.text

    shown = len(replies_to(slack, CAROL, approval))
    opening = standin.click(CAROL, approval, ids.REJECT)
    assert opening.status == 200, opening
    assert TRY_AGAIN in " ".join(replies_to(slack, CAROL, approval)[shown:])

    _, replied = standin.post_message(CAROL, CHANNEL, "Yes, ship it", thread_ts=question.ts)
    assert replied.status == 503, replied

    listed = standin.send_command(ADMIN, "/handoff", "list", channel_id=CHANNEL)
    assert listed.status == 200, listed
    assert TRY_AGAIN in standin.ephemerals(ADMIN)[-1].text
    # A workspace owner is an admin through users.info, cached in Redis.
    stats = standin.send_command(OWNER, "/handoff", "stats", channel_id=CHANNEL)
    assert stats.status == 200, stats
    assert TRY_AGAIN in standin.ephemerals(OWNER)[-1].text

    home = standin.send_app_home_opened(CAROL)
    assert home.status == 503, home
    answers = (clicked, submitted, opening, replied, listed, stats, home)
    return [r.elapsed for r in answers], [replied, home]


def deliver_again(slack: SlackEnv, events: list[Response]) -> None:
    """Slack's retries of events refused while Redis was down: the first delivery that
    finds Redis back is acknowledged, and runs."""
    for event in events:
        wait_until(
            lambda e=event: slack.standin.resend_event(e).status == 200, timeout=30, interval=0.25
        )


def test_redis_killed_and_restarted_during_traffic_loses_no_acknowledged_decision(
    server: RedisServer, slack: SlackEnv, soak: bool
) -> None:
    restarts = SOAK_RESTARTS if soak else RESTARTS
    seed = int(os.environ.get("RELIABILITY_SEED") or random.randrange(1 << 30))
    print(f"\nRELIABILITY_SEED={seed}")
    started = time.monotonic()
    bot_processes = {p.pid: p for p in slack.processes}
    # Probes for the outage: a question to answer in its thread, an approval with a modal open.
    question = slack.posted(
        slack.handoffs.ask(
            run_id="probe-question", thread_id="t", question="Ship it?", reviewers=[CAROL]
        ).id
    )
    probe = slack.posted(slack.refund_approval(run_id="probe-approval", reviewers=[CAROL]))
    traffic = Traffic(slack, seed)
    traffic.start()
    outages: list[float] = []
    answer_times: list[float] = []
    for _ in range(restarts):
        time.sleep(TRAFFIC_SECONDS)
        standin_views = len(slack.standin.views(CAROL))
        slack.standin.click(CAROL, probe, ids.REJECT)
        slack.standin.wait_for(lambda n=standin_views: len(slack.standin.views(CAROL)) > n)
        server.kill()
        down = time.monotonic()
        took, refused_events = probe_every_surface_while_down(slack, probe, question)
        answer_times += took
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down)))
        server.start()
        outages.append(time.monotonic() - down)
        deliver_again(slack, refused_events)
    time.sleep(TRAFFIC_SECONDS)
    # Everything created gets decided (the clickers go on), every acknowledged decision by
    # the person the bot acknowledged, and resumed exactly once to completion, under its
    # stable idempotency key.
    created = check_clicks_kept(traffic, slack, slack.redis, decide_timeout=60)
    wait_until(
        lambda: all(slack.handoffs.get(i).notify.state is TaskState.COMPLETED for i in created),
        timeout=60,
    )
    assert health(slack) == 200
    # The thread reply refused during the (first) outage was taken when Slack sent it again.
    answered = slack.handoffs.get(message_handoff(question))
    assert answered.status is Status.ANSWERED, answered
    assert answered.resume_data is not None and answered.resume_data.decided_by == CAROL
    for handoff_id in created:
        assert [e.event for e in slack.handoffs.audit(handoff_id)].count("resumed") == 1

    # Serve and workers recovered by themselves: same processes, all alive.
    assert {p.pid for p in slack.processes} == set(bot_processes)
    assert all(p.poll() is None for p in slack.processes), slack.logs()[-5000:]
    print(
        f"{restarts} Redis restart(s) (down {', '.join(f'{o:.1f}' for o in outages)} s); "
        f"{len(created)} handoffs created, {len(traffic.acknowledged)} decisions acknowledged, "
        f"clicks {dict(traffic.clicks)}; answers while down took at most "
        f"{max(answer_times):.2f} s; run took {time.monotonic() - started:.1f} s"
    )


def test_a_worker_whose_redis_wait_runs_out_mid_job_carries_on_once_redis_is_back(
    server: RedisServer, tmp_path: Path
) -> None:
    # A 1-second wait, so that this outage outlasts it: RQ's loop ends on the error.
    workers = WorkerProcesses(server.url, tmp_path)
    worker = workers.start(extra_env={"HANDOFF_REDIS_WAIT_SECONDS": "1"})
    redis = Redis.from_url(server.url)
    agent = Handoffs(
        redis, tasks=dataclasses.replace(POLICY, resume_timeout_seconds=3, lease_grace_seconds=0.3)
    )
    try:
        handoff = agent.request_approval(
            run_id="run-1",
            thread_id="t",
            action="issue_refund",
            resume="tests.support.resume_targets:record_after_a_while",
        )
        agent.decide(handoff.id, "approved", by=ALICE)
        wait_until(lambda: redis.llen(resume_targets.STARTED), timeout=30, interval=0.005)
        server.kill()  # the resume target is still at work
        time.sleep(OUTAGE_SECONDS)
        server.start()

        wait_until(lambda: agent.get(handoff.id).resume.state is TaskState.COMPLETED, timeout=30)
        # Same process, still running. Whether RQ's own loop had to be started again
        # ("starting it again" in the log) depends on where the outage caught it.
        assert worker.poll() is None, workers.logs()[-3000:]
        completed = [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]
        assert [entry["handoff_id"] for entry in completed] == [handoff.id]
    finally:
        workers.stop_all()
