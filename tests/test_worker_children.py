"""`handoff worker` watches the processes it starts (its Slack worker and its dispatcher): one
that dies is started again, so that its queue (or the outbox) is not left unserved while the
worker process itself runs on; one that keeps dying stops the worker, for its supervisor to
see. Real `handoff worker` processes, each child killed with SIGKILL as the OOM killer would."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Set
from pathlib import Path

import pytest
from redis import Redis
from rq.serializers import JSONSerializer

from store.models import TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support.policies import task_policy
from tests.support.processes import Proc, descendants, wait_gone
from tests.support.slack_env import CHANNEL, SlackEnv, running_slack
from worker import runner
from worker.client import Handoffs
from worker.queues import make_queue
from worker.runner import CHILD_DEATHS_TOLERATED

SLACK_QUEUE = "handoff-slack"
STOP_SECONDS = 10


def _approval(handoffs: Handoffs, run_id: str) -> str:
    return handoffs.request_approval(
        run_id=run_id,
        thread_id="thread-1",
        action="issue_refund",
        args={"order_id": "A-1", "amount": 30},
        context="double charge",
        resume="tests.support.resume_targets:record",
    ).id


def _slack_worker(
    redis: Redis, worker: subprocess.Popen[bytes], *, not_: Set[int] = frozenset()
) -> Proc:
    """The living Slack worker of ``worker`` (once registered with RQ), other than ``not_``."""

    def registered() -> Proc | None:
        assert worker.poll() is None, "the handoff worker process ended"
        below = {p.pid: p for p in descendants(worker.pid)}
        for key in redis.smembers("rq:workers"):
            queues, pid = redis.hmget(key, "queues", "pid")
            if queues == SLACK_QUEUE.encode() and pid and int(pid) in set(below) - not_:
                return below[int(pid)]
        return None

    return wait_until(registered, timeout=15)  # type: ignore[return-value]


def _dispatcher_pid(logs: str, *, not_: Set[int] = frozenset()) -> int | None:
    pids = [int(p) for p in re.findall(r"dispatcher started \(pid (\d+)\)", logs)]
    fresh = [p for p in pids if p not in not_]
    return fresh[-1] if fresh else None


def _working(
    redis: Redis, workers: WorkerProcesses, *args: str
) -> tuple[subprocess.Popen[bytes], Proc]:
    worker = workers.start(args=args)
    slack_worker = _slack_worker(redis, worker)
    wait_until(lambda: _dispatcher_pid(workers.logs()))
    return worker, slack_worker


@pytest.mark.parametrize("mode", ["--no-fork", "--fork"])
def test_a_killed_slack_worker_is_started_again_and_delivers_the_next_handoff(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, mode: str
) -> None:
    worker, slack_worker = _working(redis, workers, mode)

    os.kill(slack_worker.pid, signal.SIGKILL)
    time.sleep(0.5)  # the handoff comes after the death, not in the same instant
    handoff_id = _approval(handoffs, "after-the-kill")

    # Within a few seconds: before, it stayed queued at attempt 0 for good.
    wait_until(lambda: handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED, timeout=5)
    assert f"handoff {handoff_id} needs a person" in workers.logs()  # the notifier's log
    assert worker.poll() is None
    assert re.search(
        rf"ERROR worker\.runner: Slack worker \(pid {slack_worker.pid}\) died unexpectedly "
        r"\(killed by SIGKILL\); started it again \(pid \d+\)",
        workers.logs(),
    ), workers.logs()
    _slack_worker(redis, worker, not_={slack_worker.pid})


def test_a_killed_dispatcher_is_started_again(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses
) -> None:
    worker, _ = _working(redis, workers)
    dispatcher = _dispatcher_pid(workers.logs())
    assert dispatcher is not None

    os.kill(dispatcher, signal.SIGKILL)
    wait_until(lambda: _dispatcher_pid(workers.logs(), not_={dispatcher}), timeout=5)
    handoff_id = _approval(handoffs, "after-the-kill")

    wait_until(lambda: handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED, timeout=5)
    assert worker.poll() is None
    assert f"ERROR worker.runner: dispatcher (pid {dispatcher}) died unexpectedly" in workers.logs()


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    """The Slack stand-in and one `handoff worker` (no `handoff serve`: nobody clicks)."""
    yield from running_slack(redis, redis_url, tmp_path, workers=1, serves=0)


def test_a_delivery_under_way_in_a_killed_slack_worker_is_posted_once_by_the_next_one(
    redis: Redis, slack: SlackEnv
) -> None:
    """The dead attempt's lease lapses (the delivery's timeout plus the lease grace), the
    dispatcher dispatches the delivery again (its RQ job, started, no longer counts as
    waiting) and the Slack worker started meanwhile posts it: no waiting for RQ's own
    clean-up of abandoned jobs (every 10 minutes), nor for the dispatch timeout (5)."""
    handoffs = Handoffs(
        redis, tasks=task_policy(attempts=3, timeout=3, backoff=(0.1, 0.5), lease_grace=0.5)
    )
    worker = slack.workers[0]
    slack_worker = _slack_worker(redis, worker)
    # The post is under way when the worker dies: Slack holds it, then drops it undone.
    slack.standin.fail_next("chat.postMessage", delay=6, reset_connection=True)

    handoff_id = _approval(handoffs, "in-flight")
    wait_until(lambda: handoffs.get(handoff_id).delivery.state is TaskState.RUNNING)
    os.kill(slack_worker.pid, signal.SIGKILL)
    killed_at = time.monotonic()

    message = slack.posted(handoff_id, timeout=30)
    # Far below RQ's clean-up of abandoned jobs (600 s); loose for a loaded machine.
    assert time.monotonic() - killed_at < 30
    delivery = handoffs.get(handoff_id).delivery
    assert delivery.state is TaskState.COMPLETED
    # A later attempt posted it (on a loaded machine the second may run out of its 3 s too).
    assert delivery.attempt >= 2
    assert [m.ts for m in slack.standin.messages(CHANNEL)] == [message.ts]
    assert worker.poll() is None


def test_a_child_that_keeps_dying_stops_the_worker_with_exit_status_1(
    redis: Redis, workers: WorkerProcesses
) -> None:
    worker, slack_worker = _working(redis, workers)
    killed: set[int] = set()
    for _ in range(CHILD_DEATHS_TOLERATED):
        os.kill(slack_worker.pid, signal.SIGKILL)
        killed.add(slack_worker.pid)
        if len(killed) < CHILD_DEATHS_TOLERATED:
            slack_worker = _slack_worker(redis, worker, not_=killed)
    started = descendants(worker.pid)

    assert worker.wait(timeout=30) == 1
    logs = workers.logs()
    assert (
        f"the Slack worker process died {CHILD_DEATHS_TOLERATED} times within 60 s "
        "(last: killed by SIGKILL); `handoff worker` stops so that its supervisor can start "
        "it again"
    ) in logs, logs
    assert "Error: the Slack worker process died" in logs  # the command's own last word
    assert wait_gone(started, 5) == [], logs


@pytest.mark.parametrize("stop", ["SIGTERM to the worker", "Ctrl-C (SIGINT to its group)"])
def test_a_worker_whose_slack_worker_was_started_again_still_stops_cleanly(
    redis: Redis, workers: WorkerProcesses, stop: str
) -> None:
    worker, slack_worker = _working(redis, workers)
    os.kill(slack_worker.pid, signal.SIGKILL)
    _slack_worker(redis, worker, not_={slack_worker.pid})
    started = descendants(worker.pid)
    assert len(started) >= 2, started
    restarts = workers.logs().count("died unexpectedly")

    if stop.startswith("SIGTERM"):
        worker.send_signal(signal.SIGTERM)
    else:
        os.killpg(worker.pid, signal.SIGINT)

    assert worker.wait(timeout=STOP_SECONDS) == 0, workers.logs()
    assert wait_gone(started, 2) == [], workers.logs()
    # The children the same Ctrl-C ended were not taken for dead ones and started again.
    assert workers.logs().count("died unexpectedly") == restarts, workers.logs()


def test_a_worker_ends_its_commands_thread_at_once_even_when_it_waits_to_be_subscribed(
    redis: Redis,
) -> None:
    """RQ ends each worker (a burst's at every queue, a stopping one) by stopping the thread
    that listens for its commands, and redis-py waits for that thread: once the unsubscribe
    has gone through, the thread waits to be subscribed again for as long as it polls.
    RQ's 60 s poll held a burst a minute between two queues; ours is a second."""
    worker = runner._SimpleWorker(
        [make_queue(redis, "q-pubsub")], connection=redis, serializer=JSONSerializer
    )
    worker.subscribe()
    worker.pubsub.unsubscribe()
    wait_until(lambda: not worker.pubsub.subscribed, timeout=5)
    time.sleep(0.2)  # into the thread's wait for a subscription

    started = time.monotonic()
    worker.unsubscribe()
    assert time.monotonic() - started < runner.PUBSUB_POLL_SECONDS + 1
    assert not worker.pubsub_thread.is_alive()
