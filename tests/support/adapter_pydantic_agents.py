"""Real Pydantic AI agents for the adapter tests, with a scripted ``FunctionModel`` (no
network) so the same run gives the same steps in the test process and in a worker. Tools
record each run in the Redis list ``TOOL_RUNS`` at ``REDIS_URL``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    RunContext,
    Tool,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset
from redis import Redis

from tests.support.adapter_runs import env_redis, record, recorded
from worker.adapters.pydantic_ai import HandoffCapability, ask_human_tool

TOOL_RUNS = "test:pai:tool_runs"
FINISHED = "test:pai:finished"
HANG_ONCE = "test:pai:hang_once"
"""While this key exists, the model hangs the first time it reads tool results."""
HUNG = "test:pai:hung"
"""Set to "<pid> <parent pid>" of the process hanging in the model (an RQ work horse)."""

OUTPUT = [str, DeferredToolRequests]


def tool_runs(redis: Redis) -> list[dict[str, Any]]:
    """Every tool run recorded so far, oldest first."""
    return recorded(redis, TOOL_RUNS)


def record_finish(output: Any, *, run_id: str) -> None:
    """``on_finish`` target: note the finished run and its output."""
    record(FINISHED, {"run_id": run_id, "output": output})


Call = tuple[str, dict[str, Any], str]


def scripted(
    *turns: list[Call], on_results: Callable[[list[str]], None] | None = None
) -> FunctionModel:
    """A model that calls the scripted tools turn by turn (the next turn once every result
    of the previous one is in); after the last turn, answers with all results joined by
    `` | `` (or says there was nothing to do). Decides from the messages alone, so any
    process replays it the same way. ``on_results`` sees the results read at each turn
    first (a test's hook: it may raise, as a worker that dies there)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = [
            part.model_response_str()
            for message in messages
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)
        ]
        if on_results is not None:
            on_results(results)
        answered = 0
        for turn in turns:
            if len(results) == answered:
                calls = [ToolCallPart(name, args, tool_call_id=cid) for name, args, cid in turn]
                return ModelResponse(parts=list(calls))
            answered += len(turn)
        redis = env_redis()
        if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
            time.sleep(120)  # the test kills the worker meanwhile
        return ModelResponse(parts=[TextPart(" | ".join(results) or "Nothing to do.")])

    return FunctionModel(respond)


def refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order.

    Args:
        order_id: The order to refund.
        amount_usd: How much to refund, in US dollars.
    """
    record(TOOL_RUNS, {"tool": "refund", "args": [order_id, amount_usd]})
    return f"refunded {amount_usd} USD on {order_id}"


def lookup(order_id: str) -> str:
    """Look an order up (needs no approval)."""
    record(TOOL_RUNS, {"tool": "lookup", "args": [order_id]})
    return f"{order_id} found"


def large_refund(ctx: RunContext[Any], order_id: str, amount_usd: int) -> str:
    """Refund an order; more than 100 USD needs a person's approval."""
    if amount_usd > 100 and not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"reason": "over 100 USD"})
    record(TOOL_RUNS, {"tool": "large_refund", "args": [order_id, amount_usd]})
    return f"refunded {amount_usd} USD on {order_id}"


TWO_REFUNDS: list[Call] = [
    ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ("refund", {"order_id": "B-2", "amount_usd": 5}, "call_b2"),
]


def _agent(name: str, *turns: list[Call], **options: Any) -> Agent[Any, Any]:
    options.setdefault("output_type", OUTPUT)
    options.setdefault("tools", [Tool(refund, requires_approval=True)])
    return Agent(scripted(*turns), name=name, **options)


def build_refund_agent() -> Agent[Any, Any]:
    """An agent that asks to refund two orders at once."""
    return _agent("support", TWO_REFUNDS)


def build_refund_agent_with_capability() -> Agent[Any, Any]:
    """``build_refund_agent``'s agent built with the adapter's ``HandoffCapability``."""
    return _agent("support", TWO_REFUNDS, capabilities=[HandoffCapability()])


