"""Microsoft Agent Framework example: an agent asks which card to refund to, and needs approval.

The agent calls ``ask_human`` (a declaration-only tool: a question handoff) and
``issue_refund`` (``approval_mode="always_require"``: an approval the reviewer may edit) in
one turn; once both are decided, a `handoff worker` continues the run from its stored
``AgentSession`` and reports the final text to this script. Run it against `handoff dev`
from the repository root:

    PYTHONPATH=$PWD .venv/bin/handoff dev --keep-running       # terminal 1; prints REDIS_URL
    REDIS_URL=redis://... PYTHONPATH=$PWD .venv/bin/python -m examples.agent_framework_refund

It needs no model provider: ``OfflineChatClient`` stands in for the LLM. With one, build
the agent with e.g. ``OpenAIChatClient()`` (``agent-framework-openai``) instead, in the
worker's environment too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from examples._common import CHANNEL, report, run_and_wait
from worker.adapters.agent_framework import AgentFrameworkHandoffs, AgentOutcome, ask_human_tool
from worker.client import Handoffs

EXAMPLE = "agent-framework"


@tool(approval_mode="always_require")
def issue_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order to the customer's card."""
    return f"refunded {amount_usd} USD on {order_id}"


class OfflineChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """Plays the LLM: asks and refunds on the first turn, then sums up the tool results."""

    async def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> ChatResponse[Any]:
        results = [c.result for m in messages for c in m.contents if c.type == "function_result"]
        if results:
            text = "Done: " + "; ".join(map(str, results))
            return ChatResponse(messages=[Message(role="assistant", contents=[text])])
        question = {"question": "Which card should get the refund?"}
        refund = {"order_id": "A-1001", "amount_usd": 30}
        calls = [
            Content.from_function_call(call_id="call_card", name="ask_human", arguments=question),
            Content.from_function_call(
                call_id="call_refund", name="issue_refund", arguments=refund
            ),
        ]
        return ChatResponse(messages=[Message(role="assistant", contents=calls)])


def build_agent() -> Agent[Any]:
    """The agent (the script and the worker both build it)."""
    return Agent(
        OfflineChatClient(),
        instructions="Refund double charges; ask a person what you cannot know.",
        name="support",
        tools=[ask_human_tool(), issue_refund],
    )


def on_finish(final_output: str | None, *, run_id: str) -> None:
    """Called in the worker when the run completes."""
    report(EXAMPLE, run_id, final_output)


def start(handoffs: Handoffs, run_id: str) -> AgentOutcome:
    """Run the agent until it stops for the question and the approval."""
    adapter = AgentFrameworkHandoffs(
        handoffs,
        agent="examples.agent_framework_refund:build_agent",
        channel=CHANNEL,
        agent_name="agent-framework-example",
        on_finish="examples.agent_framework_refund:on_finish",
    )
    return adapter.run_sync("Dana Lee was charged twice for order A-1001.", run_id=run_id)


def main(argv: list[str] | None = None) -> int:
    """Start a run, let a person (or ``--auto``) decide, print what the run did."""
    return run_and_wait(EXAMPLE, __doc__.split("\n\n")[0], start, argv)


if __name__ == "__main__":
    raise SystemExit(main())
