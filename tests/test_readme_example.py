"""The README's first example ("First approval") runs unchanged against `handoff dev`, as a
reader runs it: `handoff dev` in one terminal, the script in another with `.handoff-dev/env`
sourced, and the approval clicked in the workbench as the dev reviewer."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from bot.blockkit import ids
from bot.dev.run import DEV_REVIEWER
from bot.standin.workbench import TOKEN_HEADER
from tests.conftest import ROOT, wait_until
from tests.support.dev import dev_command, dev_env
from tests.support.processes import processes_using
from tests.support.slack_env import free_port

UP_SECONDS = 60


def first_python_block(readme: str) -> str:
    """The first ```python block of the README's "First approval" section, as written."""
    section = readme[readme.index("\n## First approval\n") :]
    found = re.search(r"^```python\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert found, "no python block in the README's First approval section"
    assert readme.index(found[1]) == readme.index("```python\n") + len("```python\n"), (
        "the First approval block is no longer the README's first python block"
    )
    return found[1]


class DevRun:
    """A `handoff dev --auto --keep-running` and what it printed for a person to use."""

    def __init__(self, process: subprocess.Popen[bytes], data: Path, out: Path) -> None:
        self.process, self.data, self.out = process, data, out

    def printed(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_ready(self) -> tuple[str, str]:
        """Its agents' file written, the workbench printed and the bot up (its demo has
        begun): the stand-in's URL and the workbench token."""
        deadline = time.monotonic() + UP_SECONDS
        while True:
            out = self.printed()
            standin = re.search(r"Local Slack stand-in at (http://\S+/);", out)
            token = re.search(rf"{TOKEN_HEADER}: (\S+)", out)
            bot_up = "The demo agent started run" in out
            if standin and token and bot_up and (self.data / "env").exists():
                return standin[1], token[1]
            assert self.process.poll() is None, out
            assert time.monotonic() < deadline, out
            time.sleep(0.1)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevRun]:
    data, out = tmp_path / "data", tmp_path / "dev.out"
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            dev_command(data, free_port(), free_port(), "--keep-running"),
            cwd=ROOT,
            env=dev_env(),  # no REDIS_URL: the embedded Redis, as for a reader
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield DevRun(process, data, out)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for proc in processes_using(tmp_path):
            proc.kill()
        process.wait(timeout=5)


def _state(standin: str, user: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{standin}workbench/state?user={user}", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _approve_button(message: dict[str, Any]) -> dict[str, Any] | None:
    for block in message["blocks"]:
        for element in block.get("elements", []):
            if element.get("action_id") == ids.APPROVE:
                return {"block_id": block.get("block_id"), "action_id": ids.APPROVE}
    return None


def _click_approve_as_the_reviewer(standin: str, token: str, handoff_id: str) -> None:
    """What the reviewer does in the workbench: find the handoff's message in the channel
    and click Approve (and confirm it)."""

    def posted() -> tuple[dict[str, Any], dict[str, Any]] | None:
        for message in _state(standin, DEV_REVIEWER.id)["messages"]:
            button = _approve_button(message)
            if button and handoff_id in json.dumps(message["blocks"]):
                return message, button
        return None

    found = wait_until(posted, timeout=UP_SECONDS)
    assert isinstance(found, tuple)
    message, button = found
    body = {
        "user": DEV_REVIEWER.id,
        **button,
        "message": {"channel": message["channel"], "ts": message["ts"]},
    }
    request = urllib.request.Request(
        f"{standin}workbench/click",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", TOKEN_HEADER: token},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_the_first_approval_example_runs_unchanged_against_handoff_dev(
    dev: DevRun, tmp_path: Path
) -> None:
    example = first_python_block((ROOT / "README.md").read_text())
    script = tmp_path / "first_approval.py"
    script.write_text(example)
    standin, token = dev.wait_ready()
    env_file = dev.data / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600

    # The second terminal: nothing of this test's Redis or settings, only the sourced file.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("HANDOFF_")}
    env.update({"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    # As the README says to run it: set -a && . .handoff-dev/env && set +a && python ...
    shell = 'set -a && . "$1" && set +a && exec "$2" first_approval.py'
    agent = subprocess.Popen(
        ["bash", "-c", shell, "-", str(env_file), sys.executable],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        first = agent.stdout.readline()
        waiting = re.match(r"Waiting for a person to decide (ho_\w+) \.\.\.$", first)
        assert waiting, first + (agent.stderr.read() if agent.poll() is not None else "")

        _click_approve_as_the_reviewer(standin, token, waiting[1])

        rest, errors = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=5)
    assert agent.returncode == 0, errors
    assert rest.strip() == f"approved by {DEV_REVIEWER.id}", rest + errors

    # Stopped, `handoff dev` takes its file along: it would point at a Redis that is gone.
    dev.process.send_signal(signal.SIGTERM)
    dev.process.wait(timeout=20)
    assert not env_file.exists(), dev.printed()
