"""`handoff dev` as a subprocess: its command line and environment, a run of it, and what
its reviewer does in the workbench."""

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
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bot.blockkit import ids
from bot.dev.run import DEV_REVIEWER
from bot.standin.workbench import TOKEN_HEADER
from tests.conftest import ROOT, wait_until
from tests.support.processes import processes_using
from tests.support.slack_env import free_port

UP_SECONDS = 60


def dev_env() -> dict[str, str]:
    """This environment without REDIS_URL (so `handoff dev` starts its embedded server,
    one more process to stop) and with the repository on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**env, "PYTHONPATH": str(ROOT)}


def dev_command(
    data: Path, port: int, standin_port: int, *extra: str, api_port: int | None = None
) -> list[str]:
    """`handoff dev --auto` on ``data``, serving on ``port``, the stand-in on
    ``standin_port`` and the HTTP API on ``api_port`` (default: a free port, never the fixed
    3002 a `handoff api` or another test may hold), then ``extra``."""
    return [
        sys.executable,
        "-m",
        "bot.cli",
        "dev",
        "--auto",
        "--data-dir",
        str(data),
        "--port",
        str(port),
        "--standin-port",
        str(standin_port),
        "--api-port",
        str(free_port() if api_port is None else api_port),
        *extra,
    ]


def second_terminal_env(**extra: str) -> dict[str, str]:
    """A reader's second terminal: nothing of this test's Redis or settings (the agents'
    file sourced there brings them), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("HANDOFF_")}
    return {**env, **extra}


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


@contextmanager
def running_dev(folder: Path, *, api_port: int | None = None) -> Iterator[DevRun]:
    """`handoff dev --auto --keep-running` on ``folder``/data with the embedded Redis, as a
    reader runs it; stopped (and everything it left running killed) afterwards."""
    data, out = folder / "data", folder / "dev.out"
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            dev_command(data, free_port(), free_port(), "--keep-running", api_port=api_port),
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
        for proc in processes_using(folder):
            proc.kill()
        process.wait(timeout=5)


def _workbench_state(standin: str, user: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{standin}workbench/state?user={user}", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _approve_button(message: dict[str, Any]) -> dict[str, Any] | None:
    for block in message["blocks"]:
        for element in block.get("elements", []):
            if element.get("action_id") == ids.APPROVE:
                return {"block_id": block.get("block_id"), "action_id": ids.APPROVE}
    return None


def click_approve_as_the_reviewer(standin: str, token: str, handoff_id: str) -> None:
    """What the reviewer does in the workbench: find the handoff's message in the channel
    and click Approve (and confirm it)."""

    def posted() -> tuple[dict[str, Any], dict[str, Any]] | None:
        for message in _workbench_state(standin, DEV_REVIEWER.id)["messages"]:
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
