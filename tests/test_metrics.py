"""Metrics: the store's counters kept by its scripts (``store.metrics``), their collector and
the per-process counters (``worker.metrics``), the Slack side's (``bot.metrics``: requests
in ``bot.http.wsgi``, Web API calls in ``bot.slack_client``). The processes and their
multiprocess mode are tested end to end in tests/test_metrics_e2e.py."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis
from slack_sdk.errors import SlackApiError

from bot import metrics as bot_metrics
from bot.config import Settings
from bot.serve import build_wsgi_app
from bot.slack_client import make_web_client, request_client, start_answer_clock
from bot.standin import SlackStandIn
from store.exceptions import ConfigurationError
from store.keys import KeySpace
from store.metrics import FigureReader, StoreFigures, via_class
from store.models import TaskKind
from tests.support.slack_env import free_port, wait_for
from worker import metrics
from worker.client import Handoffs

SECRET = "metrics-test-signing-secret"
TOKEN = "xoxb-metrics-test"


def sample(name: str, **labels: str) -> float:
    """A sample of this process's default registry (0 when it was never counted)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- the store's counters ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("via", "kind"),
    [
        ("slack_button", "slack"),
        ("slack_modal", "slack"),
        ("slack_thread", "slack"),
        ("slash_command", "slack"),
        ("api:billing-agent", "api"),
        ("api", "python"),
        ("cli", "cli"),
        ("admin", "admin"),
        ("policy", "policy"),
        ("expiry", "expiry"),
        ("delivery", "delivery"),
        ("U0ALICE", "other"),
    ],
)
def test_a_decisions_via_is_counted_in_a_small_fixed_class(via: str, kind: str) -> None:
    assert via_class(via) == kind


def test_the_store_counts_creations_closings_and_decision_times_by_type(
    handoffs: Handoffs, redis: Redis
) -> None:
    store = handoffs.store
    approval = _approval(handoffs)
    question = handoffs.ask(run_id="r", thread_id="t", question="Which region?")
    escalation = handoffs.escalate(run_id="r", thread_id="t", summary="stuck")
    _approval(handoffs, expires_in=timedelta(milliseconds=1))
    store.decide(approval.id, "approved", decided_by="U0ALICE", via="slack_button")
    store.decide(question.id, "answered", decided_by="U0BOB", answer="eu", via="api:agent-7")
    store.cancel(escalation.id, cancelled_by="U0ADMIN", via="cli")
    time.sleep(0.01)
    assert store.expire_due()  # its deadline passed: the dispatcher's sweep expires it

    figures = FigureReader(redis, store.keys).read()
    assert figures.created == {"approval": 2, "question": 1, "escalation": 1}
    assert figures.closed == {
        ("approval", "approved", "slack"): 1,
        ("question", "answered", "api"): 1,
        ("escalation", "cancelled", "cli"): 1,
        ("approval", "expired", "expiry"): 1,
    }
    # Only decisions are timed: not the cancel, not the expiry.
    assert set(figures.decision_times) == {"approval", "question"}
    approval_times = figures.decision_times["approval"]
    assert approval_times.count == 1 and 0 <= approval_times.sum_seconds < 5
    assert approval_times.cumulative()[0] == ("1", 1)  # decided within a second
    assert approval_times.cumulative()[-1] == ("+Inf", 1)
    assert figures.pending == {"approval": 0, "question": 0, "correction": 0, "escalation": 0}
    assert figures.outbox_due > 0  # the deliveries no dispatcher took


def test_a_task_that_uses_up_its_attempts_is_counted_given_up_and_failed(
    handoffs: Handoffs, redis: Redis
) -> None:
    store = handoffs.store
    handoff = _approval(handoffs)
    for attempt in range(1, 4):  # fast_tasks: 3 attempts
        start = store.begin_task(handoff.id, TaskKind.DELIVER, run_token=f"t{attempt}")
        store.finish_task(handoff.id, TaskKind.DELIVER, attempt=start.attempt, error="down")
        redis.zadd(store.keys.outbox, {f"deliver:{handoff.id}": 0})  # due again at once

    figures = FigureReader(redis, store.keys).read()
    assert figures.given_up == {"deliver": 1}
    assert figures.failed == {"deliver": 1} and figures.failed_total == 1
    # A delivery that fails for good closes its handoff undeliverable.
    assert figures.closed == {("approval", "undeliverable", "delivery"): 1}


def test_the_oldest_due_outbox_entry_is_aged_by_the_servers_clock(
    handoffs: Handoffs, redis: Redis
) -> None:
    handoff = _approval(handoffs)
    keys = handoffs.store.keys
    now_ms = int(redis.time()[0]) * 1000
    redis.zadd(keys.outbox, {f"deliver:{handoff.id}": now_ms - 90_000, "resume:x": now_ms + 9e6})

    figures = FigureReader(redis, keys).read()
    assert figures.outbox == 2 and figures.outbox_due == 1
    assert 90 <= figures.oldest_due_seconds < 95


