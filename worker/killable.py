"""Run resume attempts in a child process that is certainly dead once its deadline passes.

RQ stops a job that runs past its timeout by raising ``JobTimeoutException`` in it (a
SIGALRM handler, in the worker or in its work horse). That is an ordinary ``Exception``: a
resume target that catches ``Exception`` swallows it and goes on running, past its lease,
next to the attempt the dispatcher starts once the lease has lapsed. RQ's forking worker
kills a work horse only 60 s after the job's timeout (``monitor_work_horse``), and its
``SimpleWorker`` (the default of `handoff worker`) never does. The store's fencing token
keeps such an attempt from recording an outcome; it cannot stop its side effects.

So a worker runs its resume targets in a child process of its own (``KillableProcess``),
forked at its first resume and kept for the next ones (so the agent's modules stay
imported, as in the worker itself), one call at a time, until a call raises (what it started
may still run: a thread, a program) or is not back by its deadline. When a call is not back
by its deadline, or the job waiting for it is interrupted (RQ's timeout, a cold shutdown), the
child is killed with SIGKILL, with its whole process group (anything the target started),
and reaped before the job goes on; the next call forks a new one. The deadline is the job's
timeout, which ends ``LEASE_GRACE_SECONDS`` before the attempt's lease lapses, so the killed
attempt is gone before the next attempt can begin.

If the worker dies, even by SIGKILL (so that it can kill nothing itself), the child's whole
process group dies with it, not only the child (which Linux kills, ``PR_SET_PDEATHSIG``):
each child has a guard (``_GUARD``), a process in the child's group that holds the read
ends of two pipes whose write ends only the worker and only the child hold. The kernel
closes those when either dies, however; the guard then SIGKILLs the group, itself last. A
process of its own, it acts even while the call holds the GIL; a fresh interpreter rather
than a fork, it costs a constant 2.8 MB of private memory per worker (measured; a fork's
would grow towards the worker's as their pages are written), about 0.5 ms more for a
child's start (the worker spends 1.2 ms in ``posix_spawn``, while the child starts) and
0.5 µs a call (checking that it is alive); what the call started is dead within 5 ms of
the worker's death. If the worker cannot act (stopped with SIGSTOP), the child kills itself
a quarter of a second after the deadline (a watchdog thread, which also kills what the call
started) or, when the call holds the GIL so that no thread runs, by a kernel timer
(SIGALRM) half a second after it, and its guard kills the rest of the group.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5
_EXIT_WAIT_SECONDS = 1.0
"""How long a child that closed its pipe before its deadline is given to exit by itself."""
_WATCHDOG_LAG_SECONDS = 0.25
"""How long after a call's deadline the child kills itself, should its parent not have."""

try:  # loaded here, once, rather than in every child
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


class AttemptFailed(Exception):
    """The call in the child did not return; ``details`` holds the child's traceback."""

    def __init__(self, error: str, *, details: str = "") -> None:
        super().__init__(error)
        self.details = details


class TargetRaised(AttemptFailed):
    """The call raised in the child: the message is ``"Type: message"`` of its error."""


class AttemptTimedOut(AttemptFailed):
    """The call did not return by its deadline: its process was killed."""


class AttemptDied(AttemptFailed):
    """The child died before it reported (a crash of the interpreter, a kill from outside)."""


def _clock() -> float:
    # System-wide (the child reads the parent's deadlines) and counting time the machine
    # spends suspended, as the lease does, unlike CLOCK_MONOTONIC.
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return time.monotonic()


