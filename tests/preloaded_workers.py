"""Start real `handoff worker` processes with an agent framework imported up front.

The RQ worker forks a work horse for every job, and a horse that imports LangGraph or the
OpenAI Agents SDK itself spends seconds on it, per job. Importing the framework in the
worker's parent process first (as ``rq worker`` users do with a preloading script) lets
each horse inherit it. The command is otherwise the real `handoff worker` (``bot.cli``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from tests.conftest import ROOT, WorkerProcesses


def start_preloaded_worker(
    workers: WorkerProcesses, preload: Sequence[str], *, extra_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start `handoff worker` after importing ``preload``; the ``workers`` fixture stops it."""
    env = {
        **os.environ,
        "REDIS_URL": workers.redis_url,
        "HANDOFF_SWEEP_INTERVAL_SECONDS": "0.1",
        "PYTHONPATH": str(ROOT),
        **extra_env,
    }
    imports = "".join(f"import {module}; " for module in preload)
    code = f"{imports}from bot.cli import main; main()"
    log = open(workers.log_dir / f"worker-{len(workers.processes)}.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-c", code, "worker", "--name", f"test-{time.monotonic_ns()}"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    workers.processes.append(process)
    return process


def kill_worker_and_horse(workers: WorkerProcesses, hung: bytes | str | None) -> None:
    """SIGKILL the worker whose work horse wrote ``hung`` ("<horse pid> <worker pid>"):
    the worker, its dispatcher, and the horse (RQ puts each horse in a process group of
    its own, so killing the worker's group alone leaves the horse running)."""
    text = hung.decode() if isinstance(hung, bytes) else str(hung)
    horse, parent = (int(part) for part in text.split())
    [worker] = [p for p in workers.processes if p.pid == parent]
    with contextlib.suppress(ProcessLookupError):
        os.kill(horse, signal.SIGKILL)
    workers.kill(worker)
