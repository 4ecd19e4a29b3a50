"""Plain Python example: a tool that waits for approval, and a clarifying question.

No framework and no worker needed: the calls block until a person decides (the decision
is pushed over Redis). Run it against `handoff dev`:

    .venv/bin/handoff dev --keep-running                        # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... .venv/bin/python -m examples.plain_python_refund

Decide in the workbench or with `handoff decide` (the ids are printed), or pass ``--auto``.
For a durable call that a worker makes later, use ``issue_refund.submit(...)`` instead.
"""

from __future__ import annotations

import argparse
import threading
import time

from examples._common import CHANNEL, decide_all, explain
from worker import ask_human, require_approval
from worker.adapters.decorators import handoff_run
from worker.client import Handoffs


@require_approval(handoffs=Handoffs.from_env, channel=CHANNEL, on_reject="message")
def issue_refund(order_id: str, amount_usd: int, reason: str = "charged twice") -> str:
    """Refund part of an order."""
    return f"refunded {amount_usd} USD on {order_id} ({reason})"


def decide_for_the_reviewer(handoffs: Handoffs, count: int) -> threading.Thread:
    """``--auto``: a thread that plays the reviewer for the next ``count`` handoffs."""

    def play() -> None:
        decided: set[str] = set()
        while len(decided) < count:
            pending = [
                h for h in handoffs.list_pending(channel=CHANNEL).items if h.id not in decided
            ]
            decide_all(handoffs, pending)
            decided.update(h.id for h in pending)
            time.sleep(0.05)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    """Ask a question, then refund once approved; print both outcomes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto", action="store_true", help="decide from this script")
    args = parser.parse_args(argv)
    handoffs = Handoffs.from_env()
    if args.auto:
        decide_for_the_reviewer(handoffs, count=2)
    else:
        threading.Thread(target=_print_pending, args=(handoffs,), daemon=True).start()
    with handoff_run("plain-example"):
        card = ask_human("Which card should get the refund?", handoffs=handoffs, channel=CHANNEL)
        print(f"Answer: {card}")
        print(issue_refund("A-1001", 30, reason=f"charged twice; to {card}"))
    return 0


def _print_pending(handoffs: Handoffs) -> None:
    shown: set[str] = set()
    while True:
        pending = [h for h in handoffs.list_pending(channel=CHANNEL).items if h.id not in shown]
        if pending:
            print(explain(pending))
            shown.update(h.id for h in pending)
        time.sleep(0.2)


if __name__ == "__main__":
    raise SystemExit(main())