class KillableProcess:
    """A child process that calls ``handler(payload)`` for each ``run``, one at a time.

    Example::

        process = KillableProcess(lambda payload: print(payload))
        process.run(b"hello", timeout=5)   # returns once the child has called the handler
    """

    def __init__(self, handler: Callable[[bytes], object]) -> None:
        self._handler = handler
        self._owner = 0
        self._pid = 0
        self._requests = -1
        self._reports = -1
        self._exit_fd: int | None = None
        self._guard = 0
        self._guard_alive = -1
        self._buffer = b""

    def run(self, payload: bytes, *, timeout: float) -> None:
        """Have the child call the handler with ``payload`` (no newline in it); return once
        it returned. Raises ``TargetRaised`` when it raised, ``AttemptTimedOut`` when it did
        not return within ``timeout`` seconds, ``AttemptDied`` when the child died; in the
        last two cases, and whenever the wait is interrupted, the child is dead on return."""
        if b"\n" in payload:
            raise ValueError("payload must be one line")
        deadline = _clock() + timeout
        request = f"{deadline!r} ".encode() + payload + b"\n"
        if not self._alive():
            self._start()
        done, ended_early, status, killed = False, False, None, False
        try:  # whatever interrupts this (RQ's timeout, a shutdown) kills the child
            try:
                self._send(request)
            except OSError:  # the idle child died (killed from outside): start another
                self._discard(kill=True)
                self._start()
                self._send(request)
            line = self._read_report(deadline)
            done = line is not None
            ended_early = not done and _clock() < deadline
        finally:
            if ended_early:
                # Its end of the pipe closed before the deadline: it is exiting. Let it, so
                # that its own exit status is reported (not the SIGKILL sent to hurry it).
                self._await_exit(_EXIT_WAIT_SECONDS)
            if not done:
                status, killed = self._discard(kill=True)
        if line is None:
            if killed:
                raise AttemptTimedOut(
                    f"the resume target did not return within {timeout:g} s; its process was killed"
                )
            raise AttemptDied(f"the resume target's process {_describe(status)}")
        try:
            outcome = json.loads(line)
        except ValueError:
            outcome = {"ok": False, "error": f"UnreadableReport: {line[:200]!r}"}
        if outcome.get("ok") is not True:
            # What the call started may still run (a thread of a tool its framework gave up
            # on, a program): it goes with the child, so it never runs next to the next
            # attempt, which starts in a new one.
            self._discard(kill=True)
            raise TargetRaised(str(outcome.get("error")), details=str(outcome.get("details", "")))

    def _await_exit(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the child to exit by itself (it stays unreaped)."""
        until = _clock() + seconds
        while _clock() < until and not _exited(self._pid):
            if self._exit_fd is not None:
                select.select([self._exit_fd], [], [], max(until - _clock(), 0))
            else:
                time.sleep(0.002)

    def close(self) -> None:
        """Stop the child (a later ``run`` starts another)."""
        if self._alive():
            self._discard(kill=True)

    # -- the parent's side ----------------------------------------------------------------

    def _alive(self) -> bool:
        if self._pid and self._owner != os.getpid():
            # Inherited through a fork (an RQ work horse): the child is the forker's.
            for fd in (self._requests, self._reports, self._exit_fd, self._guard_alive):
                if fd is not None and fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._pid = self._guard = 0
        if self._pid and _exited(self._pid):  # killed from outside while idle
            self._discard(kill=False)
        elif self._pid and _exited(self._guard):
            # Its guard was killed from outside: without it, what a call starts would outlive
            # this process should it die. Start both afresh.
            self._discard(kill=True)
        return bool(self._pid)

    def _start(self) -> None:
        parent = os.getpid()
        requests_read, requests_write = os.pipe()
        reports_read, reports_write = os.pipe()
        # The guard's lifelines: the write end of one is held by this process only, of the
        # other by the child only (non-inheritable, so no program they exec holds one).
        worker_read, worker_write = os.pipe()
        child_read, child_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; reports through its pipe
            try:
                for fd in (requests_write, reports_read, worker_read, worker_write, child_read):
                    os.close(fd)
                _serve(self._handler, parent, requests_read, reports_write)
            finally:
                os._exit(1)
        os.close(requests_read)
        os.close(reports_write)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # the child does it too: whichever runs first
        os.close(child_write)
        try:
            guard = _spawn_guard(pid, worker_read, child_read)
        except BaseException:
            os.close(worker_write)
            os.close(requests_write)
            os.close(reports_read)
            _reap(pid, None, kill=True)
            raise
        finally:
            os.close(worker_read)
            os.close(child_read)
        self._owner, self._pid, self._guard = parent, pid, guard
        self._requests, self._reports = requests_write, reports_read
        self._guard_alive = worker_write
        self._exit_fd = _open_pidfd(pid)
        self._buffer = b""

    def _send(self, request: bytes) -> None:
        view = memoryview(request)
        while view:
            view = view[os.write(self._requests, view) :]

    def _read_report(self, deadline: float) -> bytes | None:
        """The child's next report line, or None if it died or the deadline passed."""
        watched = [self._reports] if self._exit_fd is None else [self._reports, self._exit_fd]
        while b"\n" not in self._buffer:
            remaining = deadline - _clock()
            if remaining <= 0:
                return None
            ready, _, _ = select.select(watched, [], [], min(remaining, _POLL_SECONDS))
            if self._reports in ready:
                chunk = os.read(self._reports, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif ready:  # exited, and nothing left to read (something it started holds the pipe)
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _discard(self, *, kill: bool) -> tuple[int | None, bool]:
        """Kill the child (now, or once its current call's deadline passed, is the same:
        it is called only once that happened) and reap it; returns its wait status and
        whether it was still running when killed."""
        pid, exit_fd, guard = self._pid, self._exit_fd, self._guard
        self._pid = self._guard = 0
        for fd in (self._requests, self._reports):
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            return _reap(pid, exit_fd, kill=kill)
        finally:
            if exit_fd is not None:
                os.close(exit_fd)
            # Only now (the child reaped, its group killed, the guard with it): had the guard
            # been told first, its kill could have made a call that ran past its deadline
            # look like one that died by itself.
            with contextlib.suppress(OSError):
                os.close(self._guard_alive)
            _reap_guard(guard)


def _exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _describe(status: int | None) -> str:
    if status is None:
        return "could not be waited for"
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)} before it returned"


