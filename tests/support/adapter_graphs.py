"""Real LangGraph graphs for the adapter tests, built the same way in the test process and
in worker processes: checkpoints go to the SQLite file named by ``HANDOFF_TEST_CHECKPOINTS``
(shared by both, like a production checkpointer), and tools record each run in the Redis
list ``TOOL_RUNS`` at ``REDIS_URL`` so the tests can count them."""

from __future__ import annotations

import operator
import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from redis import Redis

from tests.support.adapter_runs import env_redis, record, recorded

CHECKPOINTS_ENV = "HANDOFF_TEST_CHECKPOINTS"
TOOL_RUNS = "test:lg:tool_runs"
HANG_ONCE = "test:lg:hang_once"
"""While this key exists, the refund graph's ``act`` node hangs the first time it runs."""
HUNG = "test:lg:hung"
"""Set to "<pid> <parent pid>" of the process hanging in ``act`` (an RQ work horse)."""
FINISHED = "test:lg:finished"


def _saver() -> SqliteSaver:
    conn = sqlite3.connect(os.environ[CHECKPOINTS_ENV], check_same_thread=False)
    return SqliteSaver(conn)


def record_tool_run(name: str, args: dict[str, Any]) -> None:
    """Note that a tool really ran (with which arguments)."""
    record(TOOL_RUNS, {"tool": name, "args": args})


def tool_runs(redis: Redis) -> list[dict[str, Any]]:
    """Every tool run recorded so far, oldest first."""
    return recorded(redis, TOOL_RUNS)


def record_finish(values: Any, *, thread_id: str, run_id: str) -> None:
    """``on_finish`` target: note the finished thread."""
    record(FINISHED, {"thread_id": thread_id, "run_id": run_id})


# -- a graph with two interrupts pending at once ---------------------------------------


class OutreachState(TypedDict, total=False):
    customer: Any
    email: Any
    log: Annotated[list[str], operator.add]


def _ask_customer(state: OutreachState) -> OutreachState:
    reply = interrupt("Two customers reported the outage. Which one should I contact first?")
    return {"customer": reply, "log": ["asked"]}


def _approve_email(state: OutreachState) -> OutreachState:
    decision = interrupt(
        {
            "action": "send_email",
            "args": {"to": "dana@example.com", "subject": "Outage"},
            "description": "Tell the customer about the outage.",
        }
    )
    if decision["type"] in ("approve", "edit"):
        record_tool_run("send_email", decision["args"])
    return {"email": decision, "log": ["email reviewed"]}


def _finish(state: OutreachState) -> OutreachState:
    return {"log": ["finished"]}


