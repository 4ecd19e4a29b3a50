"""Which processes a test's process started, read from /proc (Linux), and whether they are gone.

A process is named by its pid and its start time, so that a pid the kernel hands out again to
an unrelated process is not taken for a survivor; a zombie (exited, not yet reaped by whoever
adopted it) counts as gone.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    started: int
    """Start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    cmdline: str

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[2] == self.started and stat[1] != "Z"

    def kill(self) -> None:
        if self.alive():
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of ``pid``, or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name, in parentheses, may hold spaces and parentheses itself.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(pid: int) -> list[Proc]:
    """Every living process below ``pid``: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    stats = {}
    for other in _all_pids():
        stat = _stat(other)
        if stat is not None and stat[1] != "Z":
            stats[other] = stat
            children.setdefault(stat[0], []).append(other)
    found: list[Proc] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(Proc(child, stats[child][2], _cmdline(child)))
        todo.extend(children.get(child, []))
    return found


def processes_using(path: Path) -> list[Proc]:
    """Living processes whose working directory or an open file is under ``path``."""
    root = str(path.resolve())
    found = []
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is None or stat[1] == "Z":
            continue
        links = [f"/proc/{pid}/cwd"]
        with suppress(OSError):
            links += [f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
        for link in links:
            with suppress(OSError):
                if os.readlink(link).startswith(root):
                    found.append(Proc(pid, stat[2], _cmdline(pid)))
                    break
    return found


def wait_gone(procs: list[Proc], timeout: float) -> list[Proc]:
    """Wait up to ``timeout`` seconds for all of ``procs`` to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in procs if p.alive()]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)
