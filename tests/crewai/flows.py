"""Real CrewAI flows and crews for the adapter tests. The flows' feedback steps use
``SlackFeedbackProvider``; their steps record what they do in Redis lists at ``REDIS_URL``
(read by the tests, written here and in workers). No model is called: a click's outcome
needs none, and the crews' agent runs on ``CannedLLM``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from crewai import Agent, Crew, Task
from crewai.flow import Flow, human_feedback, listen, start
from crewai.flow.persistence import SQLiteFlowPersistence, persist
from crewai.llms.base_llm import BaseLLM
from pydantic import BaseModel

from tests.support.adapter_runs import env_redis, record
from worker.adapters.crewai import SlackFeedbackProvider

STEPS = "test:crewai:steps"
"""Every step run after a feedback: {"step", "flow_id", ...}, oldest first."""
EFFECTS = "test:crewai:effects"
"""Hash: handoff id -> the refund it made (a side effect keyed on the handoff)."""
FINISHED = "test:crewai:finished"
HANG_ONCE = "test:crewai:hang_once"
"""While this key exists, the refund step hangs the first time it runs."""
HUNG = "test:crewai:hung"
"""Set to "<pid> <parent pid>" of the process hanging in the refund step."""
FLOW_DB = "CREWAI_TEST_FLOW_DB"
"""Environment variable naming the SQLite file the flows persist to (shared with workers)."""

COLLAPSE_LLM = "gpt-4o-mini"
"""The flows' LLM for mapping typed feedback to an outcome: never called by these tests (a
click's outcome is known), and needing no key to be built."""

slack = SlackFeedbackProvider(channel="C0SUPPORT")


def persistence() -> SQLiteFlowPersistence:
    """The flows' persistence: a SQLite file every process of the test reaches."""
    return SQLiteFlowPersistence(os.environ.get(FLOW_DB, "/tmp/handoff-crewai-flows.db"))


def step(name: str, flow: Flow[Any], **details: Any) -> None:
    """Note that a step ran (with the feedback it read)."""
    feedback = flow.last_human_feedback
    entry: dict[str, Any] = {"step": name, "flow_id": flow.flow_id, **details}
    if feedback is not None:
        entry |= {
            "feedback": feedback.feedback,
            "outcome": feedback.outcome,
            "output": feedback.output,
            "handoff": feedback.metadata.get("handoff"),
        }
    record(STEPS, json.loads(json.dumps(entry, default=str)))


class _NoMemory(Flow):  # type: ignore[type-arg]
    """Flows without CrewAI's default memory: it would build a LanceDB store, seconds of
    imports in every process, for nothing these flows use (CrewAI's own internal flows
    skip it the same way)."""

    _skip_auto_memory: bool = True


class Refund(BaseModel):
    """What the refund flow proposes."""

    order_id: str
    amount_usd: int


class RefundState(BaseModel):
    id: str = ""
    order_id: str = "A-1"
    amount_usd: int = 30
    refunded: int = 0


class RefundFlow(_NoMemory[RefundState]):
    """Proposes a refund (an approval: a model's fields), refunds it or declines."""

    @start()
    @human_feedback(
        message="Refund this order?",
        emit=["approved", "rejected"],
        llm=COLLAPSE_LLM,
        provider=slack,
    )
    def propose(self) -> Refund:
        return Refund(order_id=self.state.order_id, amount_usd=self.state.amount_usd)

    @listen("approved")
    def refund(self) -> str:
        feedback = self.last_human_feedback
        assert feedback is not None
        approved = Refund.model_validate(feedback.output)
        handoff_id = feedback.metadata["handoff"]["id"]
        step("refund", self, pid=os.getpid())
        # The side effect is keyed on the handoff: a second run of this step makes none.
        env_redis().hsetnx(EFFECTS, handoff_id, approved.model_dump_json())
        redis = env_redis()
        if redis.exists(HANG_ONCE) and redis.set(HUNG, f"{os.getpid()} {os.getppid()}", nx=True):
            time.sleep(120)  # the test kills the worker meanwhile
        self.state.refunded = approved.amount_usd
        return f"refunded {approved.amount_usd} USD on {approved.order_id}"

    @listen(refund)
    def finish(self, said: str) -> str:
        record(FINISHED, {"flow_id": self.flow_id, "said": said, "state": self.state.model_dump()})
        return said

    @listen("rejected")
    def decline(self) -> str:
        step("decline", self)
        feedback = self.last_human_feedback
        return f"declined: {feedback.feedback if feedback else ''}"


