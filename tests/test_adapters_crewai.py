"""The CrewAI adapter's tests, run in their side environment.

CrewAI pins ``mcp~=1.26`` and the test extra needs ``mcp>=2.3`` (the ``mcp`` extra), so
CrewAI cannot be installed here. ``tests/crewai`` (real CrewAI flows and crews, real
`handoff worker` processes, scripted models: no network, no keys) runs in ``.venv-crewai``,
built and kept by ``tests.support.side_env``, as a pytest of its own on this test's Redis
database. Its output is shown when it fails; without a reachable package registry to
build the side environment from, this test is skipped with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import ROOT
from tests.support import side_env
from tests.support.side_env import SideEnvUnavailable, ensure_side_env

RUN_TIMEOUT_SECONDS = 720
"""The side run takes one to three minutes (most of it workers importing CrewAI); more
on a loaded machine."""

# pytest's closing line when every test passed: "12 passed, 39 warnings in 80.12s".
ALL_PASSED = re.compile(r"^=*\s*(?P<passed>\d+) passed(, \d+ warnings?)? in [\d.]+s")

# Variables of this run that must not reach the side run: xdist's (its conftest would
# take another database), and this environment's own.
_NOT_PASSED = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS")


@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 180)
def test_crewai_adapter_tests_pass_in_their_side_environment(
    redis_url: str, tmp_path: Path
) -> None:
    try:
        side = ensure_side_env()
    except SideEnvUnavailable as exc:
        pytest.skip(str(exc))
    print(f"side environment: {side.how}")
    env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED}
    env.pop("VIRTUAL_ENV", None)
    database = urlparse(redis_url).path.strip("/") or "0"
    env |= {"REDIS_URL": redis_url, "HANDOFF_TEST_REDIS_DB": database}
    command = [str(side.python), "-m", "pytest", "tests/crewai"]
    # The project's addopts run xdist, which the side environment does not have.
    command += ["-o", "addopts=", "-p", "no:cacheprovider", "-v", "-ra"]

    finished = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )

    output = finished.stdout + finished.stderr
    (tmp_path / "side-run.log").write_text(output)
    # The failures and the summary: what pytest prints from "FAILURES" on.
    start = max(output.find("= FAILURES ="), output.find("= ERRORS ="), 0)
    shown = (
        f"{' '.join(command)} ({side.how}) exited {finished.returncode}; whole output in "
        f"{tmp_path / 'side-run.log'}:\n{output[start:][-20000:]}"
    )
    assert finished.returncode == 0, shown
    lines = finished.stdout.splitlines()
    closing = [line for line in lines if ALL_PASSED.match(line)]
    assert closing, f"no 'N passed' closing line (a test skipped or failed?):\n{shown}"
    # Every module of tests/crewai ran (one CrewAI could not import would pass silently).
    passed = {line.split("::")[0] for line in lines if line.rstrip().endswith("PASSED")}
    passed |= {line.split("::")[0] for line in lines if " PASSED " in line}
    modules = {f"tests/crewai/{p.name}" for p in (ROOT / "tests" / "crewai").glob("test_*.py")}
    assert passed == modules, f"modules with passed tests: {sorted(passed)}\n{shown}"
    print(closing[-1].strip("= "))


def test_a_build_that_cannot_reach_the_registry_skips_and_any_other_failure_fails() -> None:
    unreachable = "error: Request failed: error sending request for url (.../simple/crewai/)"
    with pytest.raises(SideEnvUnavailable, match="the package registry is unreachable"):
        side_env._run([sys.executable, "-c", f"import sys; print({unreachable!r}); sys.exit(2)"])
    with pytest.raises(AssertionError, match=r"No solution found: crewai needs mcp~=1\.26"):
        side_env._run(
            [
                sys.executable,
                "-c",
                "import sys; sys.exit('No solution found: crewai needs mcp~=1.26')",
            ]
        )
