"""`handoff dev` for the agent beside it: it writes `<data-dir>/env` (where this run's Redis
is) and removes it when it stops, it never runs on a REDIS_URL it was not told to use, it
says what it waits for instead of staring back silently, and NO_COLOR leaves its output
unstyled."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import click
import pytest
from redis import Redis

from bot.config import Settings
from bot.dev import run
from bot.dev.run import RedisUrlRefused, choose_redis
from store.api_keys import ApiKeys
from store.keys import KeySpace
from tests.conftest import ROOT
from tests.support.dev import dev_command, dev_env
from tests.support.processes import processes_using
from tests.support.slack_env import free_port

SECRET_URL = "redis://agent:s3cret-pw@127.0.0.1:6390/2"


# -- REDIS_URL is used only when asked -----------------------------------------------------


def test_a_redis_url_is_refused_unless_asked_for_by_the_flag() -> None:
    with pytest.raises(RedisUrlRefused) as refused:
        choose_redis(Settings(redis_url=SECRET_URL), use_redis_url=False)
    message = refused.value.format_message()
    assert refused.value.exit_code == 2
    assert "--use-redis-url" in message
    assert "real deployment" in message  # the risk, named
    assert "s3cret-pw" not in message and "agent:***@127.0.0.1:6390/2" in message

    assert choose_redis(Settings(redis_url=SECRET_URL), use_redis_url=True) == SECRET_URL
    assert choose_redis(Settings(redis_url=None), use_redis_url=False) is None  # embedded
    with pytest.raises(RedisUrlRefused, match="REDIS_URL, which is not set"):
        choose_redis(Settings(redis_url=None), use_redis_url=True)


def test_handoff_dev_with_redis_url_set_refuses_in_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        dev_command(tmp_path / "data", free_port(), free_port()),
        cwd=ROOT,
        env={**dev_env(), "REDIS_URL": SECRET_URL},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("Error: REDIS_URL is set")
    assert "--use-redis-url" in line
    assert "s3cret-pw" not in result.stderr + result.stdout
    assert "Embedded Redis" not in result.stdout and "Using the Redis" not in result.stdout
    assert not (tmp_path / "data" / "env").exists()
    assert processes_using(tmp_path) == []


# -- the agents' file ----------------------------------------------------------------------


def test_the_agents_file_is_removed_only_while_it_is_this_runs(tmp_path: Path) -> None:
    settings = Settings(namespace="dev-ns", queue="dev-queue")
    path, written = run._write_agent_env(tmp_path, "redis://127.0.0.1:7000/0", settings)
    assert path == tmp_path / "env"
    assert path.stat().st_mode & 0o777 == 0o600
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines == [
        "REDIS_URL=redis://127.0.0.1:7000/0",
        "HANDOFF_NAMESPACE=dev-ns",
        "HANDOFF_QUEUE=dev-queue",
    ]
    # Another run wrote its own since: that one stays.
    _, theirs = run._write_agent_env(tmp_path, "redis://127.0.0.1:7001/0", settings)
    run._remove_agent_env(path, written)
    assert path.read_bytes() == theirs
    run._remove_agent_env(path, theirs)
    assert not path.exists()


def test_the_agents_file_names_the_api_and_its_key(tmp_path: Path) -> None:
    api = run.DevApi(3412, "hk_dev-key")
    path, _ = run._write_agent_env(tmp_path, "redis://127.0.0.1:7000/0", Settings(), api=api)
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines[-2:] == ["HANDOFF_API_URL=http://127.0.0.1:3412", "HANDOFF_API_KEY=hk_dev-key"]
    assert path.stat().st_mode & 0o777 == 0o600  # the key is a secret


# -- the HTTP API's key and callbacks ------------------------------------------------------


def test_each_run_revokes_the_earlier_runs_dev_keys_and_makes_an_agent_key(
    redis: Redis, redis_url: str
) -> None:
    settings = Settings(namespace="dev-ns")
    keys = ApiKeys(redis, KeySpace("dev-ns"))
    legacy = keys.create("dev").key  # what runs used to make
    theirs = keys.create("dev-billing").key  # a key of the developer's own
    elsewhere = ApiKeys(redis, KeySpace("ho")).create("dev").key
    first = run._dev_api_key(redis_url, settings)
    second = run._dev_api_key(redis_url, settings)

    # The earlier runs' keys work no more; each run's key has a name of its own (a revoked
    # name is never given again).
    assert keys.authenticate(legacy) is None
    assert keys.authenticate(first.key) is None
    record = keys.authenticate(second.key)
    assert record is not None
    assert re.fullmatch(r"dev-\d{8}-\d{6}-[0-9a-f]{4}", record.name)
    assert record.name != first.record.name
    assert (record.admin, record.channels) == (False, [])  # an agent key, any channel
    assert sorted(k.name for k in keys.list()) == sorted(["dev-billing", record.name])
    # Other keys, and other namespaces' keys, are left alone.
    assert keys.authenticate(theirs) is not None
    assert ApiKeys(redis, KeySpace("ho")).authenticate(elsewhere) is not None


def test_the_services_allow_callbacks_to_this_machine_besides_the_settings_hosts() -> None:
    env = run._child_env(
        "redis://127.0.0.1:7000/0", "http://127.0.0.1:3001/api/", "s", "xoxb-t", admins="U1"
    )
    assert env["HANDOFF_WEBHOOK_ALLOWED_HOSTS"] == "127.0.0.1,localhost"
    env = run._child_env(
        "redis://127.0.0.1:7000/0",
        "http://127.0.0.1:3001/api/",
        "s",
        "xoxb-t",
        admins="U1",
        webhook_hosts=" hooks.internal , localhost,",
    )
    assert env["HANDOFF_WEBHOOK_ALLOWED_HOSTS"] == "127.0.0.1,localhost,hooks.internal"


# -- progress while waiting ----------------------------------------------------------------


def test_a_slow_stage_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(run, "_QUIET_SECONDS", 0.3)
    monkeypatch.setattr(run, "_PROGRESS_SECONDS", 0.4)
    monkeypatch.setattr(run, "_WAIT_SECONDS", 1.3)
    started = time.monotonic()
    with pytest.raises(click.ClickException, match="the bot did not start"):
        run._Services(tmp_path).wait_healthy(free_port())  # nothing answers there
    assert time.monotonic() - started >= 1.3

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) in (3, 4), lines  # at 0.3 s, then every 0.4 s up to 1.3 s
    assert all(
        re.fullmatch(r"  waiting for the bot to answer /healthz \(\d+ s\)\.\.\.", x) for x in lines
    )


def test_a_slow_api_says_so_and_names_its_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(run, "_QUIET_SECONDS", 0.2)
    monkeypatch.setattr(run, "_WAIT_SECONDS", 0.5)
    with pytest.raises(click.ClickException) as refused:
        run._Services(tmp_path).wait_healthy(free_port(), name="the API", command="api")
    assert refused.value.format_message() == f"the API did not start; see {tmp_path / 'api.log'}"
    assert "  waiting for the API to answer /healthz (0 s)..." in capsys.readouterr().out


def test_a_quick_stage_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    waiting = run._Waiting("the worker to post handoff ho_1")
    for _ in range(5):
        waiting.tick()
    assert capsys.readouterr().out == ""


# -- NO_COLOR --------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("no_color", "styled"), [("1", False), ("", True), (None, True)])
def test_no_color_leaves_styles_out_of_what_dev_prints_to_a_terminal(
    monkeypatch: pytest.MonkeyPatch, no_color: str | None, styled: bool
) -> None:
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    terminal = _Terminal()
    with run._colors_unless_no_color():
        click.secho("resumed", fg="green", file=terminal)
    assert ("\x1b[" in terminal.getvalue()) is styled


def _run_on_a_terminal(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``command`` with its output on a pseudo-terminal; its exit code and output."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal
        )
    finally:
        os.close(terminal)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # every writer closed it
                    chunk = b""
                output += chunk
                if not chunk and process.poll() is not None:
                    break
            elif process.poll() is not None:
                break
            assert time.monotonic() < deadline, output.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        os.close(controller)
    return process.returncode, output.decode(errors="replace")


def test_a_dev_run_on_a_terminal_with_no_color_prints_no_styles_and_leaves_no_agents_file(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    code, output = _run_on_a_terminal(
        dev_command(data, free_port(), free_port()), {**dev_env(), "NO_COLOR": "1"}, timeout=120
    )
    assert code == 0, output
    assert "resumed: approval approved by U0DEVREVIEWER" in output  # the demo ran
    assert "\x1b[" not in output
    assert f"Agents: set -a && . {data / 'env'} && set +a" in output
    assert not (data / "env").exists()  # gone with the run: it would point at a dead Redis
