"""`handoff worker` stops within seconds when asked, even with its Redis gone: it rides out an
outage while working, not while stopping."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import RedisError

from tests.conftest import ROOT
from tests.support.processes import descendants, wait_gone
from tests.support.slack_env import free_port

STOP_SECONDS = 10


@pytest.fixture
def redis_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A redis-server of this test's own, to kill: (process, URL)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            Redis.from_url(url).ping()
            break
        except RedisError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield server, url
    server.kill()
    server.wait()


def _start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "worker", "--name", "stop-test"],
            cwd=ROOT,
            env={**env, "REDIS_URL": url, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_working(redis: Redis, worker: subprocess.Popen[bytes], log: Path) -> None:
    """Until both RQ workers of the pair are registered."""
    deadline = time.monotonic() + 15
    while redis.scard("rq:workers") < 2:
        assert worker.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


@contextmanager
def _working_worker(url: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A `handoff worker` on ``url``, once working; afterwards it is killed, with its
    process group and whatever it started that is still its child."""
    worker = _start_worker(url, log)
    try:
        _wait_working(Redis.from_url(url), worker, log)
        yield worker
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        with suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        for proc in descendants(worker.pid):
            proc.kill()


def test_a_worker_whose_redis_is_gone_stops_promptly_on_sigterm(
    redis_server: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    server, url = redis_server
    with _working_worker(url, tmp_path / "worker.log") as worker:
        # The dispatcher, the Slack worker and the resume process must go too.
        started = descendants(worker.pid)
        assert len(started) >= 2, started

        server.kill()
        server.wait()
        time.sleep(0.5)  # the worker notices: its blocking read fails and it starts retrying
        stopping = time.monotonic()
        worker.send_signal(signal.SIGTERM)

        worker.wait(timeout=STOP_SECONDS)
        assert time.monotonic() - stopping < STOP_SECONDS
        assert wait_gone(started, 2) == []


def test_a_dispatcher_whose_worker_was_killed_stops_at_once_even_with_redis_gone(
    redis_server: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    server, url = redis_server
    log = tmp_path / "worker.log"
    with _working_worker(url, log) as worker:
        found = re.search(r"dispatcher started \(pid (\d+)\)", log.read_text())
        assert found, log.read_text()
        (dispatcher,) = [p for p in descendants(worker.pid) if p.pid == int(found[1])]
        server.kill()
        server.wait()
        # Its next pass (one a second) now waits for Redis, which takes a minute to give up.
        time.sleep(2)

        # A worker killed outright runs no cleanup: only the kernel's parent-death signal
        # can end the dispatcher in the middle of that pass.
        worker.kill()
        worker.wait()

        assert wait_gone([dispatcher], 3) == [], "the dispatcher outlived its worker"


def test_a_worker_killed_outright_leaves_no_process_behind(
    redis_server: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    """SIGKILL runs no cleanup: what it started must end by itself (no RQ scheduler, whose
    process outlived a killed worker, is run)."""
    _, url = redis_server
    log = tmp_path / "worker.log"
    with _working_worker(url, log) as worker:
        started = descendants(worker.pid)
        assert len(started) >= 2, started
        worker.kill()
        worker.wait()

        assert wait_gone(started, 5) == [], log.read_text()
