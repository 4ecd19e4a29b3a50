"""CrewAI example: a Flow asks which card to refund to, then needs the refund approved.

Two ``@human_feedback`` steps with a ``SlackFeedbackProvider``: a question (no ``emit``: the
answer is the feedback), then an approval of the proposed refund (``emit=["approved",
"rejected"]``: the reviewer may edit its fields). The flow pauses at each (CrewAI's
``HumanFeedbackPending``); a `handoff worker` restores it from CrewAI's persistence and
resumes it with the decision, and reports the result to this script. Run it against
`handoff dev` from the repository root, in an environment with the ``crewai`` extra (it
cannot share one with the ``mcp`` extra: CrewAI pins mcp 1.x):

    PYTHONPATH=$PWD .venv-crewai/bin/handoff dev --keep-running     # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv-crewai/bin/python -m examples.crewai_refund

It needs no model: a click's outcome is known, so CrewAI's LLM is never asked to map the
feedback to an outcome (``llm=`` is still required by ``@human_feedback`` with ``emit``).
"""

from __future__ import annotations

import argparse
import os
import time

# Set before CrewAI is imported: the example needs no network.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai.flow import Flow, human_feedback, listen, start
from pydantic import BaseModel

from examples._common import CHANNEL, decide_all, explain, report, wait_for_result
from worker.adapters.crewai import SlackFeedbackProvider
from worker.client import Handoffs

EXAMPLE = "crewai"

slack = SlackFeedbackProvider(channel=CHANNEL, agent_name="crewai-example")


class Refund(BaseModel):
    """What the flow proposes (the reviewer may edit it)."""

    order_id: str
    amount_usd: int
    card: str


class RefundState(BaseModel):
    id: str = ""
    order_id: str = "A-1001"
    amount_usd: int = 30


class RefundFlow(Flow[RefundState]):
    """Asks for the card, proposes the refund, refunds as approved."""

    @start()
    @human_feedback(message="Which card should get the refund?", provider=slack)
    def ask_card(self) -> str:
        return f"Dana Lee was charged twice for order {self.state.order_id}."

    @listen(ask_card)
    @human_feedback(
        message="Refund this double charge?",
        emit=["approved", "rejected"],
        llm="gpt-4o-mini",
        provider=slack,
    )
    def propose(self) -> Refund:
        card = self.last_human_feedback.feedback if self.last_human_feedback else ""
        return Refund(order_id=self.state.order_id, amount_usd=self.state.amount_usd, card=card)

    @listen("approved")
    def refund(self) -> str:
        feedback = self.last_human_feedback
        assert feedback is not None
        refund = Refund.model_validate(feedback.output)  # as approved, maybe edited
        said = f"refunded {refund.amount_usd} USD on {refund.order_id} to {refund.card}"
        report(EXAMPLE, self.flow_id, said)
        return said

    @listen("rejected")
    def decline(self) -> str:
        feedback = self.last_human_feedback
        said = f"not refunded: {feedback.feedback if feedback else ''}"
        report(EXAMPLE, self.flow_id, said)
        return said


def start_flow() -> str:
    """Kick the flow off until its first question; its flow id (the handoffs' run id)."""
    pending = RefundFlow().kickoff()
    return str(pending.context.flow_id)  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    """Start the flow, let a person (or ``--auto``) decide, print what the flow did."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--auto", action="store_true", help="decide from this script")
    args = parser.parse_args(argv)
    handoffs = Handoffs.from_env()
    flow_id = start_flow()
    print(f"Flow {flow_id} waits for a person (one question, then an approval).")
    if not args.auto:
        print(explain(handoffs.list_pending(run_id=flow_id).items))
    deadline = time.monotonic() + 600
    result = None
    while result is None and time.monotonic() < deadline:
        if args.auto:  # the approval appears once the worker resumed the flow
            decide_all(handoffs, handoffs.list_pending(run_id=flow_id).items)
        result = wait_for_result(handoffs, EXAMPLE, flow_id, timeout=0.5)
    print(f"The worker resumed the flow: {result}" if result else "No result yet; is a worker up?")
    return 0 if result else 1


if __name__ == "__main__":
    # Run as examples.crewai_refund, not __main__: the worker finds the flow's class by its
    # module (the adapter refuses classes of __main__, which no worker can import).
    from examples import crewai_refund

    raise SystemExit(crewai_refund.main())
