"""`handoff dev` as a subprocess: its command line and environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.support.slack_env import free_port


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
