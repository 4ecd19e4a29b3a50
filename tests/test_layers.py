"""The import layers of docs/architecture.md, as import-linter contracts in pyproject.toml.

A module-level import that runs against the layers (the store importing the worker, the
worker importing the Slack app, the stand-in importing the product) fails here, so it
fails CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("bot", "handlers", "worker", "store")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first, so the packages under ``root`` are the ones analysed, not the
    # installed (editable) ones.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy_of_the_packages(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_every_layer_contract_is_kept() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "back_import", "contract"),
    [
        ("store/models.py", "import worker.client", "Layers"),
        ("worker/jobs.py", "import bot.config", "Agent code never imports the Slack app"),
        ("bot/mrkdwn.py", "import handlers.decisions", "Layers"),
        ("handlers/deps.py", "import bot.app", "Layers"),
        ("bot/standin/records.py", "import store.models", "stand-in imports nothing"),
    ],
)
def test_a_back_import_breaks_a_contract(
    tmp_path: Path, module: str, back_import: str, contract: str
) -> None:
    root = _copy_of_the_packages(tmp_path)
    target = root / module
    target.write_text(target.read_text() + f"\n{back_import}  # against the layers\n")

    result = _lint_imports(root)

    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert any(contract in line for line in broken), result.stdout
