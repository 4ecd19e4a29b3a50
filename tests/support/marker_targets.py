"""Resume targets outside the tests' HANDOFF_RESUME_MODULES: they leave marker files, so a
test proves they were never imported, or never called, by a worker that must refuse them.

Both markers go to the folder ``MARKER_DIR`` names, which only the worker under test has in
its environment: the test's own process imports this module (to create a handoff) without
leaving a trace.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from store.models import Handoff

MARKER_DIR = "HANDOFF_TEST_MARKER_DIR"
IMPORTED = "imported"
CALLED = "called"


def _mark(name: str) -> None:
    folder = os.environ.get(MARKER_DIR)
    if folder:
        (Path(folder) / name).write_text(str(os.getpid()))


_mark(IMPORTED)


def touch(handoff: Handoff) -> None:
    """What a forged handoff would run: here, only a file saying it ran."""
    _mark(CALLED)


def guarded(order_id: str, amount: int) -> None:
    """A function a forged ``require_approval`` call names."""
    _mark(CALLED)


class Spawner(subprocess.Popen):  # type: ignore[type-arg]
    """Defined here, but calling it runs ``Popen``'s constructor: a forged call must not."""


@functools.wraps(os.system)
def wrapped_system(command: str) -> int:
    """Defined here, but it claims to wrap ``os.system`` (a caller may unwrap and call it)."""
    return 0