def _reap(pid: int, exit_fd: int | None, *, kill: bool) -> tuple[int | None, bool]:
    """SIGKILL the child (if ``kill``) and wait for it; returns its wait status (None if it
    could not be waited for) and whether it was still running. Anything left running in its
    process group is killed too, before the child is reaped (while its group id cannot be
    taken by another process)."""
    running = False
    while True:
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return None, running
        if exited is not None:
            break
        if kill and not running:
            running = True
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if exit_fd is not None:
            select.select([exit_fd], [], [], _POLL_SECONDS)
        else:
            time.sleep(0.002)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None, running
    return status, running


_GUARD = """
import os, select, sys
group, lifelines = int(sys.argv[1]), [int(fd) for fd in sys.argv[2:]]
poll = select.poll()
for fd in lifelines:
    poll.register(fd, select.POLLIN)
try:
    while not poll.poll():
        pass
finally:
    if os.getpgrp() == group:
        os.killpg(0, 9)
"""
"""The guard's program: wait until a lifeline's write end is closed (nothing is ever written
to them), then SIGKILL its own process group, which is the child's, itself included."""


def _spawn_guard(child: int, worker_alive: int, child_alive: int) -> int:
    """Start the child's guard: a process that kills the child's process group once the
    worker or the child is gone, however it died. The write end of ``worker_alive`` is held
    by the worker alone, that of ``child_alive`` by the child alone; the kernel closes them
    when they die. A process of its own, so that nothing the child does (a call that holds
    the GIL) can keep it from acting; in the child's group, so that the group's id cannot be
    taken by another before it is killed (a group lasts as long as a member does). A fresh
    interpreter rather than a fork: a fork's memory would become its own page by page as
    the worker and the child write to theirs."""
    for fd in (worker_alive, child_alive):  # read ends: whoever else inherits one is harmless
        os.set_inheritable(fd, True)
    return os.posix_spawn(
        sys.executable,
        [sys.executable, "-I", "-S", "-c", _GUARD, str(child), str(worker_alive), str(child_alive)],
        os.environ,
        setpgroup=child,  # or it fails: the child is gone already
        # Only its lifelines end it (and the SIGKILL sent to the group).
        setsigmask=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT),
    )


def _reap_guard(guard: int) -> None:
    """Wait for the guard, which is gone or going (it saw its lifeline close), and reap it."""
    if guard <= 0:  # none (waitpid would take 0 for "any child in this group")
        return
    until = _clock() + _EXIT_WAIT_SECONDS
    while True:
        try:
            if os.waitpid(guard, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        if _clock() >= until:  # stopped from outside: still this process's child, so its pid
            with contextlib.suppress(ProcessLookupError):  # is its own
                os.kill(guard, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(guard, 0)
            return
        time.sleep(0.002)


# -- the child's side ---------------------------------------------------------------------


class _Watchdog:  # pragma: no cover - runs in the child
    """Kills the child's group a moment after the current call's deadline."""

    def __init__(self) -> None:
        self.deadline: float | None = None

    def watch(self) -> None:
        while True:
            deadline = self.deadline
            now = _clock()
            if deadline is not None and now >= deadline + _WATCHDOG_LAG_SECONDS:
                if os.getpgid(0) == os.getpid():  # never the worker's group
                    with contextlib.suppress(OSError):
                        os.killpg(0, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)
            wait = _POLL_SECONDS if deadline is None else deadline + _WATCHDOG_LAG_SECONDS - now
            time.sleep(min(max(wait, 0.01), _POLL_SECONDS))


def _serve(  # pragma: no cover - runs in the child
    handler: Callable[[bytes], object], parent: int, requests: int, reports: int
) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the worker died before the line above
        os._exit(1)
    # The parent decides when this process ends: it kills it at a call's deadline and on a
    # cold shutdown, and waits for the call on a warm one.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    watchdog = _Watchdog()
    threading.Thread(target=watchdog.watch, name="killable-watchdog", daemon=True).start()
    with os.fdopen(requests, "rb") as incoming:
        for line in incoming:
            deadline, _, payload = line.rstrip(b"\n").partition(b" ")
            watchdog.deadline = float(deadline)
            # A kernel timer as well: SIGALRM's default action ends this process even while
            # the call holds the GIL (busy in C code), when the watchdog thread cannot run.
            signal.setitimer(
                signal.ITIMER_REAL,
                max(float(deadline) - _clock() + 2 * _WATCHDOG_LAG_SECONDS, 0.001),
            )
            try:
                handler(payload)
                outcome: dict[str, Any] = {"ok": True}
            except BaseException as exc:
                outcome = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}"[:2000],
                    "details": traceback.format_exc()[-16000:],
                }
            signal.setitimer(signal.ITIMER_REAL, 0)
            watchdog.deadline = None
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            view = memoryview((json.dumps(outcome, default=str) + "\n").encode())
            while view:
                view = view[os.write(reports, view) :]
    os._exit(0)  # the parent closed its end: it is gone or done with this process
