"""What the examples share: the dev channel, the dev reviewer, and waiting for a result."""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from redis import Redis

from store.models import Handoff, RequestType
from worker.client import Handoffs

CHANNEL = os.environ.get("HANDOFF_CHANNEL", "C0DEVAPPROVALS")
"""Where the examples post: `handoff dev`'s channel unless HANDOFF_CHANNEL says otherwise."""

REVIEWER = "U0DEVREVIEWER"
"""The reviewer `handoff dev` signs you in as; `--auto` decides as them."""


def results_key(example: str, run_id: str) -> str:
    """The Redis list where a finished run of an example reports its result."""
    return f"examples:{example}:{run_id}"


def report(example: str, run_id: str, result: Any) -> None:
    """Called in the worker when a run finishes: hand the result to the waiting script."""
    Redis.from_url(os.environ["REDIS_URL"]).rpush(
        results_key(example, run_id), json.dumps(result, default=str)
    )


def wait_for_result(handoffs: Handoffs, example: str, run_id: str, timeout: float) -> Any:
    """Block until the worker reports the run finished; None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        # Short blocking reads: redis-py's default socket timeout is 5 s.
        item = handoffs.redis.blpop([results_key(example, run_id)], timeout=min(left, 4))
        if item:
            return json.loads(item[1])
    return None


def explain(pending: list[Handoff]) -> str:
    """How to decide the example's handoffs by hand."""
    lines = ["Decide in the workbench `handoff dev` printed, or from a shell:"]
    for handoff in pending:
        if handoff.request_type is RequestType.QUESTION:
            choice = "--answer 'Visa ending 4242'"
            lines.append(f"    handoff decide {handoff.id} answered {choice} --by {REVIEWER}")
        else:
            lines.append(f"    handoff decide {handoff.id} approved --by {REVIEWER}")
    return "\n".join(lines)


class Outcome(Protocol):
    """What an adapter's run returns (``GraphOutcome``, ``AgentOutcome``)."""

    @property
    def status(self) -> str: ...

    @property
    def handoffs(self) -> list[Handoff]: ...


def run_and_wait(
    example: str, summary: str, start: Callable[[Handoffs, str], Outcome], argv: list[str] | None
) -> int:
    """An example's ``main``: start a run, let a person (or ``--auto``) decide, then print
    what the worker reports when it has resumed the run."""
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("--auto", action="store_true", help="decide from this script")
    args = parser.parse_args(argv)
    handoffs = Handoffs.from_env()
    run_id = f"{example}-example-{uuid.uuid4().hex[:8]}"
    outcome = start(handoffs, run_id)
    print(f"Run {run_id} is {outcome.status}: {len(outcome.handoffs)} handoff(s).")
    if args.auto:
        decide_all(handoffs, outcome.handoffs)
    else:
        print(explain(outcome.handoffs))
    result = wait_for_result(handoffs, example, run_id, timeout=600)
    print(f"The worker resumed the run: {result}" if result else "No result yet; is a worker up?")
    return 0 if result else 1


def decide_all(handoffs: Handoffs, pending: list[Handoff]) -> None:
    """``--auto``: approve the approvals and answer the questions, as the dev reviewer."""
    for handoff in pending:
        if handoff.request_type is RequestType.QUESTION:
            handoffs.decide(handoff.id, "answered", by=REVIEWER, answer="Visa ending 4242")
        else:
            handoffs.decide(handoff.id, "approved", by=REVIEWER)
