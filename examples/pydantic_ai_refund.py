"""Pydantic AI example: an agent asks which card to refund to, and needs approval.

The agent calls ``ask_human`` (a question handoff) and ``issue_refund`` (a tool with
``requires_approval=True``: an approval the reviewer may edit) in one turn; the run ends
with ``DeferredToolRequests``. Once both are decided, a `handoff worker` continues the run
from its stored message history with ``DeferredToolResults`` and reports the output to this
script. Run it against `handoff dev` from the repository root:

    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running       # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.pydantic_ai_refund

It needs no model provider: a ``FunctionModel`` plays the LLM. With a key, build the agent
with a model name instead (``Agent("openai:gpt-5.2", ...)``, in the worker's environment too).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples._common import CHANNEL, report, run_and_wait
from worker.adapters.pydantic_ai import (
    AgentOutcome,
    HandoffCapability,
    PydanticAIHandoffs,
    ask_human_tool,
)
from worker.client import Handoffs

EXAMPLE = "pydantic-ai"


def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the LLM: asks and refunds on the first turn, then sums up the tool results."""
    results = [
        part.model_response_str()
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, ToolReturnPart)
    ]
    if results:
        return ModelResponse(parts=[TextPart("Done: " + "; ".join(results))])
    return ModelResponse(
        parts=[
            ToolCallPart(
                "ask_human", {"question": "Which card should get the refund?"}, "call_card"
            ),
            ToolCallPart("issue_refund", {"order_id": "A-1001", "amount_usd": 30}, "call_refund"),
        ]
    )


def build_agent() -> Agent[None, str | DeferredToolRequests]:
    """The agent (the script and the worker both build it)."""
    agent = Agent(
        FunctionModel(offline_model),
        name="support",
        instructions="Refund double charges; ask a person what you cannot know.",
        output_type=[str, DeferredToolRequests],
        tools=[ask_human_tool()],
        capabilities=[HandoffCapability()],  # optional: spares the adapter adding one per run
    )

    @agent.tool_plain(requires_approval=True)
    def issue_refund(order_id: str, amount_usd: int) -> str:
        """Refund part of an order to the customer's card.

        Args:
            order_id: The order to refund.
            amount_usd: How much, in US dollars.
        """
        return f"refunded {amount_usd} USD on {order_id}"

    return agent


def on_finish(output: Any, *, run_id: str) -> None:
    """Called in the worker when the run completes."""
    report(EXAMPLE, run_id, output)


def start(handoffs: Handoffs, run_id: str) -> AgentOutcome:
    """Run the agent until it stops for the question and the approval."""
    adapter = PydanticAIHandoffs(
        handoffs,
        agent="examples.pydantic_ai_refund:build_agent",
        channel=CHANNEL,
        agent_name="pydantic-ai-example",
        on_finish="examples.pydantic_ai_refund:on_finish",
    )
    return adapter.run_sync("Dana Lee was charged twice for order A-1001.", run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    """Start a run, let a person (or ``--auto``) decide, print what the run did."""
    return run_and_wait(EXAMPLE, __doc__.split("\n\n")[0], start, argv)


if __name__ == "__main__":
    raise SystemExit(main())
