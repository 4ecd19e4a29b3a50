"""/metrics of a real `handoff serve --workers 2` and `handoff worker --metrics-port`, scraped
after a scripted sequence through the Slack stand-in: two approvals created, their deliveries
(one answered 429 by Slack first), both approved by click, one resume that fails for good.
Every counter and histogram moved by what the sequence did (docs/monitoring.md)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from bot.blockkit import ids
from store.models import TaskState
from tests.support import resume_targets
from tests.support.policies import task_policy
from tests.support.processes import descendants
from tests.support.signed_http import FORM, SignedSender
from tests.support.slack_env import ALICE, SIGNING_SECRET, SlackEnv, free_port, wait_for
from worker.client import Handoffs

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

pytestmark = pytest.mark.xdist_group("heavy")


class TwoWorkerServe(SlackEnv):
    """A ``SlackEnv`` whose `handoff serve` runs two gunicorn worker processes."""

    def start_serve(self, port: int) -> subprocess.Popen[bytes]:
        self.ports.append(port)
        self._spawn("serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2")
        return self.processes[-1]


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[TwoWorkerServe]:
    env = TwoWorkerServe(redis, redis_url, tmp_path)
    env.start(workers=0)
    try:
        yield env
    finally:
        env.stop()


def scrape(port: int) -> Samples:
    """Every sample of ``http://127.0.0.1:port/metrics``, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How far one sample moved between two scrapes (0 for a sample in neither)."""
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def counting_files(pid: int) -> set[str]:
    """The multiprocess counter files a process has mapped (it counted into them)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {line.split()[-1] for line in maps.splitlines() if line.endswith(".db")}


def test_a_scripted_sequence_moves_every_counter_of_serve_and_worker(
    slack: TwoWorkerServe, redis: Redis
) -> None:
    worker_port = free_port()
    slack.start_worker("--metrics-port", str(worker_port))
    wait_for(lambda: _answers(worker_port), timeout=30)
    serve_before, worker_before = scrape(slack.port), scrape(worker_port)
    calls_before = len(slack.standin.calls())
    assert worker_before[("handoff_store_up", ())] == 1

    # An approval resumed by a target that records it, and one whose target fails (its
    # only attempt), so that its resume is given up. Slack answers the first post 429.
    agent = Handoffs(
        redis,
        tasks=task_policy(
            attempts=3, timeout=10, backoff=(0.1, 0.5), lease_grace=1, resume_attempts=1
        ),
    )
    redis.set(resume_targets.FAIL_FLAG, "1")
    slack.standin.fail_next("chat.postMessage", status=429, retry_after=1)
    ok_id = _approval(agent, "tests.support.resume_targets:record", "run-ok")
    failing_id = _approval(agent, "tests.support.resume_targets:fail_while_flagged", "run-fail")
    for handoff_id in (ok_id, failing_id):
        assert slack.standin.click(ALICE, slack.posted(handoff_id), ids.APPROVE).status == 200
    wait_for(lambda: agent.get(ok_id).resume.state is TaskState.COMPLETED)
    wait_for(lambda: agent.get(failing_id).resume.state is TaskState.FAILED)
    for handoff_id in (ok_id, failing_id):
        wait_for(lambda h=handoff_id: agent.get(h).notify.state is TaskState.COMPLETED)

    # Requests until each gunicorn worker has counted some (they share the listening socket).
    sent = _spread_over_both_serve_workers(slack)

    worker_after = scrape(worker_port)
    w = functools.partial(moved, worker_before, worker_after)
    # The store's figures: the same from any process.
    assert w("handoff_created_total", type="approval") == 2
    assert w("handoff_closed_total", type="approval", status="approved", via="slack") == 2
    assert w("handoff_decision_seconds_count", type="approval") == 2
    assert w("handoff_decision_seconds_bucket", type="approval", le="+Inf") == 2
    assert 0 < w("handoff_decision_seconds_sum", type="approval") < 60
    assert worker_after[("handoff_pending", (("type", "approval"),))] == 0
    assert w("handoff_tasks_given_up_total", kind="resume") == 1
    assert worker_after[("handoff_tasks_failed", (("kind", "resume"),))] == 1
    assert worker_after[("handoff_outbox_depth", ())] == 0
    assert worker_after[("handoff_outbox_oldest_due_seconds", ())] == 0
    # The worker's own processes: the Slack worker (deliveries, updates), the resume worker.
    assert w("handoff_task_attempts_total", kind="deliver", result="deferred") == 1
    assert w("handoff_task_attempts_total", kind="deliver", result="completed") == 2
    assert w("handoff_task_attempts_total", kind="resume", result="completed") == 1
    assert w("handoff_task_attempts_total", kind="resume", result="failed") == 1
    assert w("handoff_task_attempts_total", kind="notify", result="completed") == 2
    # The 429 cost no attempt: the delivery it put off completed on its second try.
    assert (
        w("handoff_task_attempt_number_bucket", kind="deliver", result="completed", le="1.0") == 1
    )
    assert w("handoff_task_attempt_number_sum", kind="deliver", result="completed") == 3
    limited = {"method": "chat.postMessage", "outcome": "rate_limited"}
    assert w("handoff_slack_api_calls_total", **limited) == 1
    assert w("handoff_slack_rate_limited_total", method="chat.postMessage") == 1
    assert w("handoff_slack_retry_wait_seconds_total", how="deferred") == 1

    # Any gunicorn worker answers /metrics with every worker's counts added up.
    for _ in range(4):
        serve_after = scrape(slack.port)
        # Every Web API call Slack saw was counted once, by whoever made it.
        for (method, outcome), count in _calls_seen_by_slack(slack, calls_before).items():
            labels = {"method": method, "outcome": outcome}
            counted = w("handoff_slack_api_calls_total", **labels) + moved(
                serve_before, serve_after, "handoff_slack_api_calls_total", **labels
            )
            assert counted == count, (method, outcome)
        s = functools.partial(moved, serve_before, serve_after)
        assert s("handoff_slack_requests_total", surface="block_actions", outcome="ok") == 2
        assert s("handoff_slack_requests_total", surface="ssl_check", outcome="ok") == sent
        assert s("handoff_slack_request_seconds_count", surface="block_actions") == 2
        assert s("handoff_slack_request_seconds_bucket", surface="block_actions", le="3.0") == 2
        assert s("handoff_created_total", type="approval") == 2  # store-wide: shown here too

    # The serve process made the directory its workers counted in, and removes it.
    directories = {os.path.dirname(f) for f in _serve_files(slack)}
    assert len(directories) == 1
    serve = slack.processes[0]
    serve.send_signal(signal.SIGTERM)
    serve.wait(timeout=20)
    assert not os.path.exists(directories.pop())


def _calls_seen_by_slack(slack: TwoWorkerServe, since: int) -> Counter[tuple[str, str]]:
    """The stand-in's Web API calls from the ``since``-th on, by method and how each ended,
    as the bot counts them."""
    seen: Counter[tuple[str, str]] = Counter()
    for call in slack.standin.calls()[since:]:
        if call.method == "response_url":
            continue
        if call.http_status == 429:
            outcome = "rate_limited"
        elif call.http_status == 0:
            outcome = "network"
        elif call.http_status >= 500:
            outcome = "server_error"
        else:
            outcome = "ok" if call.response.get("ok") else "refused"
        seen[call.method, outcome] += 1
    return seen


def _answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def _approval(agent: Handoffs, target: str, run_id: str) -> str:
    return agent.request_approval(
        run_id=run_id,
        thread_id="t",
        action="issue_refund",
        args={"order_id": "A-1", "amount": 30},
        context="Charged twice.",
        reviewers=[ALICE],
        resume=target,
    ).id


def _serve_files(slack: TwoWorkerServe) -> list[str]:
    workers = descendants(slack.processes[0].pid)
    return [f for proc in workers for f in counting_files(proc.pid)]


def _spread_over_both_serve_workers(slack: TwoWorkerServe) -> int:
    """Send Slack's certificate checks (signed, answered 200, nothing run) in parallel until
    both gunicorn workers have counted a request; return how many were sent."""
    sender = SignedSender(SIGNING_SECRET)
    url = slack.bot_urls[0]
    sent = 0
    try:
        for _ in range(20):
            with ThreadPoolExecutor(8) as pool:
                answers = list(
                    pool.map(lambda _: sender.post(url, b"ssl_check=1", FORM), range(16))
                )
            assert {a.status for a in answers} == {200}
            sent += len(answers)
            sender.close()
            workers = descendants(slack.processes[0].pid)
            if len(workers) == 2 and all(counting_files(p.pid) for p in workers):
                return sent
    finally:
        sender.close()
    raise AssertionError("the requests never reached both gunicorn workers")
