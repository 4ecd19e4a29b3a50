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

from redis import Redis

from store.repository import TaskPolicy
from tests.conftest import WorkerProcesses
from worker.client import Handoffs


def start_preloaded_worker(
    workers: WorkerProcesses, preload: Sequence[str], *, extra_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start `handoff worker` after importing ``preload``; the ``workers`` fixture stops it."""
    imports = "".join(f"import {module}; " for module in preload)
    code = f"{imports}from bot.cli import main; main()"
    name = f"test-{time.monotonic_ns()}"
    return workers.spawn([sys.executable, "-c", code, "worker", "--name", name], extra_env)


def hanging_once(
    redis: Redis,
    workers: WorkerProcesses,
    preload: Sequence[str],
    *,
    hang_key: str,
    extra_env: dict[str, str],
) -> Handoffs:
    """Set up a resume killed mid-way: ``hang_key`` set (the test's graph or agent hangs
    the first time it resumes), two preloaded workers (one to hang and be killed, one to
    take over), and the agent API with short resume leases, for the handoffs."""
    policy = TaskPolicy(resume_max_attempts=3, resume_timeout_seconds=3, lease_grace_seconds=0.5)
    handoffs = Handoffs(redis, tasks=policy)
    redis.set(hang_key, "1")
    for _ in range(2):
        start_preloaded_worker(workers, preload, extra_env=extra_env)
    return handoffs


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
