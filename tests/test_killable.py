"""worker.killable: calls run one at a time in a child process, which is dead by the time a
call that did not return by its deadline is reported (no Redis needed)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from worker.killable import AttemptDied, AttemptTimedOut, KillableProcess, TargetRaised

ROOT = Path(__file__).resolve().parent.parent


def _gone(pid: int) -> bool:
    """The process is dead: no longer there, or a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _handle(payload: bytes) -> None:
    """Commands the tests send: ``pid FILE``, ``raise``, ``thread-then-raise FILE`` (a
    thread that writes FILE.late half a second later; the pid goes to FILE), ``exit``,
    ``hang FILE``, ``gil FILE``, ``spawn FILE`` (a ``sleep 60`` whose pid goes to FILE, then
    hang), ``ticker FILE`` (a program writing ticks to FILE.ticks, whose pid goes to FILE,
    then hang) and ``ticker-gil FILE`` (the same, then busy holding the GIL)."""
    command, _, argument = payload.decode().partition(" ")
    if command == "pid":
        Path(argument).write_text(str(os.getpid()))
    elif command == "raise":
        raise RuntimeError("downstream unavailable")
    elif command == "thread-then-raise":  # a tool's thread its framework gave up on, say
        pid_file = Path(argument)

        def later() -> None:
            time.sleep(0.5)
            Path(f"{argument}.late").write_text("the failed attempt's thread ran on")

        threading.Thread(target=later).start()
        pid_file.write_text(str(os.getpid()))
        raise RuntimeError("a sibling call failed")
    elif command == "exit":
        os._exit(3)
    elif command == "hang":
        _swallow_everything(Path(argument))
    elif command == "gil":  # busy in C code that holds the GIL: no thread of its runs
        Path(argument).write_text(str(os.getpid()))
        re.fullmatch(r"(a+)+b", "a" * 40)
    elif command == "spawn":
        sleeper = subprocess.Popen(["sleep", "60"])
        Path(argument).write_text(str(sleeper.pid))
        time.sleep(60)
    elif command in ("ticker", "ticker-gil"):
        # A plain Popen: the program stays in this process's group, as a target's would.
        ticker = subprocess.Popen([sys.executable, "-c", _TICKER, f"{argument}.ticks"])
        Path(argument).write_text(str(ticker.pid))
        if command == "ticker-gil":
            re.fullmatch(r"(a+)+b", "a" * 40)
        time.sleep(60)


_TICKER = """
import sys, time
while True:
    with open(sys.argv[1], "a") as ticks:
        ticks.write(f"{time.time()}\\n")
    time.sleep(0.02)
"""


def _swallow_everything(pid_file: Path) -> None:
    pid_file.write_text(str(os.getpid()))
    while True:
        with contextlib.suppress(BaseException):  # what the test is about
            time.sleep(0.01)


@pytest.fixture
def process() -> Iterator[KillableProcess]:
    killable = KillableProcess(_handle)
    yield killable
    killable.close()


def test_calls_run_in_one_child_kept_between_calls(
    process: KillableProcess, tmp_path: Path
) -> None:
    first, second = tmp_path / "1", tmp_path / "2"
    process.run(f"pid {first}".encode(), timeout=5)
    process.run(f"pid {second}".encode(), timeout=5)
    pid = int(first.read_text())
    assert pid != os.getpid()
    assert int(second.read_text()) == pid
    process.close()
    assert _gone(pid)


def test_an_error_is_reported_with_its_type_and_traceback(process: KillableProcess) -> None:
    with pytest.raises(TargetRaised) as raised:
        process.run(b"raise", timeout=5)
    assert str(raised.value) == "RuntimeError: downstream unavailable"
    assert "in _handle" in raised.value.details


def test_what_a_call_that_raised_left_running_never_runs_next_to_the_next_call(
    process: KillableProcess, tmp_path: Path
) -> None:
    """A call that raised may have left work running (a thread, a program): the child goes
    with it, so the next attempt, in a new child, never runs next to it."""
    first, second = tmp_path / "1", tmp_path / "2"
    with pytest.raises(TargetRaised):
        process.run(f"thread-then-raise {first}".encode(), timeout=5)
    failed = int(first.read_text())
    wait_until(lambda: _gone(failed), timeout=5)
    process.run(f"pid {second}".encode(), timeout=5)
    assert int(second.read_text()) != failed
    time.sleep(0.8)
    assert not Path(f"{first}.late").exists()


