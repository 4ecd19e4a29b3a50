"""Real Agent Framework agents for the adapter tests, with a scripted chat client (no
network) so the same run gives the same steps in the test process and in a worker. Tools
record each run in the Redis list ``TOOL_RUNS`` at ``REDIS_URL``."""

from __future__ import annotations

import os
import time
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
from redis import Redis

from tests.support.adapter_runs import env_redis, record, recorded
from worker.adapters.agent_framework import ask_human_tool

TOOL_RUNS = "test:af:tool_runs"
FINISHED = "test:af:finished"
HANG_ONCE = "test:af:hang_once"
"""While this key exists, the model hangs the first time it reads tool results."""
HUNG = "test:af:hung"
"""Set to "<pid> <parent pid>" of the process hanging in the model (an RQ work horse)."""


def tool_runs(redis: Redis) -> list[dict[str, Any]]:
    """Every tool run recorded so far, oldest first."""
    return recorded(redis, TOOL_RUNS)


def record_finish(final_output: Any, *, run_id: str) -> None:
    """``on_finish`` target: note the finished run and its output."""
    record(FINISHED, {"run_id": run_id, "output": final_output})


Call = tuple[str, dict[str, Any], str]


class ScriptedChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """Calls the scripted tools turn by turn (the next turn once every result of the
    previous one is in); after the last turn, answers with the results joined by `` | ``,
    then `` || `` and any later user message (a refusal's reason). Decides from the
    conversation alone, so any process replays it the same way. Composed like the
    framework's own clients: function invocation (approvals, middleware) over the raw
    client."""

    def __init__(self, *turns: list[Call]) -> None:
        super().__init__()
        self.turns = turns

    async def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> ChatResponse[Any]:
        if stream:
            raise NotImplementedError("the tests do not stream")
        results = [c.result for m in messages for c in m.contents if c.type == "function_result"]
        answered = 0
        for turn in self.turns:
            if len(results) == answered:
                calls = [
                    Content.from_function_call(call_id=cid, name=name, arguments=args)
                    for name, args, cid in turn
                ]
                return ChatResponse(messages=[Message(role="assistant", contents=calls)])
            answered += len(turn)
        redis = env_redis()
        if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
            time.sleep(120)  # the test kills the worker meanwhile
        notes = [m.text for m in messages[1:] if m.role == "user" and m.text]
        text = " | ".join(str(result) for result in results)
        if notes:
            text += " || " + " ".join(notes)
        return ChatResponse(messages=[Message(role="assistant", contents=[text])])


@tool(approval_mode="always_require")
def refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order."""
    record(TOOL_RUNS, {"tool": "refund", "args": [order_id, amount_usd]})
    return f"refunded {amount_usd} USD on {order_id}"


TWO_REFUNDS: list[Call] = [
    ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ("refund", {"order_id": "B-2", "amount_usd": 5}, "call_b2"),
]


def build_refund_agent() -> Agent[Any]:
    """An agent that asks to refund two orders at once."""
    return Agent(ScriptedChatClient(TWO_REFUNDS), name="support", tools=[refund])


def build_one_refund_agent() -> Agent[Any]:
    """An agent that asks to refund one order."""
    return Agent(ScriptedChatClient([TWO_REFUNDS[0]]), name="support-one", tools=[refund])


def build_two_step_agent() -> Agent[Any]:
    """An agent that refunds A-1, and only once that is done asks to refund B-2."""
    client = ScriptedChatClient([TWO_REFUNDS[0]], [TWO_REFUNDS[1]])
    return Agent(client, name="support-steps", tools=[refund])


def build_question_agent() -> Agent[Any]:
    """An agent that asks a person which card to refund to, and refunds at once."""
    calls: list[Call] = [
        ("ask_human", {"question": "Which card?", "choices": ["Visa", "Amex"]}, "call_q"),
        ("refund", {"order_id": "A-1", "amount_usd": 30}, "call_a1"),
    ]
    return Agent(
        ScriptedChatClient(calls), name="support-questions", tools=[ask_human_tool(), refund]
    )
