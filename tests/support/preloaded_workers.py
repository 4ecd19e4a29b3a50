"""Start real `handoff worker` processes with an agent framework imported up front.

Importing LangGraph or the OpenAI Agents SDK takes seconds. Importing it in the worker
before it starts (as ``rq worker`` users do with a preloading script) keeps that out of
the first job's time, and lets forked work horses (``--fork``) inherit it. The command is
otherwise the real `handoff worker` (``bot.cli``).
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
    """SIGKILL the worker that wrote ``hung`` ("<pid> <parent pid>" of the process running
    the job): the worker, its dispatcher, and its work horse when it forks one (RQ puts
    each horse in a process group of its own, so killing the worker's group alone would
    leave the horse running). Without ``--fork`` the job runs in the worker itself."""
    text = hung.decode() if isinstance(hung, bytes) else str(hung)
    horse, parent = (int(part) for part in text.split())
    [worker] = [p for p in workers.processes if p.pid in (horse, parent)]
    with contextlib.suppress(ProcessLookupError):
        os.kill(horse, signal.SIGKILL)
    workers.kill(worker)
