"""The CrewAI side environment: a virtualenv of its own (``.venv-crewai`` in the checkout,
git-ignored) with CrewAI and this project, where ``tests/crewai`` runs.

Why a side environment: CrewAI pins ``mcp~=1.26`` while the test extra needs the ``mcp``
extra (``mcp>=2.3``), so CrewAI cannot be installed next to it. The side environment has
the ``crewai-test`` extra instead (CrewAI, this project editable, pytest). It is built
with uv (``uv venv`` + ``uv pip install``: seconds from uv's cache), pip as the fallback,
and kept between runs: it is built again only when its inputs change (``pyproject.toml``,
the Python, the checkout's path), recorded in a stamp file written last.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

SIDE_ENV = ROOT / ".venv-crewai"
EXTRA = "crewai-test"
"""The extra of pyproject.toml the side environment installs."""
STAMP = SIDE_ENV / "slack-handoff-inputs.sha256"
"""Written when a build succeeded: the digest of the inputs it was built from."""

BUILD_TIMEOUT_SECONDS = 600
"""uv builds it cold in about 20 s here; pip, the fallback, takes minutes."""

# What uv and pip print when the package registry cannot be reached: then the CrewAI
# tests are skipped with the reason. Any other build failure fails the test.
_UNREACHABLE = (
    "error sending request",
    "dns error",
    "failed to lookup address",
    "tcp connect error",
    "Could not connect",
    "Connection refused",
    "Network is unreachable",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "(from versions: none)",
)


class SideEnvUnavailable(Exception):
    """The side environment cannot be built here: the package registry is unreachable."""


@dataclass(frozen=True)
class SideEnv:
    """A ready side environment."""

    python: Path
    how: str
    """"reused", or how it was built and in how long."""


def inputs_digest() -> str:
    """What the side environment is built from: a change rebuilds it."""
    digest = hashlib.sha256()
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(sys.version.encode())
    digest.update(str(ROOT).encode())
    return digest.hexdigest()


def side_python() -> Path:
    return SIDE_ENV / "bin" / "python"


def ensure_side_env() -> SideEnv:
    """The side environment, built if missing or stale. ``SideEnvUnavailable`` if the
    registry cannot be reached; ``AssertionError`` with the installer's output if the
    build fails otherwise."""
    with _lock():
        wanted = inputs_digest()
        if side_python().exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
            return SideEnv(side_python(), "reused")
        shutil.rmtree(SIDE_ENV, ignore_errors=True)
        started = time.monotonic()
        uv = _uv()
        requirement = f"{ROOT}[{EXTRA}]"
        if uv is not None:
            how = "uv"
            _run([uv, "venv", "--quiet", "--python", sys.executable, str(SIDE_ENV)])
            _run(
                [uv, "pip", "install", "--quiet", "--python", str(side_python()), "-e", requirement]
            )
        else:
            how = "pip"
            _run([sys.executable, "-m", "venv", str(SIDE_ENV)])
            _run([str(side_python()), "-m", "pip", "install", "--quiet", "-e", requirement])
        STAMP.write_text(wanted + "\n")
        return SideEnv(side_python(), f"built with {how} in {time.monotonic() - started:.0f} s")


def _uv() -> str | None:
    """uv's binary: the one the ``uv`` package of the test extra ships, or on PATH."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def _run(argv: list[str]) -> None:
    finished = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS
    )
    if finished.returncode == 0:
        return
    output = (finished.stdout + finished.stderr)[-4000:]
    if any(marker in output for marker in _UNREACHABLE):
        raise SideEnvUnavailable(
            f"cannot build {SIDE_ENV.name}: the package registry is unreachable ({argv[0]} "
            f"{argv[1]}: {output.strip().splitlines()[-1]})"
        )
    raise AssertionError(f"building {SIDE_ENV.name} failed: {' '.join(argv)}\n{output}")


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One build at a time in a checkout (two test runs of it may start together)."""
    with open(ROOT / ".venv-crewai.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
