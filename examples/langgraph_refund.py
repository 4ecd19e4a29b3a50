"""LangGraph example: a support graph that asks a person before it refunds.

The graph interrupts in ``review``; the adapter turns the interrupt into an approval
handoff, and a `handoff worker` resumes the thread once it is decided (the result is
reported back to this script). Run it against `handoff dev` from the repository root:

    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running       # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.langgraph_refund

Decide in the workbench, with `handoff decide`, or pass ``--auto``. The checkpoints live
in one SQLite file that this script and the dev worker share (``EXAMPLE_CHECKPOINTS``).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from examples._common import CHANNEL, report, run_and_wait
from worker.adapters.langgraph import GraphOutcome, LangGraphHandoffs
from worker.client import Handoffs

EXAMPLE = "langgraph"


class Ticket(TypedDict, total=False):
    order_id: str
    amount_usd: int
    outcome: str


def review(ticket: Ticket) -> Ticket:
    # Pauses the run; resumes with {"type": "approve" | "edit" | "reject", ...}.
    decision = interrupt(
        {
            "action": "issue_refund",
            "args": {"order_id": ticket["order_id"], "amount_usd": ticket["amount_usd"]},
            "description": "The customer was charged twice.",
        }
    )
    if decision["type"] == "reject":
        return {"outcome": f"not refunded: {decision['message']}"}
    args = decision["args"]  # the reviewer's edits, if any
    return {"outcome": f"refunded {args['amount_usd']} USD on {args['order_id']}"}


def build_graph() -> Any:
    """The compiled graph, with a checkpointer the agent and the worker share."""
    default = Path(tempfile.gettempdir()) / "slack-handoff-examples" / "langgraph.sqlite"
    path = Path(os.environ.get("EXAMPLE_CHECKPOINTS", default))
    path.parent.mkdir(parents=True, exist_ok=True)
    builder = StateGraph(Ticket)
    builder.add_node("review", review)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    conn = sqlite3.connect(path, check_same_thread=False)
    return builder.compile(checkpointer=SqliteSaver(conn))


def on_finish(values: dict[str, Any], *, thread_id: str, run_id: str) -> None:
    """Called in the worker when the thread completes."""
    report(EXAMPLE, run_id, values["outcome"])


def start(handoffs: Handoffs, run_id: str) -> GraphOutcome:
    """Run the graph until it asks for the refund approval."""
    adapter = LangGraphHandoffs(
        handoffs,
        graph="examples.langgraph_refund:build_graph",
        channel=CHANNEL,
        agent_name="langgraph-support-example",
        on_finish="examples.langgraph_refund:on_finish",
    )
    return adapter.start({"order_id": "A-1001", "amount_usd": 30}, thread_id=run_id, run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    """Start a run, let a person (or ``--auto``) decide, print what the run did."""
    return run_and_wait(EXAMPLE, __doc__.split("\n\n")[0], start, argv)


if __name__ == "__main__":
    raise SystemExit(main())
