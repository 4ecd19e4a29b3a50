"""Temporal example: a refund workflow asks which card to use and waits for an approval.

The workflow asks both at once (``ask_human`` and ``request_approval``: two handoffs made
by activities), waits durably for the decisions, which a `handoff worker` delivers as
Temporal Updates, then refunds as approved (with the reviewer's edits). This script runs
the Temporal worker of the workflow and starts it. Run it from the repository root:

    .venv/bin/temporal server start-dev --headless            # terminal 1 (localhost:7233)
    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running      # terminal 2; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.temporal_refund

Decide in the workbench, with `handoff decide`, or pass ``--auto``. With Temporal
elsewhere, set ``HANDOFF_TEMPORAL_ADDRESS`` for `handoff dev` (its worker delivers the
decisions) and for this script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

# Everything but Temporal and the standard library is imported passed through the
# workflow sandbox: the adapter's workflow helpers are deterministic and keep no state.
with workflow.unsafe.imports_passed_through():
    from examples._common import CHANNEL, decide_all, explain
    from worker.adapters.temporal import HandoffActivities, ask_human, request_approval
    from worker.client import Handoffs

TASK_QUEUE = "slack-handoff-example"
AGENT = "temporal-example"
DEFAULT_ADDRESS = os.environ.get("HANDOFF_TEMPORAL_ADDRESS", "localhost:7233")


@activity.defn
async def issue_refund(args: dict[str, Any]) -> str:
    """The side effect the approval guards."""
    return f"refunded {args['amount_usd']} USD on {args['order_id']}"


@workflow.defn
class RefundWorkflow:
    """Asks for the card and the approval together, then refunds as approved."""

    @workflow.run
    async def run(self, order_id: str) -> str:
        card, approval = await asyncio.gather(
            ask_human("Which card should get the refund?", channel=CHANNEL, agent_name=AGENT),
            request_approval(
                "issue_refund",
                {"order_id": order_id, "amount_usd": 30},
                description="Refund a double charge.",
                channel=CHANNEL,
                agent_name=AGENT,
            ),
        )
        if not approval.approved:
            return f"not refunded: {approval.message or approval.status}"
        refunded = await workflow.execute_activity(
            issue_refund, approval.args or {}, start_to_close_timeout=timedelta(seconds=30)
        )
        return f"{refunded} to {card.answer if card.answered else 'the original card'}"


async def run_example(address: str, *, auto: bool, timeout: float = 600) -> str | None:
    """Run the workflow's Temporal worker, start the workflow, print (or ``auto``: make)
    the decisions, and return the workflow's result (None if none within ``timeout``)."""
    handoffs = Handoffs.from_env()
    client = await Client.connect(address)
    activities = [*HandoffActivities(handoffs).all(), issue_refund]
    workflow_id = f"temporal-example-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=TASK_QUEUE, workflows=[RefundWorkflow], activities=activities
    ):
        handle = await client.start_workflow(
            RefundWorkflow.run, "A-1001", id=workflow_id, task_queue=TASK_QUEUE
        )
        try:
            async with asyncio.timeout(timeout):
                while len(pending := handoffs.list_pending(run_id=workflow_id).items) < 2:
                    await asyncio.sleep(0.1)
                print(f"Workflow {workflow_id} waits for {len(pending)} decisions.")
                if auto:
                    decide_all(handoffs, pending)
                else:
                    print(explain(pending))
                return str(await handle.result())
        except TimeoutError:
            return None


def main(argv: list[str] | None = None) -> int:
    """Start the workflow, let a person (or ``--auto``) decide, print what it did."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto", action="store_true", help="decide from this script")
    parser.add_argument("--temporal-address", default=DEFAULT_ADDRESS, help="host:port")
    args = parser.parse_args(argv)
    result = asyncio.run(run_example(args.temporal_address, auto=args.auto))
    print(f"The workflow finished: {result}" if result else "No result yet; is a worker up?")
    return 0 if result else 1


if __name__ == "__main__":
    raise SystemExit(main())
