"""``handoff mcp``: a Model Context Protocol server (the official ``mcp`` SDK) whose tools
hand work to people through a ``handoff api`` by URL and key, so an agent host's machine
never needs Redis. ``server`` builds it; the CLI runs it over stdio.

The SDK is the ``mcp`` extra (``pip install 'slack-handoff[mcp]'``), not a core dependency:
agent frameworks pin other major versions of it (CrewAI pins mcp 1.x), and an agent process
that imports our client must be able to install next to them. Without it, ``handoff mcp``
and ``/mcp`` on ``handoff api`` say how to install it; an older major (CrewAI's mcp 1.x)
counts as not installed, so ``handoff api`` and ``handoff dev`` still start next to CrewAI.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

MINIMUM_VERSION = (2, 3)
"""The mcp SDK the server is written for: the mcp extra's ``mcp>=2.3``."""

NOT_INSTALLED = (
    "the MCP server needs the mcp extra (mcp >= 2.3), which is not installed here: "
    "pip install 'slack-handoff[mcp]' (in an environment without CrewAI, which pins mcp 1.x)"
)
"""What ``handoff mcp`` and ``/mcp`` answer without the SDK."""


def installed() -> bool:
    """Whether the ``mcp`` SDK of the extra can be imported (checked without importing it):
    an older one, such as the mcp 1.x CrewAI pins, does not count."""
    if importlib.util.find_spec("mcp") is None:
        return False
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:  # importable without metadata: a checkout
        return True
    release = re.match(r"(\d+)\.(\d+)", version)
    return release is not None and (int(release[1]), int(release[2])) >= MINIMUM_VERSION