def build_two_step_agent() -> Agent[Any, Any]:
    """An agent that refunds A-1, and only once that is done asks to refund B-2."""
    return _agent("support-steps", [TWO_REFUNDS[0]], [TWO_REFUNDS[1]])


def build_two_step_agent_with_capability() -> Agent[Any, Any]:
    """``build_two_step_agent``'s agent built with the adapter's ``HandoffCapability``."""
    return _agent(
        "support-steps", [TWO_REFUNDS[0]], [TWO_REFUNDS[1]], capabilities=[HandoffCapability()]
    )


def build_question_agent() -> Agent[Any, Any]:
    """An agent that asks a person which card to refund to, looks the order up, and
    refunds at once."""
    calls: list[Call] = [
        ("ask_human", {"question": "Which card?", "choices": ["Visa", "Amex"]}, "call_q"),
        ("lookup", {"order_id": "A-1"}, "call_l"),
        ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ]
    tools = [ask_human_tool(), Tool(lookup), Tool(refund, requires_approval=True)]
    return _agent("support-questions", calls, tools=tools)


def build_conditional_agent() -> Agent[Any, Any]:
    """An agent whose tool asks for approval itself (``ApprovalRequired``) above 100 USD."""
    calls: list[Call] = [
        ("large_refund", {"order_id": "A-1", "amount_usd": 300}, "call_big"),
        ("large_refund", {"order_id": "B-2", "amount_usd": 20}, "call_small"),
    ]
    return _agent("support-conditional", calls, tools=[Tool(large_refund)])


SHIP = ToolDefinition(
    name="ship_replacement",
    description="Ship a replacement item; a person in the warehouse does it.",
    parameters_json_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
)


def build_external_agent() -> Agent[Any, Any]:
    """An agent with a tool that runs outside it (``ExternalToolset``)."""
    calls: list[Call] = [("ship_replacement", {"order_id": "A-1"}, "call_ship")]
    return _agent("support-external", calls, tools=[], toolsets=[ExternalToolset([SHIP])])


def build_same_id_agent() -> Agent[Any, Any]:
    """An agent whose model names its calls in two stops alike (as TestModel does)."""
    return _agent(
        "support-same-id",
        [("refund", {"order_id": "A-1", "amount_usd": 30}, "call_same")],
        [("refund", {"order_id": "B-2", "amount_usd": 5}, "call_same")],
    )


def build_testmodel_agent() -> Agent[Any, Any]:
    """An agent on Pydantic AI's ``TestModel``: it calls every tool once, with arguments
    it makes up, then answers with their results as JSON."""
    return Agent(
        TestModel(),
        name="support-testmodel",
        output_type=OUTPUT,
        tools=[Tool(refund, requires_approval=True)],
    )


def build_unstoppable_agent() -> Agent[Any, Any]:
    """An agent whose output type has no ``DeferredToolRequests``: it cannot stop."""
    return _agent("support-unstoppable", TWO_REFUNDS, output_type=str)


def build_chat_agent() -> Agent[Any, Any]:
    """An agent that calls no tool: it answers at once."""
    return _agent("support-chat")


@dataclass
class Shop:
    """A run's dependencies, built per run from its id."""

    run_id: str
    currency: str = "EUR"


def make_deps(*, run_id: str) -> Shop:
    """``deps`` factory: what the agent's tools depend on."""
    return Shop(run_id=run_id)


def refund_in_currency(ctx: RunContext[Shop], order_id: str, amount: int) -> str:
    """Refund in the shop's currency."""
    record(TOOL_RUNS, {"tool": "refund_in_currency", "args": [order_id, amount]})
    return f"refunded {amount} {ctx.deps.currency} on {order_id} for {ctx.deps.run_id}"


def build_deps_agent() -> Agent[Any, Any]:
    """An agent whose tool reads the run's dependencies."""
    calls: list[Call] = [("refund_in_currency", {"order_id": "A-1", "amount": 7}, "call_c")]
    tools = [Tool(refund_in_currency, requires_approval=True)]
    return _agent("support-deps", calls, tools=tools, deps_type=Shop)