def test_the_store_collector_exposes_its_figures_and_says_so_when_redis_is_down(
    handoffs: Handoffs, redis: Redis
) -> None:
    _approval(handoffs)
    registry = metrics.exposition_registry(FigureReader(redis, handoffs.store.keys), process="t")
    shown = _samples(metrics.exposition(registry))
    assert shown[("handoff_store_up", ())] == 1
    assert shown[("handoff_created_total", (("type", "approval"),))] == 1
    assert shown[("handoff_pending", (("type", "approval"),))] == 1
    assert ("handoff_outbox_oldest_due_seconds", ()) in shown

    errors = sample("handoff_redis_errors_total", process="t")
    dead = Redis(port=1, socket_connect_timeout=0.5)
    registry = metrics.exposition_registry(FigureReader(dead, KeySpace()), process="t")
    shown = _samples(metrics.exposition(registry))
    assert shown[("handoff_store_up", ())] == 0
    assert ("handoff_pending", (("type", "approval"),)) not in shown
    assert sample("handoff_redis_errors_total", process="t") == errors + 1


class CountingReader(FigureReader):
    """A ``FigureReader`` that counts its reads of Redis."""

    reads = 0

    def read(self) -> StoreFigures:
        self.reads += 1
        return super().read()


def test_a_flood_of_scrapes_reads_the_store_once_a_second(handoffs: Handoffs, redis: Redis) -> None:
    # /metrics answers anyone, and each read runs a script over up to 10,000 failed tasks
    # (4.6 ms of Redis's time with that many): scraped in a loop, it held Redis for others.
    _approval(handoffs)
    reader = CountingReader(redis, handoffs.store.keys)
    registry = metrics.exposition_registry(reader, process="t")
    with ThreadPoolExecutor(8) as pool:
        pages = list(pool.map(lambda _: metrics.exposition(registry), range(40)))
    assert reader.reads == 1
    assert all(_samples(page)[("handoff_pending", (("type", "approval"),))] == 1 for page in pages)

    _approval(handoffs)
    time.sleep(metrics.STORE_FIGURES_MAX_AGE_SECONDS)
    shown = _samples(metrics.exposition(registry))
    assert reader.reads == 2
    assert shown[("handoff_pending", (("type", "approval"),))] == 2


def test_a_multiprocess_directory_set_but_missing_is_made_and_a_bad_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # prometheus_client refuses a PROMETHEUS_MULTIPROC_DIR that does not exist with a
    # ValueError: `handoff api` stopped at start with a traceback.
    missing = tmp_path / "not" / "yet"
    monkeypatch.setenv(metrics.MULTIPROCESS_SETTING, str(missing))
    registry = metrics.exposition_registry(None, process="t")
    assert missing.is_dir()
    metrics.exposition(registry)

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(metrics.MULTIPROCESS_SETTING, str(blocked / "metrics"))
    with pytest.raises(ConfigurationError, match=r"PROMETHEUS_MULTIPROC_DIR is .*a-file"):
        metrics.exposition_registry(None, process="t")


COUNTS_AND_WAITS = """
import sys
from worker import metrics
with metrics.MultiprocessDirectory() as directory:
    metrics.count_task("resume", "completed", 1)
    print(directory.path, flush=True)
    sys.stdin.readline()
"""
SHOWS = """
from worker import metrics
with metrics.MultiprocessDirectory():
    print(metrics.exposition(metrics.exposition_registry(None, process="t")).decode())
"""


