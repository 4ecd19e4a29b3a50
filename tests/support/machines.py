"""Killing a `handoff worker` as a machine dies: every process of it at the same moment.

A worker runs in a session of its own (its process group holds the RQ worker and the
dispatcher), but RQ forks each work horse into a process group of its own, so killing the
group alone would leave a horse running its job. ``kill_machine`` freezes the group first
(no new horse can be forked), then SIGKILLs every descendant and the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def kill_machine(process: subprocess.Popen[bytes]) -> list[int]:
    """SIGKILL ``process`` (started with ``start_new_session``), its group and every process
    it started, wherever they are; returns the pids killed outside its group (work horses)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGSTOP)
    strays = work_horses(process)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    return strays


def work_horses(process: subprocess.Popen[bytes]) -> list[int]:
    """The processes below ``process`` outside its process group: RQ's work horses, each
    running a job (so a worker that has one is busy)."""
    return [pid for pid in descendants(process.pid) if _group_of(pid) not in (process.pid, None)]


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, their children...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def dispatcher_connected(process: subprocess.Popen[bytes], redis_port: int) -> bool:
    """True once the dispatcher that `handoff worker` forks has a connection open to Redis:
    it is running its loop. The dispatcher is the worker's first child and stays in its
    process group (RQ's work horses get groups of their own); RQ's scheduler, forked
    later, is the only other such child, and exists only once the dispatcher does."""
    group = _group_of(process.pid)
    children = [
        pid
        for pid in descendants(process.pid)
        if _parent_of(pid) == process.pid and _group_of(pid) == group
    ]
    return any(_connected(pid, redis_port) for pid in sorted(children)[:1])


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _connected(pid: int, port: int) -> bool:
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                sockets.add(link[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[9] in sockets and remote_port == port and fields[3] == _ESTABLISHED:
                    return True
    return False


_ESTABLISHED = "01"
