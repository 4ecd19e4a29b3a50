"""Real Agent Framework workflows for the adapter tests: executors that ask people with
``ctx.request_info`` and record what they did in Redis at ``REDIS_URL`` (read here and in
workers). Checkpoints go to the folder ``$AF_CHECKPOINTS``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    AgentExecutor,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)

from tests.support.adapter_af_agents import build_refund_agent
from tests.support.adapter_runs import env_redis, record
from worker.adapters.agent_framework import Approval, Correction, HumanReply, Question

FINISHED = "test:afw:finished"
HANDLED = "test:afw:handled"
"""One entry per response a handler received (so a test sees a step run twice)."""
HANG_ONCE = "test:afw:hang_once"
"""While this key exists, the handler hangs the first time it receives a response."""
HUNG = "test:afw:hung"
"""Set to "<pid> <parent pid>" of the process hanging in the handler."""


def record_finish(outputs: Any, *, run_id: str) -> None:
    """``on_finish`` target: note the finished run and its outputs."""
    record(FINISHED, {"run_id": run_id, "outputs": outputs})


def checkpoint_storage() -> Any:
    """``checkpoint_storage`` target: the same folder, named by a factory."""
    from agent_framework import FileCheckpointStorage

    return FileCheckpointStorage(os.environ["AF_CHECKPOINTS"])


class RefundIntake(Executor):
    """Asks two questions at once (which card, and a reply to proofread), then yields a
    summary once both are answered."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        ctx.set_state("order", order)
        await ctx.request_info(Question(f"Refund {order}: which card?", ["Visa", "Amex"]), str)
        draft = f"We refunded your order {order}."
        await ctx.request_info(Correction(draft, "Fix the tone"), HumanReply)

    @response_handler
    async def on_card(self, asked: Question, card: str, ctx: WorkflowContext[Any, str]) -> None:
        self._note(ctx, "card", card)
        await self._finish_when_done(ctx)

    @response_handler
    async def on_reply(
        self, asked: Correction, reply: HumanReply, ctx: WorkflowContext[Any, str]
    ) -> None:
        text = reply.text if reply.accepted else f"(no reply: {reply.message})"
        self._note(ctx, "reply", text or "")
        _hang_once()
        await self._finish_when_done(ctx)

    def _note(self, ctx: WorkflowContext[Any, Any], name: str, value: str) -> None:
        record(HANDLED, {"step": name, "value": value})
        ctx.set_state(name, value)

    async def _finish_when_done(self, ctx: WorkflowContext[Any, str]) -> None:
        card, reply = ctx.get_state("card"), ctx.get_state("reply")
        if card is not None and reply is not None:
            await ctx.yield_output(f"{ctx.get_state('order')} to {card}: {reply}")


class OneQuestion(Executor):
    """Asks one question (a plain string, answered with a str), yields the answer."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(f"Refund {order}: which card?", str)

    @response_handler
    async def on_answer(self, asked: str, answer: str, ctx: WorkflowContext[Any, str]) -> None:
        record(HANDLED, {"step": "answer", "value": answer})
        await ctx.yield_output(answer)


class RefundApproval(Executor):
    """Asks for an approval of a refund (editable), yields what the reply said."""

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        args = {"order_id": order, "amount_usd": 30}
        await ctx.request_info(Approval("refund", args, "Refund part of an order"), HumanReply)

    @response_handler
    async def on_reply(
        self, asked: Approval, reply: HumanReply, ctx: WorkflowContext[Any, str]
    ) -> None:
        await ctx.yield_output(f"{reply.type} {reply.args} by {reply.decided_by}")


def build_intake() -> Workflow:
    """Two requests at once: a question (str) and a correction (HumanReply)."""
    return WorkflowBuilder(start_executor=RefundIntake(id="intake"), name="refund-intake").build()


def build_approval() -> Workflow:
    """One editable approval, answered with a HumanReply."""
    return WorkflowBuilder(start_executor=RefundApproval(id="approve"), name="approval").build()


def build_one_question() -> Workflow:
    """One plain-string question."""
    return WorkflowBuilder(start_executor=OneQuestion(id="ask"), name="one-question").build()


def build_agent_flow() -> Workflow:
    """An agent in a workflow: its tool approvals are request_info requests."""
    support = AgentExecutor(build_refund_agent(), id="support")
    return WorkflowBuilder(start_executor=support, name="agent-flow").build()


@dataclass
class Unregistered:
    """A request type nobody registered with ``register_checkpoint_type``."""

    question: str


class AsksBadly(Executor):
    """Asks with ``request``'s data and response type; never gets an answer."""

    def __init__(self, request: Any, response_type: type, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.request, self.response_type = request, response_type

    @handler
    async def start(self, order: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(self.request, self.response_type)

    @response_handler
    async def on_answer(self, asked: Any, answer: Any, ctx: WorkflowContext) -> None:
        raise AssertionError("never answered")


def build_unregistered() -> Workflow:
    """Asks with a type the checkpoint storage may not restore."""
    executor = AsksBadly(Unregistered("Which card?"), str, id="ask")
    return WorkflowBuilder(start_executor=executor, name="unregistered").build()


def build_str_correction() -> Workflow:
    """Asks for a correction but takes a str: a refused draft could not be told apart."""
    executor = AsksBadly(Correction("Dear customer"), str, id="ask")
    return WorkflowBuilder(start_executor=executor, name="str-correction").build()


def _hang_once() -> None:
    redis = env_redis()
    if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
        time.sleep(120)  # the test kills the worker meanwhile
