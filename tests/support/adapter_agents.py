"""Real OpenAI Agents SDK agents for the adapter tests, with a scripted model (no network)
so the same run gives the same steps in the test process and in a worker. Tools record
each run in the Redis list ``TOOL_RUNS`` at ``REDIS_URL``."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Agent,
    ModelResponse,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from redis import Redis

from tests.support.adapter_runs import env_redis, record, recorded
from worker.adapters.openai_agents import approval_tool, ask_human_tool

set_tracing_disabled(True)  # nothing leaves the machine

TOOL_RUNS = "test:oa:tool_runs"
FINISHED = "test:oa:finished"
HANG_ONCE = "test:oa:hang_once"
"""While this key exists, the model hangs the first time it reads tool results."""
HUNG = "test:oa:hung"
"""Set to "<pid> <parent pid>" of the process hanging in the model (an RQ work horse)."""


def tool_runs(redis: Redis) -> list[dict[str, Any]]:
    """Every tool run recorded so far, oldest first."""
    return recorded(redis, TOOL_RUNS)


def record_finish(final_output: Any, *, run_id: str) -> None:
    """``on_finish`` target: note the finished run and its output."""
    record(FINISHED, {"run_id": run_id, "output": final_output})


Call = tuple[str, dict[str, Any], str]


class ScriptedModel(Model):
    """Calls the scripted tools turn by turn (the next turn once every result of the
    previous one is in); after the last turn, answers with all results joined by `` | ``.
    Decides from its input alone, so any process replays it the same way."""

    def __init__(self, *turns: list[Call]) -> None:
        self.turns = turns

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        results = [
            item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        answered = 0
        for turn in self.turns:
            if len(results) == answered:
                output = [function_call(name, args, call_id=cid) for name, args, cid in turn]
                return ModelResponse(output=output, usage=Usage(), response_id=None)
            answered += len(turn)
        redis = env_redis()
        if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
            time.sleep(120)  # the test kills the worker meanwhile
        text = " | ".join(str(result) for result in results)
        return ModelResponse(output=[assistant_message(text)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


@approval_tool
def refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order.

    Args:
        order_id: The order to refund.
        amount_usd: How much to refund, in US dollars.
    """
    record(TOOL_RUNS, {"tool": "refund", "args": [order_id, amount_usd]})
    return f"refunded {amount_usd} USD on {order_id}"


@function_tool(needs_approval=True)
def plain_refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order (a plain SDK tool: approve or reject only)."""
    record(TOOL_RUNS, {"tool": "plain_refund", "args": [order_id, amount_usd]})
    return f"refunded {amount_usd} USD on {order_id}"


TWO_REFUNDS = [
    ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ("refund", {"order_id": "B-2", "amount_usd": 5}, "call_b2"),
]


def build_refund_agent() -> Agent[Any]:
    """An agent that asks to refund two orders at once (editable approvals)."""
    return Agent(name="support", tools=[refund], model=ScriptedModel(TWO_REFUNDS))


def build_two_step_agent() -> Agent[Any]:
    """An agent that refunds A-1, and only once that is done asks to refund B-2."""
    return Agent(
        name="support-steps",
        tools=[refund],
        model=ScriptedModel([TWO_REFUNDS[0]], [TWO_REFUNDS[1]]),
    )


def build_plain_agent() -> Agent[Any]:
    """An agent whose refund tool is a plain ``function_tool(needs_approval=True)``."""
    calls = [("plain_refund", {"order_id": "A-1", "amount_usd": 30}, "call_p1")]
    return Agent(name="support-plain", tools=[plain_refund], model=ScriptedModel(calls))


def build_question_agent() -> Agent[Any]:
    """An agent that asks a person which card to refund to, and refunds at once."""
    calls = [
        ("ask_human", {"question": "Which card?", "choices": ["Visa", "Amex"]}, "call_q"),
        ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ]
    return Agent(
        name="support-questions",
        tools=[ask_human_tool(), refund],
        model=ScriptedModel(calls),
    )