def build_refund_flow() -> RefundFlow:
    """A refund flow on the shared persistence."""
    return RefundFlow(persistence=persistence())


@persist(SQLiteFlowPersistence(os.environ.get(FLOW_DB, "/tmp/handoff-crewai-flows.db")))
class NoteFlow(_NoMemory[dict]):
    """Drafts a note to the customer (a correction: a text), sends it or not; persisted
    with @persist, and on a second step asks whether to close the ticket (a question)."""

    @start()
    @human_feedback(
        message="Send this note?", emit=["approve", "reject"], llm=COLLAPSE_LLM, provider=slack
    )
    def draft(self) -> str:
        self.state["order"] = "A-1"
        return "Dear customer, we refunded order A-1."

    @listen("approve")
    @human_feedback(message="Anything to add before we close the ticket?", provider=slack)
    def send(self) -> str:
        feedback = self.last_human_feedback
        assert feedback is not None
        step("send", self, order=self.state["order"])
        return f"sent: {feedback.output}"

    @listen(send)
    def close(self, result: Any) -> str:
        step("close", self)
        return f"closed: {result.feedback}"

    @listen("reject")
    def hold(self) -> str:
        step("hold", self)
        return "held"


class TriageFlow(_NoMemory[dict]):
    """Asks what to do with a broken order (a question offering three outcomes)."""

    @start()
    @human_feedback(
        message="What do we do with this order?",
        emit=["refund", "replace", "escalate"],
        default_outcome="escalate",
        llm=COLLAPSE_LLM,
        provider=slack,
    )
    def classify(self) -> dict[str, str]:
        return {"order_id": "A-1", "problem": "arrived broken"}

    @listen("refund")
    def do_refund(self) -> str:
        step("refund", self)
        return "refund"

    @listen("replace")
    def do_replace(self) -> str:
        step("replace", self)
        return "replace"

    @listen("escalate")
    def do_escalate(self) -> str:
        step("escalate", self)
        return "escalate"


class ShipFlow(_NoMemory[dict]):
    """Asks whether to ship (a question whose outcomes have none meaning no, and no
    default_outcome): nowhere safe to go when nobody answers."""

    @start()
    @human_feedback(
        message="Ship this release?", emit=["ship", "hold"], llm=COLLAPSE_LLM, provider=slack
    )
    def release(self) -> dict[str, str]:
        return {"version": "2.0"}

    @listen("ship")
    def do_ship(self) -> str:
        step("ship", self)
        return "shipped"

    @listen("hold")
    def do_hold(self) -> str:
        step("hold", self)
        return "held"


class LongNoteFlow(_NoMemory[dict]):
    """Drafts a note longer than a handoff may hold (HANDOFF_MAX_PAYLOAD_BYTES)."""

    @start()
    @human_feedback(
        message="Send this note?", emit=["approve", "reject"], llm=COLLAPSE_LLM, provider=slack
    )
    def draft(self) -> str:
        self.state["notes"] = ["kept with the flow's state"] * 1000
        return "Dear customer, " + "we are sorry. " * 10_000


# -- a crew whose task asks for human input -----------------------------------------------


class CannedLLM(BaseLLM):
    """Plays the agent's model: answers "Final Answer: draft N" on its N-th call, and
    records what it was last told (the reviewer's feedback reaches it that way)."""

    model: str = "canned"
    calls: int = 0

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        last = messages[-1]["content"] if isinstance(messages, list) else str(messages)
        record(STEPS, {"step": "llm", "call": self.calls, "told": last[-300:]})
        return f"Thought: I can answer.\nFinal Answer: draft {self.calls}"


def build_crew() -> Crew:
    """One agent, one task with human_input=True."""
    writer = Agent(
        role="writer",
        goal="Write notes to customers",
        backstory="Writes short, exact notes.",
        llm=CannedLLM(model="canned"),
    )
    task = Task(
        name="refund note",
        description="Write the note telling the customer their order A-1 was refunded.",
        expected_output="The note",
        agent=writer,
        human_input=True,
    )
    return Crew(agents=[writer], tasks=[task])
