"""The CrewAI adapter's tests. CrewAI cannot be installed next to the test extra (it pins
mcp 1.x), so these run in a side environment that tests/test_adapters_crewai.py builds and
runs them in; where CrewAI is not installed they are not collected."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

if importlib.util.find_spec("crewai") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    # Set before the flows module is imported (its @persist names its file then); workers
    # started by the tests inherit them. CrewAI's telemetry and tracing would try the
    # network, which the tests do not use.
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    os.environ.setdefault(
        "CREWAI_TEST_FLOW_DB", str(Path(tempfile.mkdtemp(prefix="handoff-crewai-")) / "flows.db")
    )
