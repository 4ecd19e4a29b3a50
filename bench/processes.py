"""The processes a benchmark measures: ``handoff serve``, ``handoff worker``, gunicorn apps.

Each runs in a session of its own, so a Ctrl-C at the terminal does not reach it, and
stopping its process group also stops what it started (gunicorn's workers, RQ's work
horse, the dispatcher). Their output goes to one log file each, in a temporary folder
that is kept when a run fails (so the logs can be read) and removed otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from redis import Redis
from rq import Worker

from bench.common import ROOT

HOST = "127.0.0.1"
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0

CLI = [sys.executable, "-m", "bot.cli"]
"""``handoff`` as a subprocess, from the repository's sources."""


class Processes:
    """Subprocesses started by one benchmark run, and their logs."""

    def __init__(self, prefix: str) -> None:
        self.log_dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.keep_logs = True
        """Until the run says it passed its checks (``remove_logs``)."""

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str]) -> None:
        """Start ``argv`` as ``name``, its output going to ``<log_dir>/<name>.log``."""
        with open(self.log_dir / f"{name}.log", "wb") as log:
            self.running[name] = subprocess.Popen(
                list(argv),
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def spawn_workers(self, names: Sequence[str], env: dict[str, str]) -> None:
        """Start one ``handoff worker`` (RQ worker plus dispatcher) per name."""
        for name in names:
            self.spawn(name, [*CLI, "worker", "--name", name], env)

    def check_alive(self) -> None:
        """Raise, with the end of its log, if any of the processes has exited."""
        for name, process in self.running.items():
            code = process.poll()
            if code is not None:
                raise RuntimeError(f"{name} exited with status {code}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last ``lines`` lines of ``name``'s output."""
        text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop_all(self) -> None:
        """SIGTERM every group (a warm shutdown), wait for the groups to exit, then
        SIGKILL what is still running. Idempotent."""
        for process in self.running.values():
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.running.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # The group outlives its leader while a dispatcher or work horse still exits.
            while time.monotonic() < deadline and _group_alive(process.pid):
                time.sleep(0.05)
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        self.running.clear()

    def finish(self) -> None:
        """Stop everything; remove the logs unless they are to be kept (then say where)."""
        self.stop_all()
        if self.keep_logs:
            print(f"logs kept in {self.log_dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def subprocess_env(redis_url: str, **settings: str) -> dict[str, str]:
    """The environment of a subprocess: this one's, minus any Slack or handoff setting
    that could change what is measured (an app token would switch ``handoff serve`` to
    Socket Mode; OAuth credentials would switch Bolt to OAuth mode), plus ``settings``
    (environment names) and the repository on ``PYTHONPATH`` (for the resume targets)."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLACK_", "HANDOFF_", "REDIS_URL"))
    }
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**inherited, "PYTHONPATH": python_path, "REDIS_URL": redis_url, **settings}


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_until_answering(processes: Processes, name: str, url: str) -> None:
    """Wait until ``url`` gets any HTTP answer (a 404 counts: the server is up)."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        processes.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not answer at {url}:\n{processes.log_tail(name)}")


def wait_for_workers(redis: Redis, processes: Processes, worker_names: Sequence[str]) -> None:
    """Wait until every RQ worker has registered itself."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    keys = [Worker.redis_worker_namespace_prefix + name for name in worker_names]
    while time.monotonic() < deadline:
        processes.check_alive()
        if redis.exists(*keys) == len(keys):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the workers did not start:\n{processes.log_tail(worker_names[0])}")
