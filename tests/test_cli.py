"""The `handoff` command line, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from store.models import TaskKind
from tests.conftest import ROOT
from tests.support.dev import dev_command, dev_env
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
    result = subprocess.run(
        dev_command(tmp_path / "data", free_port(), free_port()),
        env=dev_env(),
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
    # The terminal shows the decision as a person reads it, not as Slack tokens.
    assert "✅ Approved by @you" in result.stdout
    assert "<@U0DEVREVIEWER>" not in result.stdout
    # The embedded server keeps its data between runs of `handoff dev`.
    assert (tmp_path / "data" / "redis" / "appendonlydir").exists()
    # A second run on the same data (a new stand-in, the old Redis) answers again: no event
    # id of the first run is taken for a retry, no channel for one the bot is still in.
    again = subprocess.run(
        dev_command(tmp_path / "data", free_port(), free_port()),
        env=dev_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed: question answered by U0DEVREVIEWER, answer: Dana Lee" in again.stdout


def test_show_decide_and_list_commands(redis: Redis, redis_url: str) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.ask(run_id="run-cli", thread_id="t", question="Which region?")
    env = {"REDIS_URL": redis_url}

    listed = _handoff("list", env=env)
    assert handoff.id in listed.stdout

    decided = _handoff("decide", handoff.id, "answered", "--by", "U_OPS", "--answer", "eu", env=env)
    assert decided.returncode == 0, decided.stderr
    assert handoffs.get(handoff.id).resume_data.answer == "eu"

    shown = json.loads(_handoff("show", handoff.id, "--json", env=env).stdout)
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


def test_list_says_so_when_nothing_is_pending(redis: Redis, redis_url: str) -> None:
    env = {"REDIS_URL": redis_url}

    listed = _handoff("list", env=env)
    filtered = _handoff("list", "--channel", "C-EMPTY", env=env)

    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no pending handoffs\n"
    assert filtered.returncode == 0, filtered.stderr
    assert filtered.stdout == "no pending handoffs with --channel C-EMPTY\n"


def test_list_filters_by_channel_run_reviewer_or_type(redis: Redis, redis_url: str) -> None:
    handoffs = Handoffs(redis)
    asked = handoffs.ask(run_id="run-a", thread_id="t", question="?", channel="C01")
    approval = handoffs.request_approval(
        run_id="run-b", thread_id="t", action="deploy", channel="C02", reviewers=["U07"]
    )
    env = {"REDIS_URL": redis_url}

    def ids(*args: str) -> list[str]:
        result = _handoff("list", *args, env=env)
        assert result.returncode == 0, result.stderr
        return [line.split()[0] for line in result.stdout.splitlines()]

    assert ids() == [asked.id, approval.id]
    assert ids("--channel", "C01") == [asked.id]
    assert ids("--run", "run-b") == [approval.id]
    assert ids("--reviewer", "U07") == [approval.id]
    assert ids("--type", "question") == [asked.id]
    assert _handoff("list", "--run", "run-z", env=env).stdout == (
        "no pending handoffs with --run run-z\n"
    )
    both = _handoff("list", "--channel", "C01", "--run", "run-a", env=env)
    assert both.returncode == 2
    assert "filter by one of --channel, --run, --reviewer, --type, --failed at a time" in (
        both.stderr
    )
    assert "Traceback" not in both.stderr


def test_list_failed_shows_undeliverable_handoffs_with_slacks_error(
    redis: Redis, redis_url: str
) -> None:
    handoffs = Handoffs(redis)
    env = {"REDIS_URL": redis_url}
    assert _handoff("list", "--failed", env=env).stdout == "nothing has failed\n"
    refused = [handoffs.ask(run_id=f"run-{n}", thread_id="t", question="?") for n in range(3)]
    handoffs.ask(run_id="run-posted", thread_id="t", question="?")
    for handoff in refused:
        start = handoffs.store.begin_task(handoff.id, TaskKind.DELIVER, run_token="job")
        handoffs.store.finish_task(
            handoff.id,
            TaskKind.DELIVER,
            attempt=start.attempt,
            error="is_archived",
            permanent=True,
        )

    first = _handoff("list", "--failed", "--limit", "2", env=env)
    lines = first.stdout.splitlines()
    assert first.returncode == 0, first.stderr
    assert [line.split()[:2] for line in lines[:2]] == [
        [refused[0].id, "undeliverable"],
        [refused[1].id, "undeliverable"],
    ]
    assert "delivery failed (is_archived)" in lines[0]
    assert lines[2] == f"more: --failed --cursor {refused[1].id}"
    rest = _handoff("list", "--failed", "--cursor", refused[1].id, env=env).stdout.splitlines()
    assert [line.split()[0] for line in rest] == [refused[2].id]


def test_a_bad_redis_url_is_one_line_saying_what_a_valid_one_looks_like() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("handoff")), "list"],
        env={**os.environ, "REDIS_URL": "notaurl"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: bad setting REDIS_URL: not a Redis URL; use redis://")
    assert "rediss://" in line
    assert "unix://" in line


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        (
            ["list"],
            {"HANDOFF_RESUME_MAX_ATTEMPTS": "0", "HANDOFF_SLASH_COMMAND": "oops"},
            "Error: bad settings HANDOFF_RESUME_MAX_ATTEMPTS: ",
        ),
        (["worker"], {"REDIS_URL": "redis://example:port"}, "Error: bad setting REDIS_URL: "),
        (["dispatcher"], {"REDIS_URL": ""}, "Error: REDIS_URL is not set; point it at"),
        (
            ["serve"],
            {"SLACK_BOT_TOKEN": "", "SLACK_APP_TOKEN": ""},
            "Error: SLACK_BOT_TOKEN is not set; set it to the app's bot token",
        ),
        (
            ["serve"],
            {"SLACK_BOT_TOKEN": "xoxb-cli-test", "SLACK_SIGNING_SECRET": "", "SLACK_APP_TOKEN": ""},
            "Error: SLACK_SIGNING_SECRET is not set; set it",
        ),
    ],
)
def test_every_settings_error_is_one_line_and_exit_status_2(
    redis_url: str, command: list[str], env: dict[str, str], expected: str
) -> None:
    result = _handoff(*command, env={"REDIS_URL": redis_url, **env}, timeout=60)

    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(expected)


def test_an_unreachable_redis_is_one_line() -> None:
    result = _handoff("list", env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})

    assert result.returncode == 5  # ExitCode.UNAVAILABLE
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: cannot reach Redis (")
    assert line.endswith("check that it is running and that REDIS_URL points at it")