def test_a_call_that_swallows_everything_is_killed_at_its_deadline(
    process: KillableProcess, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    began = time.monotonic()
    with pytest.raises(AttemptTimedOut, match=r"did not return within 0\.5 s"):
        process.run(f"hang {pid_file}".encode(), timeout=0.5)
    assert 0.5 <= time.monotonic() - began < 1.5
    assert _gone(int(pid_file.read_text()))
    # The next call gets a new child.
    again = tmp_path / "again"
    process.run(f"pid {again}".encode(), timeout=5)
    assert int(again.read_text()) != int(pid_file.read_text())


def test_what_the_call_started_is_killed_with_it(process: KillableProcess, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(AttemptTimedOut):
        process.run(f"spawn {pid_file}".encode(), timeout=0.5)
    wait_until(lambda: _gone(int(pid_file.read_text())), timeout=5)


def test_an_interrupted_wait_kills_the_child_before_it_propagates(
    process: KillableProcess, tmp_path: Path
) -> None:
    # As RQ's job timeout does: a SIGALRM handler raising in the waiting worker.
    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    pid_file = tmp_path / "pid"
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(Interrupted):
            process.run(f"hang {pid_file}".encode(), timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _gone(int(pid_file.read_text()))


def test_a_child_that_dies_without_a_word_is_reported_and_replaced(
    process: KillableProcess, tmp_path: Path
) -> None:
    with pytest.raises(AttemptDied, match="exited with status 3"):
        process.run(b"exit", timeout=5)
    process.run(f"pid {tmp_path / 'pid'}".encode(), timeout=5)


def test_an_idle_child_killed_from_outside_is_replaced(
    process: KillableProcess, tmp_path: Path
) -> None:
    first, second = tmp_path / "1", tmp_path / "2"
    process.run(f"pid {first}".encode(), timeout=5)
    pid = int(first.read_text())
    os.kill(pid, signal.SIGKILL)
    # Exited as a whole (every thread): its child, this process, is told so.
    wait_until(lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT))
    process.run(f"pid {second}".encode(), timeout=5)
    assert second.read_text() != first.read_text()


def test_a_guard_killed_from_outside_is_replaced_and_every_guard_is_reaped(
    process: KillableProcess, tmp_path: Path
) -> None:
    first, second = tmp_path / "1", tmp_path / "2"
    process.run(f"pid {first}".encode(), timeout=5)
    guard = process._guard
    os.kill(guard, signal.SIGKILL)
    wait_until(lambda: os.waitid(os.P_PID, guard, os.WEXITED | os.WNOHANG | os.WNOWAIT))
    # Without its guard the child would not take what a call starts with it: replaced.
    process.run(f"pid {second}".encode(), timeout=5)
    assert second.read_text() != first.read_text()
    assert process._guard != guard
    process.close()
    for pid in (guard, int(first.read_text()), int(second.read_text())):
        with pytest.raises(ChildProcessError):  # reaped, no zombie left
            os.waitpid(pid, os.WNOHANG)


_HOLDER = """
import sys
from tests.test_killable import _handle
from worker.killable import KillableProcess
KillableProcess(_handle).run(f"{sys.argv[3]} {sys.argv[1]}".encode(), timeout=float(sys.argv[2]))
"""


@pytest.mark.parametrize(
    ("how", "command"), [("killed", "hang"), ("stopped", "hang"), ("stopped", "gil")]
)
def test_the_child_dies_when_its_worker_is_killed_or_cannot_act(
    tmp_path: Path, how: str, command: str
) -> None:
    """Stopped: the child ends itself past its deadline, by a kernel timer too, so even a
    call that holds the GIL (no watchdog thread of the child can run) cannot outlive it."""
    pid_file = tmp_path / "pid"
    timeout = 30 if how == "killed" else 0.5
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(pid_file), str(timeout), command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_until(pid_file.exists, timeout=10)
        wait_until(lambda: pid_file.read_text() != "", timeout=5)
        child = int(pid_file.read_text())
        os.kill(holder.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        wait_until(lambda: _gone(child), timeout=5)
    finally:
        holder.kill()
        holder.wait(5)


@pytest.mark.parametrize("command", ["ticker", "ticker-gil"])
def test_what_the_call_started_dies_with_its_worker(tmp_path: Path, command: str) -> None:
    """A worker killed outright (SIGKILL, so it can kill nothing itself) takes with it the
    child's whole process group, not only the child: what the call started cannot run on
    next to the attempt another worker starts. Even while the call holds the GIL."""
    pid_file, ticks = tmp_path / "pid", tmp_path / "pid.ticks"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(pid_file), "30", command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ticker = 0
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text() != "", timeout=10)
        ticker = int(pid_file.read_text())
        wait_until(lambda: ticks.exists() and ticks.read_text().count("\n") >= 3, timeout=10)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(5)
        killed_at = time.time()
        wait_until(lambda: _gone(ticker), timeout=2, interval=0.01)
        time.sleep(0.2)  # a tick written after all would show now
        assert float(ticks.read_text().split()[-1]) < killed_at + 2
    finally:
        holder.kill()
        holder.wait(5)
        if ticker:
            with contextlib.suppress(ProcessLookupError):
                os.kill(ticker, signal.SIGKILL)
