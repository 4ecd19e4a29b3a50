"""The README's first example ("First approval") runs unchanged against `handoff dev`, as a
reader runs it: `handoff dev` in one terminal, the script in another with `.handoff-dev/env`
sourced, and the approval clicked in the workbench as the dev reviewer."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.dev.run import DEV_REVIEWER
from tests.conftest import ROOT
from tests.support.dev import (
    DevRun,
    click_approve_as_the_reviewer,
    running_dev,
    second_terminal_env,
)


def first_python_block(readme: str) -> str:
    """The first ```python block of the README's "First approval" section, as written."""
    section = readme[readme.index("\n## First approval\n") :]
    found = re.search(r"^```python\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert found, "no python block in the README's First approval section"
    assert readme.index(found[1]) == readme.index("```python\n") + len("```python\n"), (
        "the First approval block is no longer the README's first python block"
    )
    return found[1]


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevRun]:
    with running_dev(tmp_path) as run:
        yield run


def test_the_first_approval_example_runs_unchanged_against_handoff_dev(
    dev: DevRun, tmp_path: Path
) -> None:
    example = first_python_block((ROOT / "README.md").read_text())
    script = tmp_path / "first_approval.py"
    script.write_text(example)
    standin, token = dev.wait_ready()
    env_file = dev.data / "env"
    assert env_file.stat().st_mode & 0o777 == 0o600

    # The second terminal: nothing of this test's Redis or settings, only the sourced file.
    env = second_terminal_env(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    # As the README says to run it: set -a && . .handoff-dev/env && set +a && python ...
    shell = 'set -a && . "$1" && set +a && exec "$2" first_approval.py'
    agent = subprocess.Popen(
        ["bash", "-c", shell, "-", str(env_file), sys.executable],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        first = agent.stdout.readline()
        waiting = re.match(r"Waiting for a person to decide (ho_\w+) \.\.\.$", first)
        assert waiting, first + (agent.stderr.read() if agent.poll() is not None else "")

        click_approve_as_the_reviewer(standin, token, waiting[1])

        rest, errors = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=5)
    assert agent.returncode == 0, errors
    assert rest.strip() == f"approved by {DEV_REVIEWER.id}", rest + errors

    # Stopped, `handoff dev` takes its file along: it would point at a Redis that is gone.
    dev.process.send_signal(signal.SIGTERM)
    dev.process.wait(timeout=20)
    assert not env_file.exists(), dev.printed()
