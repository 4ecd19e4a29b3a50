"""The `handoff` command line, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from redis import Redis

from tests.conftest import ROOT
from tests.support.slack_env import free_port
from worker.client import Handoffs


def _handoff(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_dev_runs_the_demo_loop_on_an_embedded_redis(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    ports = [str(free_port()), str(free_port())]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "dev",
            "--auto",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            ports[0],
            "--standin-port",
            ports[1],
        ],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Embedded Redis at" in result.stdout
    # The demo's decisions went through the bot as signed Slack requests, and resumed the run.
    assert "[Approve] [Reject] [Edit]" in result.stdout
    assert "resumed: approval approved by U0DEVREVIEWER" in result.stdout
    assert "resumed: question answered by U0DEVREVIEWER, answer: Dana Lee" in result.stdout
    assert "*Approved* by <@U0DEVREVIEWER>" in result.stdout
    # The embedded server keeps its data between runs of `handoff dev`.
    assert (tmp_path / "data" / "redis" / "appendonlydir").exists()


def test_show_decide_and_list_commands(redis: Redis, redis_url: str) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.ask(run_id="run-cli", thread_id="t", question="Which region?")
    env = {"REDIS_URL": redis_url}

    listed = _handoff("list", env=env)
    assert handoff.id in listed.stdout

    decided = _handoff("decide", handoff.id, "answered", "--by", "U_OPS", "--answer", "eu", env=env)
    assert decided.returncode == 0, decided.stderr
    assert handoffs.get(handoff.id).resume_data.answer == "eu"

    shown = json.loads(_handoff("show", handoff.id, env=env).stdout)
    assert shown["status"] == "answered"
    assert [event["event"] for event in shown["audit"]] == ["created", "decided"]

    again = _handoff("decide", handoff.id, "rejected", "--by", "U_OTHER", env=env)
    assert again.returncode != 0
    assert "Error: handoff" in again.stderr
    assert "already answered by U_OPS" in again.stderr
    assert "Traceback" not in again.stderr


def test_worker_without_redis_url_explains_what_to_do() -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "worker"],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "REDIS_URL is not set" in result.stderr
