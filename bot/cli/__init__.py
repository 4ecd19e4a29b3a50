"""The ``handoff`` command line.

One module per concern: ``app`` holds the group, its global options and how expected
failures become one-line errors and exit codes (``exit_codes``); ``services`` runs the
processes (serve, worker, dispatcher, dev); ``handoffs`` reads and changes handoffs
(list, show, decide, claim, cancel, expire, reassign, retry, failed); ``reports`` holds
stats and the audit export; ``check`` is the doctor; ``policy`` checks and explains
routing policy files.
"""

from __future__ import annotations

from bot.cli import api, check, handoffs, mcp, policy, reports, services
from bot.cli.app import main

__all__ = ["api", "check", "handoffs", "main", "mcp", "policy", "reports", "services"]
