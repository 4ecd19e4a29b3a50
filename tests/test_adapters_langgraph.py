"""The LangGraph adapter, with real graphs and a SQLite checkpointer shared by the test
process and real `handoff worker` processes: interrupt → handoff → decision → the resumed
thread reaches the right next step, once."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command, Interrupt
from redis import Redis

from store.exceptions import AlreadyDecided
from store.models import Handoff, RequestType, Status, TaskKind, TaskState
from tests.conftest import WorkerProcesses, wait_until
from tests.support import adapter_graphs as graphs
from tests.support.adapter_runs import adapter_env, make_adapter, recorded
from tests.support.preloaded_workers import (
    hanging_once,
    kill_worker_and_horse,
    start_preloaded_worker,
)
from worker.adapters.langgraph import (
    RESUME_TARGET,
    InterruptShape,
    LangGraphHandoffs,
    LangGraphResume,
    resume_thread,
    review_items,
)
from worker.adapters.pauses import Pauses, PauseState
from worker.client import Handoffs

PRELOAD = ("langgraph.graph", "langgraph.checkpoint.sqlite", "tests.support.adapter_graphs")
HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def graph_env(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """Environment of the graphs (same checkpoint file and Redis here and in workers)."""
    env = {"REDIS_URL": redis_url, graphs.CHECKPOINTS_ENV: str(tmp_path / "checkpoints.sqlite")}
    yield from adapter_env(monkeypatch, env)


def _adapter(handoffs: Handoffs, factory: str, **options: Any) -> LangGraphHandoffs:
    return make_adapter(LangGraphHandoffs, handoffs, graphs.__name__, factory, **options)


def _finished(redis: Redis) -> list[dict[str, Any]]:
    return recorded(redis, graphs.FINISHED)


def _by_type(handoffs: list[Handoff], kind: RequestType) -> Handoff:
    [found] = [h for h in handoffs if h.request_type is kind]
    return found


def _resumed_count(handoffs: Handoffs, handoff_id: str) -> int:
    return [event.event for event in handoffs.audit(handoff_id)].count("resumed")


# -- through real workers ---------------------------------------------------------------


def test_two_pending_interrupts_resume_together_once_both_are_decided(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, graph_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=graph_env)
    adapter = _adapter(handoffs, "build_outreach_graph")

    outcome = adapter.start({"log": []}, thread_id="outage-7", run_id="run-outage")

    assert outcome.status == "paused"
    question = _by_type(outcome.handoffs, RequestType.QUESTION)
    email = _by_type(outcome.handoffs, RequestType.APPROVAL)
    assert question.payload.question.startswith("Two customers")  # type: ignore[union-attr]
    assert email.payload.action.args == {"to": "dana@example.com", "subject": "Outage"}  # type: ignore[union-attr]
    assert {h.resume_target for h in outcome.handoffs} == {RESUME_TARGET}
    assert {h.run_id for h in outcome.handoffs} == {"run-outage"}
    assert not any(HEX32.fullmatch(h.id) for h in outcome.handoffs)

    handoffs.decide(question.id, "answered", by="U_ALICE", answer="Dana Lee")
    wait_until(lambda: handoffs.get(question.id).resume.state is TaskState.COMPLETED)
    # One answer is not enough: the thread still waits for both interrupts.
    assert len(adapter.graph.get_state({"configurable": {"thread_id": "outage-7"}}).interrupts) == 2
    assert graphs.tool_runs(redis) == []

    handoffs.decide(email.id, "approved", by="U_BOB", edited_args={"subject": "Outage update"})
    wait_until(lambda: len(_finished(redis)) == 1, timeout=30)

    values = adapter.graph.get_state({"configurable": {"thread_id": "outage-7"}}).values
    assert values["customer"]["type"] == "respond"
    assert values["customer"]["message"] == "Dana Lee"
    assert values["email"]["type"] == "edit"
    assert values["email"]["args"] == {"to": "dana@example.com", "subject": "Outage update"}
    assert values["log"].count("finished") == 1
    assert graphs.tool_runs(redis) == [
        {"tool": "send_email", "args": {"to": "dana@example.com", "subject": "Outage update"}}
    ]

    with pytest.raises(AlreadyDecided):
        handoffs.decide(email.id, "rejected", by="U_CAROL", comment="too late")
    time.sleep(1.0)  # room for a second resume to show up
    assert len(_finished(redis)) == 1
    assert len(graphs.tool_runs(redis)) == 1
    assert _resumed_count(handoffs, question.id) == _resumed_count(handoffs, email.id) == 1


def test_batched_tool_calls_resume_with_an_edit_and_a_rejection_reason(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, graph_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=graph_env)
    adapter = _adapter(handoffs, "build_batched_agent")

    outcome = adapter.start({"messages": [HumanMessage("Refund A-1 and B-2")]}, thread_id="t-b")

    first, second = outcome.handoffs
    assert [h.payload.action.args for h in outcome.handoffs] == [  # type: ignore[union-attr]
        {"order_id": "A-1", "amount_usd": 30},
        {"order_id": "B-2", "amount_usd": 5},
    ]
    assert LangGraphResume.of(first).shape is InterruptShape.HITL_BATCHED
    handoffs.decide(first.id, "approved", by="U_ALICE", edited_args={"amount_usd": 25})
    handoffs.decide(second.id, "rejected", by="U_ALICE", comment="B-2 was already refunded")
    wait_until(lambda: len(_finished(redis)) == 1, timeout=30)

    last = adapter.graph.get_state({"configurable": {"thread_id": "t-b"}}).values["messages"][-1]
    assert "refunded 25 USD on A-1" in last.content
    assert "with reason: B-2 was already refunded" in last.content
    assert graphs.tool_runs(redis) == [
        {"tool": "refund", "args": {"order_id": "A-1", "amount_usd": 25}}
    ]


def test_worker_killed_mid_resume_finishes_the_thread_without_answering_twice(
    redis: Redis, workers: WorkerProcesses, graph_env: dict
) -> None:
    handoffs = hanging_once(redis, workers, PRELOAD, hang_key=graphs.HANG_ONCE, extra_env=graph_env)
    adapter = _adapter(handoffs, "build_refund_graph")
    [approval] = adapter.start({"request": {"order_id": "A-1"}}, thread_id="t-kill").handoffs

    handoffs.decide(approval.id, "approved", by="U_ALICE")
    wait_until(lambda: redis.exists(graphs.HUNG), timeout=30)  # in `act`, after the answer
    kill_worker_and_horse(workers, redis.get(graphs.HUNG))
    config = {"configurable": {"thread_id": "t-kill"}}
    snapshot = adapter.graph.get_state(config)
    assert snapshot.interrupts == () and snapshot.next == ("act",)
    assert graphs.tool_runs(redis) == []

    wait_until(lambda: len(_finished(redis)) == 1, timeout=40)

    assert adapter.graph.get_state(config).values["steps"] == ["reviewed", "refunded"]
    assert graphs.tool_runs(redis) == [{"tool": "issue_refund", "args": {"order_id": "A-1"}}]
    # Attempt 2 takes over; on a loaded machine it may itself outlive its 3 s timeout, and
    # a third one finishes: what matters is that the tool ran once and the resume completed.
    assert handoffs.get(approval.id).resume.attempt >= 2
    assert handoffs.get(approval.id).resume.state is TaskState.COMPLETED
    # A later attempt saw the answer already in the checkpoint and did not send it again.
    assert "finishing the steps a dead attempt began" in workers.logs()


# -- the resume target called in this process, as a worker calls it ---------------------


def test_per_call_reviews_become_an_approval_and_a_question_and_refuse_a_forbidden_edit(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_per_call_agent")
    outcome = adapter.start({"messages": [HumanMessage("Refund A-1")]}, thread_id="t-pc")

    refund = _by_type(outcome.handoffs, RequestType.APPROVAL)
    question = _by_type(outcome.handoffs, RequestType.QUESTION)
    assert LangGraphResume.of(refund).allowed == ["approve", "reject"]
    assert LangGraphResume.of(question).allowed == ["respond"]
    assert question.payload.question == "Which card?"  # type: ignore[union-attr]
    assert LangGraphResume.of(refund).interrupt_id != LangGraphResume.of(question).interrupt_id

    answered = handoffs.decide(question.id, "answered", by="U_ALICE", answer="the Visa")
    assert adapter.resume(answered) is None  # waits for the refund's decision
    edited = handoffs.decide(refund.id, "approved", by="U_ALICE", edited_args={"amount_usd": 9})
    resume_thread(edited, handoffs=handoffs)

    last = adapter.graph.get_state({"configurable": {"thread_id": "t-pc"}}).values["messages"][-1]
    assert "the Visa" in last.content
    assert 'changed the arguments to {"order_id": "A-1", "amount_usd": 9}' in last.content
    assert graphs.tool_runs(redis) == []  # an edit the tool does not accept never runs


def test_agent_inbox_interrupt_is_resumed_with_a_human_response_list(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_inbox_graph")
    [post] = adapter.start({"text": "We are back up"}, thread_id="t-inbox").handoffs
    assert post.payload.action.name == "post_update"  # type: ignore[union-attr]
    assert post.payload.action.description == "Post this status update?"  # type: ignore[union-attr]

    decided = handoffs.decide(post.id, "approved", by="U_ALICE", edited_args={"text": "Back up!"})
    outcome = adapter.resume(decided)

    assert outcome is not None and outcome.status == "finished"
    assert outcome.values["outcome"] == {
        "type": "edit",
        "args": {"action": "post_update", "args": {"text": "Back up!"}},
    }
    assert graphs.tool_runs(redis) == [{"tool": "post_update", "args": {"text": "Back up!"}}]


def test_an_interrupt_inside_a_subgraph_is_handed_off_and_resumed(
    handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_nested_graph")
    [question] = adapter.start({"log": []}, thread_id="t-nested").handoffs
    assert question.payload.choices == ["eu", "us"]  # type: ignore[union-attr]

    outcome = adapter.resume(handoffs.decide(question.id, "answered", by="U1", answer="eu"))

    assert outcome is not None and outcome.status == "finished"
    assert outcome.values["log"] == ["inner: eu", "after"]


def test_rejection_and_expiry_reach_a_raw_interrupt_as_reject_decisions(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_graph")
    [rejected] = adapter.start({"request": {"order_id": "A-1"}}, thread_id="t-r").handoffs
    quick = _adapter(handoffs, "build_refund_graph", expires_in=0.2)
    [expiring] = quick.start({"request": {"order_id": "B-2"}}, thread_id="t-x").handoffs

    decided = handoffs.decide(rejected.id, "rejected", by="U1", comment="too much")
    resume_thread(decided, handoffs=handoffs)
    time.sleep(0.3)
    assert expiring.id in handoffs.store.expire_due()
    resume_thread(handoffs.get(expiring.id), handoffs=handoffs)

    steps = adapter.graph.get_state({"configurable": {"thread_id": "t-r"}}).values["steps"]
    assert steps == ["reviewed", "not refunded: too much"]
    expired = adapter.graph.get_state({"configurable": {"thread_id": "t-x"}}).values
    assert expired["decision"]["outcome"] == "expired"
    assert expired["steps"][-1] == "not refunded: Nobody decided in time; the request expired."
    assert graphs.tool_runs(redis) == []


def test_an_interrupt_answered_elsewhere_is_not_resumed_again(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_graph")
    [approval] = adapter.start({"request": {"order_id": "A-1"}}, thread_id="t-s").handoffs
    config = {"configurable": {"thread_id": "t-s"}}
    interrupt_id = LangGraphResume.of(approval).interrupt_id
    answer = {"type": "reject", "message": "handled by phone"}
    adapter.graph.invoke(Command(resume={interrupt_id: answer}), config)

    decided = handoffs.decide(approval.id, "approved", by="U_ALICE")
    assert adapter.resume(decided) is None

    assert adapter.graph.get_state(config).values["steps"] == [
        "reviewed",
        "not refunded: handled by phone",
    ]
    assert graphs.tool_runs(redis) == []
    pause = LangGraphResume.of(approval).pause
    assert Pauses(handoffs).fields(pause.pause_id)["state"] == PauseState.STALE


def test_a_repeated_resume_of_a_resumed_thread_runs_nothing_again(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_outreach_graph")
    question, email = sorted(
        adapter.start({"log": []}, thread_id="t-twice").handoffs,
        key=lambda h: h.request_type is RequestType.APPROVAL,
    )
    resume_thread(
        handoffs.decide(question.id, "answered", by="U1", answer="Sam"), handoffs=handoffs
    )
    resume_thread(handoffs.decide(email.id, "approved", by="U1"), handoffs=handoffs)
    config = {"configurable": {"thread_id": "t-twice"}}
    before = adapter.graph.get_state(config)

    for handoff_id in (question.id, email.id, email.id):
        resume_thread(handoffs.get(handoff_id), handoffs=handoffs)

    after = adapter.graph.get_state(config)
    assert after.config == before.config  # no new checkpoint: the graph did not run
    assert after.values["log"].count("finished") == 1
    assert len(graphs.tool_runs(redis)) == 1
    assert len(_finished(redis)) == 1


def test_settle_hands_the_same_interrupts_to_people_only_once(
    handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_outreach_graph")
    first = adapter.start({"log": []}, thread_id="t-idem").handoffs

    again = adapter.settle(thread_id="t-idem").handoffs

    assert sorted(h.id for h in again) == sorted(h.id for h in first)
    assert len(handoffs.list_pending().items) == 2


# -- reading interrupt values -----------------------------------------------------------


def _items(value: Any, response_schema: dict | None = None) -> list[tuple]:
    interrupt = Interrupt(value=value, id="0" * 32, response_schema=response_schema)
    return [(i.request_type, i.shape, i.request, i.allowed) for i in review_items(interrupt)]


def test_raw_interrupt_values_map_to_questions_corrections_and_approvals() -> None:
    question, raw = RequestType.QUESTION, InterruptShape.RAW
    assert _items("Which one?") == [(question, raw, {"question": "Which one?"}, ())]
    assert _items({"question": "Pick", "choices": ["a", "b"]}) == [
        (question, raw, {"question": "Pick", "choices": ["a", "b"]}, ())
    ]
    assert _items({"draft": "Hi", "instructions": "warmer"}) == [
        (RequestType.CORRECTION, raw, {"draft": "Hi", "instructions": "warmer"}, ())
    ]
    [(kind, _, request, _)] = _items({"action": "refund", "args": {"amount": 3}})
    assert kind is RequestType.APPROVAL and request["args"] == {"amount": 3}
    [(kind, _, request, _)] = _items({"temperature": 3})
    assert kind is question and '"temperature": 3' in request["question"]


def test_hitl_and_agent_inbox_values_map_to_one_item_per_call() -> None:
    batched = {
        "action_requests": [
            {"name": "refund", "args": {"a": 1}, "description": "Refund?"},
            {"name": "ask", "args": {"question": "Which?"}, "description": "Ask"},
        ],
        "review_configs": [
            {"action_name": "refund", "allowed_decisions": ["approve", "reject"]},
            {"action_name": "ask", "allowed_decisions": ["respond"]},
        ],
    }
    [(k1, s1, r1, a1), (k2, _, r2, a2)] = _items(batched)
    assert (k1, s1, r1["action"], a1) == (
        RequestType.APPROVAL,
        InterruptShape.HITL_BATCHED,
        "refund",
        ("approve", "reject"),
    )
    assert (k2, r2, a2) == (RequestType.QUESTION, {"question": "Which?"}, ("respond",))

    inbox = {
        "action_request": {"action": "ask_user", "args": {}},
        "config": {"allow_respond": True, "allow_accept": False, "allow_edit": False},
        "description": "What is the order number?",
    }
    assert _items([inbox, inbox])[1] == (
        RequestType.QUESTION,
        InterruptShape.AGENT_INBOX_LIST,
        {"question": "What is the order number?"},
        ("response",),
    )


def test_per_call_response_schema_gives_the_allowed_decisions_and_the_edit_schema() -> None:
    schema = {
        "$defs": {
            "ApproveDecision": {"properties": {"type": {"const": "approve"}}},
            "EditDecision": {
                "properties": {
                    "type": {"const": "edit"},
                    "edited_action": {"$ref": "#/$defs/EditedAction"},
                }
            },
            "EditedAction": {"properties": {"args": {"$ref": "#/$defs/refund"}}},
            "refund": {
                "type": "object",
                "properties": {"kind": {"const": "approve"}, "amount": {"type": "integer"}},
            },
        },
        "oneOf": [{"$ref": "#/$defs/ApproveDecision"}, {"$ref": "#/$defs/EditDecision"}],
    }
    value = {"type": "tool_approval", "tool_call_id": "c1", "name": "refund", "args": {}}
    [(kind, shape, request, allowed)] = _items(value, schema)
    assert (kind, shape, allowed) == (
        RequestType.APPROVAL,
        InterruptShape.HITL_PER_CALL,
        ("approve", "edit"),
    )
    assert request["args_schema"]["properties"]["amount"] == {"type": "integer"}


def test_decisions_of_every_status_give_non_none_resume_values(
    handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_graph")
    [approval] = adapter.start({"request": {"order_id": "A-1"}}, thread_id="t-c").handoffs
    cancelled = handoffs.cancel(approval.id, reason="customer withdrew")
    assert cancelled.status is Status.CANCELLED

    resume_thread(cancelled, handoffs=handoffs)

    values = adapter.graph.get_state({"configurable": {"thread_id": "t-c"}}).values
    assert values["decision"]["type"] == "reject"
    assert values["decision"]["message"] == "The request was cancelled: customer withdrew"


def test_an_undeliverable_interrupt_reaches_the_graph_as_a_reject_decision(
    redis: Redis, handoffs: Handoffs, graph_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_graph")
    [pending] = adapter.start({"request": {"order_id": "C-3"}}, thread_id="t-u").handoffs
    start = handoffs.store.begin_task(pending.id, TaskKind.DELIVER, run_token="job-1")
    handoffs.store.finish_task(
        pending.id, TaskKind.DELIVER, attempt=start.attempt, error="not_in_channel", permanent=True
    )

    resume_thread(handoffs.get(pending.id), handoffs=handoffs)

    state = adapter.graph.get_state({"configurable": {"thread_id": "t-u"}}).values
    assert state["decision"]["outcome"] == "undeliverable"
    assert state["steps"][-1].startswith("not refunded: The request could not be delivered")
    assert graphs.tool_runs(redis) == []
