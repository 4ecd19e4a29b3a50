"""The ``handoff`` command answers bad input, bad settings and a refusing Redis with one
line and a non-zero exit, never a traceback (real processes against the test Redis)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from redis import Redis

from tests.conftest import ROOT
from worker.client import Handoffs


def _handoff(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    return line


@pytest.mark.parametrize(
    ("url_tail", "problem"),
    [("/99", "DB index is out of range"), ("?client_name=a%20b", "Client names cannot")],
)
def test_redis_refusing_the_connection_is_one_line(
    redis_url: str, url_tail: str, problem: str
) -> None:
    base = redis_url.rsplit("/", 1)[0]
    line = _one_line_error(_handoff("list", REDIS_URL=base + url_tail))
    assert f"Redis refused: {problem}" in line and "check REDIS_URL" in line


@pytest.mark.parametrize(
    ("since", "problem"),
    [("999999w", "before the year 1"), ("last tuesday", "neither an ISO date")],
)
def test_a_bad_since_is_a_usage_error(redis_url: str, since: str, problem: str) -> None:
    result = _handoff("audit", "export", "--since", since, REDIS_URL=redis_url)
    # click's usage error: the usage line, the help hint, then the one-line error.
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Invalid value for --since: ") and problem in last


def test_a_since_before_1970_exports_from_the_start(redis: Redis, redis_url: str) -> None:
    handoff = Handoffs(redis).ask(run_id="run-old", thread_id="t", question="Which region?")

    result = _handoff("audit", "export", "--since", "1969-12-31", REDIS_URL=redis_url)

    assert result.returncode == 0, result.stderr
    assert handoff.id in result.stdout


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_refused(redis_url: str, limit: str) -> None:
    result = _handoff("list", "--limit", limit, REDIS_URL=redis_url)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--limit" in result.stderr
