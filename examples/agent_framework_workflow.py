"""Microsoft Agent Framework workflow example: a refund step asks a question and has a reply
proofread, with ``ctx.request_info``.

The step asks which card to refund to (a question, answered with a ``str``) and has its
reply to the customer corrected (a correction, answered with a ``HumanReply``). The
workflow is checkpointed to a folder this script and the dev worker share
(``EXAMPLE_AF_CHECKPOINTS``); once both are decided, a `handoff worker` resumes it from the
checkpoint with the responses and reports its output to this script. Run it against
`handoff dev` from the repository root:

    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running       # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.agent_framework_workflow
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)

from examples._common import CHANNEL, report, run_and_wait
from worker.adapters.agent_framework import (
    Correction,
    HumanReply,
    Question,
    WorkflowHandoffs,
    WorkflowOutcome,
)
from worker.client import Handoffs

EXAMPLE = "agent-framework-workflow"


def checkpoint_dir() -> Path:
    """The folder of the workflow's checkpoints, shared with the dev worker."""
    default = Path(tempfile.gettempdir()) / "slack-handoff-examples" / "agent-framework"
    return Path(os.environ.get("EXAMPLE_AF_CHECKPOINTS", default))


class RefundStep(Executor):
    """Asks for the card and the proofread reply at once; refunds once both are in."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        ctx.set_state("order", order)
        await ctx.request_info(Question(f"Which card should get the refund of {order}?"), str)
        draft = f"We refunded order {order}; it shows on your card in 3-5 days."
        await ctx.request_info(Correction(draft, "Check the tone before it goes out"), HumanReply)

    @response_handler
    async def on_card(self, asked: Question, card: str, ctx: WorkflowContext[Any, str]) -> None:
        ctx.set_state("card", card)
        await self._finish(ctx)

    @response_handler
    async def on_reply(
        self, asked: Correction, reply: HumanReply, ctx: WorkflowContext[Any, str]
    ) -> None:
        ctx.set_state("reply", reply.text if reply.accepted else "(no reply sent)")
        await self._finish(ctx)

    async def _finish(self, ctx: WorkflowContext[Any, str]) -> None:
        card, reply = ctx.get_state("card"), ctx.get_state("reply")
        if card is not None and reply is not None:
            await ctx.yield_output(f"refunded {ctx.get_state('order')} to {card}; sent: {reply}")


def build_workflow() -> Workflow:
    """A new workflow instance (the script and the worker each build their own)."""
    return WorkflowBuilder(start_executor=RefundStep(id="refund"), name="refund-flow").build()


def on_finish(outputs: list[Any], *, run_id: str) -> None:
    """Called in the worker when the workflow completes."""
    report(EXAMPLE, run_id, outputs[-1] if outputs else None)


def start(handoffs: Handoffs, run_id: str) -> WorkflowOutcome:
    """Run the workflow until it waits for the answer and the correction."""
    adapter = WorkflowHandoffs(
        handoffs,
        workflow="examples.agent_framework_workflow:build_workflow",
        checkpoint_dir=checkpoint_dir(),
        channel=CHANNEL,
        agent_name="agent-framework-workflow-example",
        on_finish="examples.agent_framework_workflow:on_finish",
    )
    return adapter.run_sync("A-1001", run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    """Start a run, let a person (or ``--auto``) decide, print what the run did."""
    return run_and_wait(EXAMPLE, __doc__.split("\n\n")[0], start, argv)


if __name__ == "__main__":
    raise SystemExit(main())