def build_outreach_graph() -> Any:
    """START → (ask_customer | approve_email), both interrupting at once → finish."""
    builder = StateGraph(OutreachState)
    builder.add_node("ask_customer", _ask_customer)
    builder.add_node("approve_email", _approve_email)
    builder.add_node("finish", _finish)
    builder.add_edge(START, "ask_customer")
    builder.add_edge(START, "approve_email")
    builder.add_edge(["ask_customer", "approve_email"], "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=_saver())


# -- one approval, then a step that can hang --------------------------------------------


class RefundState(TypedDict, total=False):
    request: dict[str, Any]
    decision: Any
    steps: Annotated[list[str], operator.add]


def _review(state: RefundState) -> RefundState:
    decision = interrupt({"action": "issue_refund", "args": state["request"]})
    return {"decision": decision, "steps": ["reviewed"]}


def _act(state: RefundState) -> RefundState:
    redis = env_redis()
    if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
        time.sleep(120)  # the test kills the worker meanwhile
    decision = state["decision"]
    if decision["type"] in ("approve", "edit"):
        record_tool_run("issue_refund", decision["args"])
        return {"steps": ["refunded"]}
    return {"steps": [f"not refunded: {decision['message']}"]}


def build_refund_graph() -> Any:
    """START → review (interrupt) → act → END."""
    builder = StateGraph(RefundState)
    builder.add_node("review", _review)
    builder.add_node("act", _act)
    builder.add_edge(START, "review")
    builder.add_edge("review", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=_saver())


# -- Agent Inbox HumanInterrupt ---------------------------------------------------------


class PostState(TypedDict, total=False):
    text: str
    outcome: Any


def _review_post(state: PostState) -> PostState:
    [response] = interrupt(
        [
            {
                "action_request": {"action": "post_update", "args": {"text": state["text"]}},
                "config": {
                    "allow_accept": True,
                    "allow_edit": True,
                    "allow_respond": True,
                    "allow_ignore": True,
                },
                "description": "Post this status update?",
            }
        ]
    )
    if response["type"] == "accept":
        record_tool_run("post_update", {"text": state["text"]})
    elif response["type"] == "edit":
        record_tool_run("post_update", response["args"]["args"])
    return {"outcome": response}


def build_inbox_graph() -> Any:
    """START → review_post (an Agent Inbox interrupt) → END."""
    builder = StateGraph(PostState)
    builder.add_node("review_post", _review_post)
    builder.add_edge(START, "review_post")
    builder.add_edge("review_post", END)
    return builder.compile(checkpointer=_saver())


# -- an interrupt inside a subgraph -----------------------------------------------------


class NestedState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _inner_question(state: NestedState) -> NestedState:
    reply = interrupt({"question": "Which region is down?", "choices": ["eu", "us"]})
    return {"log": [f"inner: {reply['message']}"]}


def build_nested_graph() -> Any:
    """START → outer (a subgraph whose node interrupts) → after → END."""
    inner = StateGraph(NestedState)
    inner.add_node("inner_question", _inner_question)
    inner.add_edge(START, "inner_question")
    inner.add_edge("inner_question", END)
    outer = StateGraph(NestedState)
    outer.add_node("outer", inner.compile())
    outer.add_node("after", lambda state: {"log": ["after"]})
    outer.add_edge(START, "outer")
    outer.add_edge("outer", "after")
    outer.add_edge("after", END)
    return outer.compile(checkpointer=_saver())


# -- LangChain agents with HumanInTheLoopMiddleware -------------------------------------


class ScriptedChatModel(BaseChatModel):
    """A chat model that needs no network: it asks for the tool calls given by
    ``calls`` until tool results come back, then answers with those results."""

    calls: list[dict[str, Any]]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            message = AIMessage(
                content="", tool_calls=[{**call, "type": "tool_call"} for call in self.calls]
            )
        else:
            message = AIMessage(content=" | ".join(str(r.content) for r in results))
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def refund(order_id: str, amount_usd: int) -> str:
    """Refund part of an order."""
    record_tool_run("refund", {"order_id": order_id, "amount_usd": amount_usd})
    return f"refunded {amount_usd} USD on {order_id}"


@tool
def ask_customer(question: str) -> str:
    """Ask the customer something (answered by a person instead)."""
    raise AssertionError("answered by the reviewer; never run")


TWO_REFUNDS = [
    {"name": "refund", "args": {"order_id": "A-1", "amount_usd": 30}, "id": "call_a1"},
    {"name": "refund", "args": {"order_id": "B-2", "amount_usd": 5}, "id": "call_b2"},
]


def build_batched_agent() -> Any:
    """A LangChain agent whose two refund calls are reviewed in one batched interrupt."""
    return create_agent(
        ScriptedChatModel(calls=TWO_REFUNDS),
        tools=[refund],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
        checkpointer=_saver(),
    )


def build_per_call_agent() -> Any:
    """A LangChain agent reviewed per call: a refund (approve or reject only) and a
    question to the customer (respond only), pending at once."""
    calls = [
        TWO_REFUNDS[0],
        {"name": "ask_customer", "args": {"question": "Which card?"}, "id": "call_q"},
    ]
    return create_agent(
        ScriptedChatModel(calls=calls),
        tools=[refund, ask_customer],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={
                    "refund": {"allowed_decisions": ["approve", "reject"]},
                    "ask_customer": {"allowed_decisions": ["respond"]},
                },
                interrupt_mode="per_call",
            )
        ],
        checkpointer=_saver(),
    )
