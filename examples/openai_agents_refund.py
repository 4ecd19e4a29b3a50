"""OpenAI Agents SDK example: an agent asks which card to refund to, and needs approval.

The agent calls ``ask_human`` (a question handoff) and ``issue_refund`` (an approval the
reviewer may edit) in one turn; once both are decided, a `handoff worker` continues the
run from its stored ``RunState`` and reports the final output to this script. Run it
against `handoff dev` from the repository root:

    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running       # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.openai_agents_refund

It needs no OpenAI account: ``OfflineModel`` stands in for the LLM. With a key, use
``Agent(..., model="gpt-4.1-mini")`` instead (in the worker's environment too).
"""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelResponse, Usage, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

from examples._common import CHANNEL, report, run_and_wait
from worker.adapters.openai_agents import (
    AgentOutcome,
    OpenAIAgentsHandoffs,
    approval_tool,
    ask_human_tool,
)
from worker.client import Handoffs

EXAMPLE = "openai-agents"
set_tracing_disabled(True)  # the example sends nothing anywhere


@approval_tool
def issue_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order to the customer's card.

    Args:
        order_id: The order to refund.
        amount_usd: How much, in US dollars.
    """
    return f"refunded {amount_usd} USD on {order_id}"


class OfflineModel(Model):
    """Plays the LLM: asks and refunds on the first turn, then sums up the tool results."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        results = [i["output"] for i in items if i.get("type") == "function_call_output"]
        if results:
            output = [assistant_message("Done: " + "; ".join(map(str, results)))]
        else:
            question = {"question": "Which card should get the refund?", "choices": None}
            output = [
                function_call("ask_human", question, call_id="call_card"),
                function_call(
                    "issue_refund", {"order_id": "A-1001", "amount_usd": 30}, call_id="call_refund"
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def build_agent() -> Agent[Any]:
    """The agent (the script and the worker both build it)."""
    return Agent(
        name="support",
        instructions="Refund double charges; ask a person what you cannot know.",
        tools=[ask_human_tool(), issue_refund],
        model=OfflineModel(),
    )


def on_finish(final_output: Any, *, run_id: str) -> None:
    """Called in the worker when the run completes."""
    report(EXAMPLE, run_id, final_output)


def start(handoffs: Handoffs, run_id: str) -> AgentOutcome:
    """Run the agent until it stops for the question and the approval."""
    adapter = OpenAIAgentsHandoffs(
        handoffs,
        agent="examples.openai_agents_refund:build_agent",
        channel=CHANNEL,
        agent_name="openai-agents-example",
        on_finish="examples.openai_agents_refund:on_finish",
    )
    return adapter.run_sync("Dana Lee was charged twice for order A-1001.", run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    """Start a run, let a person (or ``--auto``) decide, print what the run did."""
    return run_and_wait(EXAMPLE, __doc__.split("\n\n")[0], start, argv)


if __name__ == "__main__":
    raise SystemExit(main())