def test_commands_sharing_a_multiprocess_directory_never_show_each_others_counts(
    tmp_path: Path,
) -> None:
    # prometheus_client adds up every file of its directory: `handoff worker` and `handoff
    # api` (or serve) given one PROMETHEUS_MULTIPROC_DIR each showed the other's counts,
    # counted twice when summed across targets as docs/monitoring.md says to.
    shared = tmp_path / "common"
    environ = {**os.environ, metrics.MULTIPROCESS_SETTING: str(shared)}
    counting = subprocess.Popen(
        [sys.executable, "-c", COUNTS_AND_WAITS],
        env=environ,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert counting.stdout is not None and counting.stdin is not None
        own = Path(counting.stdout.readline().strip())
        shown = subprocess.run(
            [sys.executable, "-c", SHOWS], env=environ, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert "handoff_task_attempts_total{" not in shown.stdout
        assert own.parent == shared and any(own.glob("counter_*.db"))
        counting.stdin.write("\n")
        counting.stdin.flush()
        assert counting.wait(timeout=30) == 0
    finally:
        counting.kill()
        counting.wait()
    assert list(shared.iterdir()) == []  # each removed its own when it stopped


COUNTS_INTO_FILES = """
import resource, signal, sys
from worker import metrics
if sys.argv[1] != "unlimited":
    # Files over 16 KiB refused (EFBIG): a disk that is full as far as this process goes.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.RLIM_INFINITY))
metrics.use_multiprocess_mode()
metrics.count_task("resume", "completed", 1)
metrics.count_redis_error("serve")
print(metrics.exposition(metrics.exposition_registry(None, process="t")).decode())
"""


def test_the_files_of_counts_are_allocated_so_a_full_disk_cannot_kill_a_process(
    tmp_path: Path,
) -> None:
    # prometheus_client made them sparse and wrote through a memory map: with the disk full,
    # the first count was a SIGBUS killing the process (a gunicorn worker on its first
    # request, after every restart). Allocated when made, a full disk is an OSError the
    # counting logs, and the process goes on.
    environ = {**os.environ, metrics.MULTIPROCESS_SETTING: str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", COUNTS_INTO_FILES, "unlimited"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert 'handoff_task_attempts_total{kind="resume",result="completed"} 1.0' in done.stdout
    files = sorted(tmp_path.glob("*.db"))
    assert files
    for file in files:
        assert file.stat().st_blocks * 512 >= file.stat().st_size, f"{file.name} is sparse"

    full = tmp_path / "full"
    full.mkdir()
    environ[metrics.MULTIPROCESS_SETTING] = str(full)
    done = subprocess.run(
        [sys.executable, "-c", COUNTS_INTO_FILES, "limited"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "counting count_task failed" in done.stderr
    assert "handoff_task_attempts_total{" not in done.stdout
    assert list(full.iterdir()) == []  # nothing half made for a scrape to choke on


COUNTS_IN_PLACE = """
from worker import metrics
metrics.use_multiprocess_mode()  # as a process of `handoff serve` on the same host
metrics.count_task("resume", "completed", 1)
"""


@pytest.mark.parametrize("where", ["common", "missing"])
def test_handoff_api_shows_its_own_counts_whatever_the_multiprocess_directory(
    tmp_path: Path, redis_url: str, where: str
) -> None:
    # `handoff api` is one process, but a PROMETHEUS_MULTIPROC_DIR set on its host (for
    # serve) made it count into that directory and show every file of it: another
    # command's counts (shared), or it stopped at start with a traceback (missing).
    directory = tmp_path / "multiproc"
    if where == "common":
        directory.mkdir()
        environ = {**os.environ, metrics.MULTIPROCESS_SETTING: str(directory)}
        subprocess.run([sys.executable, "-c", COUNTS_IN_PLACE], env=environ, check=True)
    before = sorted(directory.glob("*"))
    port = free_port()
    environ = {**os.environ, "REDIS_URL": redis_url, metrics.MULTIPROCESS_SETTING: str(directory)}
    api = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "api", "--port", str(port)],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        page = wait_for(lambda: _page(port) or api.poll() is not None, timeout=60)
        assert isinstance(page, str), api.communicate(timeout=10)[1]
    finally:
        api.terminate()
        api.wait(timeout=30)
    assert "handoff_store_up 1.0" in page
    assert "handoff_task_attempts_total{" not in page
    assert sorted(directory.glob("*")) == before  # it counted in its own memory


def _page(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


# -- counting never fails what it counts --------------------------------------------------


def test_a_failure_inside_a_counter_is_logged_never_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(metrics.TASK_ATTEMPTS, "labels", broken)
    with caplog.at_level(logging.WARNING):
        metrics.count_task("deliver", "completed", 1)  # no exception
    assert "counting count_task failed" in caplog.text


def test_with_metrics_off_nothing_is_counted_and_metrics_is_not_served(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "_enabled", True)  # restored after the test
    app = build_wsgi_app(_settings(redis_url, metrics=False))
    before = sample("handoff_task_attempts_total", kind="resume", result="completed")
    metrics.count_task("resume", "completed", 1)

    assert sample("handoff_task_attempts_total", kind="resume", result="completed") == before
    assert _call(app, "GET", "/metrics")[0] == "404 Not Found"


# -- requests from Slack ------------------------------------------------------------------


def test_serve_counts_refused_requests_and_serves_metrics(redis_url: str, redis: Redis) -> None:
    app = build_wsgi_app(_settings(redis_url))
    rejected = sample("handoff_slack_requests_total", surface="unknown", outcome="rejected")
    timed = sample("handoff_slack_request_seconds_count", surface="unknown")

    status, _, _ = _call(app, "POST", "/slack/events", b'{"type": "event_callback"}')
    assert status == "401 Unauthorized"
    status, headers, body = _call(app, "GET", "/metrics")

    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain")
    shown = _samples(body)
    key = (("outcome", "rejected"), ("surface", "unknown"))
    assert shown[("handoff_slack_requests_total", key)] == rejected + 1
    assert shown[("handoff_slack_request_seconds_count", (("surface", "unknown"),))] == timed + 1
    assert shown[("handoff_store_up", ())] == 1


@pytest.mark.parametrize(
    ("body", "surface"),
    [
        ({"type": "block_actions"}, "block_actions"),
        ({"type": "view_submission"}, "view_submission"),
        ({"type": "block_suggestion"}, "block_suggestion"),
        ({"type": "event_callback", "event": {}}, "event"),
        ({"command": "/handoff", "text": "list"}, "command"),
        ({"ssl_check": "1"}, "ssl_check"),
        ({"type": "something_new"}, "other"),
    ],
)
def test_a_request_is_counted_by_its_surface_never_by_anything_of_its_own(
    body: dict[str, Any], surface: str
) -> None:
    assert bot_metrics.surface_of(body) == surface


# -- calls to Slack -----------------------------------------------------------------------


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    slack = SlackStandIn(signing_secret=SECRET, bot_token=TOKEN)
    slack.start()
    try:
        yield slack
    finally:
        slack.stop()


def test_web_api_calls_are_counted_by_method_and_outcome_with_retries_and_waits(
    standin: SlackStandIn,
) -> None:
    settings = Settings(slack_bot_token=TOKEN, slack_api_url=standin.api_url)
    jobs_client = make_web_client(settings)
    before = {
        "ok": sample("handoff_slack_api_calls_total", method="auth.test", outcome="ok"),
        "refused": sample("handoff_slack_api_calls_total", method="auth.test", outcome="refused"),
        "limited": sample(
            "handoff_slack_api_calls_total", method="auth.test", outcome="rate_limited"
        ),
        "429s": sample("handoff_slack_rate_limited_total", method="auth.test"),
        "retries": sample("handoff_slack_retries_total", method="auth.test", reason="rate_limited"),
        "slept": sample("handoff_slack_retry_wait_seconds_total", how="slept"),
    }

    # A job's client sleeps out a 429's Retry-After and tries again: one call, ok.
    standin.fail_next("auth.test", status=429, retry_after=0)
    jobs_client.auth_test()
    # The client of a request repeats nothing: the 429 ends the call. A request starts its
    # own answer clock (one left in this thread by an earlier test could be spent).
    request_time_client = request_client(settings)
    start_answer_clock(3.0)
    standin.fail_next("auth.test", status=429, retry_after=0)
    with pytest.raises(SlackApiError):
        request_time_client.auth_test()
    standin.fail_next("auth.test", error="invalid_auth")
    with pytest.raises(SlackApiError):
        jobs_client.auth_test()

    ok = sample("handoff_slack_api_calls_total", method="auth.test", outcome="ok")
    assert ok == before["ok"] + 1
    refused = sample("handoff_slack_api_calls_total", method="auth.test", outcome="refused")
    assert refused == before["refused"] + 1
    limited = sample("handoff_slack_api_calls_total", method="auth.test", outcome="rate_limited")
    assert limited == before["limited"] + 1
    # Both 429s, the retried one and the one that ended its call.
    assert sample("handoff_slack_rate_limited_total", method="auth.test") == before["429s"] + 2
    retries = sample("handoff_slack_retries_total", method="auth.test", reason="rate_limited")
    assert retries == before["retries"] + 1
    assert sample("handoff_slack_retry_wait_seconds_total", how="slept") > before["slept"]


# -- helpers ------------------------------------------------------------------------------


def _approval(handoffs: Handoffs, **options: Any) -> Any:
    return handoffs.request_approval(
        run_id="r",
        thread_id="t",
        action="issue_refund",
        args={"order_id": "A-1"},
        context="Charged twice.",
        reviewers=["U0ALICE"],
        **options,
    )


def _settings(redis_url: str, **options: Any) -> Settings:
    return Settings(
        slack_bot_token=TOKEN,
        slack_signing_secret=SECRET,
        redis_url=redis_url,
        slack_api_url="http://127.0.0.1:9/api/",
        **options,
    )


def _call(app: Any, method: str, path: str, body: bytes = b"") -> tuple[str, dict[str, str], str]:
    answered: list[tuple[str, dict[str, str]]] = []
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    raw = b"".join(app(environ, lambda status, headers: answered.append((status, dict(headers)))))
    return answered[0][0], answered[0][1], raw.decode()


def _samples(text: str | bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    if isinstance(text, bytes):
        text = text.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
