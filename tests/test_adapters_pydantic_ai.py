"""The Pydantic AI adapter, with real Pydantic AI runs (a scripted ``FunctionModel``, no
network) and real `handoff worker` processes: deferred tool calls → handoffs → decisions →
the run continues once, from its stored message history, to the right output."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic_ai import DeferredToolResults, ToolDenied
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolApproved
from redis import Redis

from store.models import Handoff, RequestType, Status, TaskKind
from tests.conftest import WorkerProcesses
from tests.support import adapter_pydantic_agents as agents
from tests.support import agent_run_checks
from tests.support.adapter_runs import adapter_env, make_adapter, recorded
from tests.support.preloaded_workers import (
    hanging_once,
    start_preloaded_worker,
)
from worker.adapters.pydantic_ai import (
    RESUME_TARGET,
    CallKind,
    PydanticAIHandoffs,
    PydanticAIResume,
    resume_run,
)
from worker.client import Handoffs

PRELOAD = ("pydantic_ai", "tests.support.adapter_pydantic_agents")


@pytest.fixture
def agent_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """Environment of the agents' tools (the test Redis), here and in workers."""
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


def _adapter(handoffs: Handoffs, factory: str, **options: Any) -> PydanticAIHandoffs:
    return make_adapter(PydanticAIHandoffs, handoffs, agents.__name__, factory, **options)


def _finished(redis: Redis) -> list[dict[str, Any]]:
    return recorded(redis, agents.FINISHED)


def _resume(handoffs: Handoffs, handoff_id: str) -> None:
    asyncio.run(resume_run(handoffs.get(handoff_id), handoffs=handoffs))


# -- through real workers ---------------------------------------------------------------


def test_two_approvals_continue_the_run_once_with_an_edit_and_a_denial_message(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, agent_env: dict
) -> None:
    start_preloaded_worker(workers, PRELOAD, extra_env=agent_env)
    adapter = _adapter(handoffs, "build_refund_agent")

    outcome = adapter.run_sync("Refund A-1 and B-2", run_id="run-two")

    assert outcome.status == "paused"
    first, second = outcome.handoffs
    assert [h.payload.action.args for h in outcome.handoffs] == [  # type: ignore[union-attr]
        {"order_id": "A-1", "amount_usd": 30},
        {"order_id": "B-2", "amount_usd": 5},
    ]
    action = first.payload.action  # type: ignore[union-attr]
    assert action.description is not None and action.args_schema is not None
    assert action.name == "refund"
    assert action.description.startswith("Refund part of an order.")
    assert action.args_schema["properties"]["amount_usd"]["type"] == "integer"
    assert {h.resume_target for h in outcome.handoffs} == {RESUME_TARGET}
    assert PydanticAIResume.of(first).kind is CallKind.APPROVAL
    assert "Agent 'support' (run run-two) wants to call refund." in (first.context or "")

    output = "refunded 25 USD on A-1 | The reviewer rejected this call: B-2 was already refunded"
    agent_run_checks.edit_then_reject_continue_the_run_once(
        redis, handoffs, adapter, agents, (first, second), output=output
    )


@pytest.mark.parametrize("factory", ["build_refund_agent", "build_refund_agent_with_capability"])
def test_worker_killed_mid_resume_continues_the_run_without_running_a_tool_twice(
    redis: Redis, workers: WorkerProcesses, agent_env: dict, factory: str
) -> None:
    handoffs = hanging_once(redis, workers, PRELOAD, hang_key=agents.HANG_ONCE, extra_env=agent_env)
    adapter = _adapter(handoffs, factory)
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-kill").handoffs

    agent_run_checks.worker_killed_mid_resume_runs_no_tool_twice(
        redis,
        workers,
        handoffs,
        agents,
        (first, second),
        first_edit=None,
        output="refunded 30 USD on A-1 | refunded 5 USD on B-2",
    )


# -- the resume target called in this process, as a worker calls it ---------------------


@pytest.mark.parametrize(
    "factory", ["build_two_step_agent", "build_two_step_agent_with_capability"]
)
def test_a_continued_run_that_stops_again_hands_the_next_approval_to_people(
    redis: Redis, handoffs: Handoffs, agent_env: dict, factory: str
) -> None:
    adapter = _adapter(handoffs, factory)
    [first] = adapter.run_sync("Refund A-1, then B-2", run_id="run-steps").handoffs

    outcome = asyncio.run(adapter.resume(handoffs.decide(first.id, "approved", by="U1")))

    assert outcome is not None and outcome.status == "paused"
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]
    [second] = handoffs.list_pending(run_id="run-steps").items
    assert [h.id for h in outcome.handoffs] == [second.id]
    assert second.payload.action.args == {"order_id": "B-2", "amount_usd": 5}  # type: ignore[union-attr]
    assert second.payload.action.description.startswith("Refund part")  # type: ignore[union-attr]
    assert second.resume_target == RESUME_TARGET
    assert PydanticAIResume.of(second).pause != PydanticAIResume.of(first).pause

    asyncio.run(resume_run(handoffs.decide(second.id, "approved", by="U1"), handoffs=handoffs))

    assert adapter.final_output("run-steps") == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    assert len(agents.tool_runs(redis)) == 2


def test_the_question_tool_gets_the_persons_answer_as_its_result(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_question_agent")
    outcome = adapter.run_sync("Refund A-1", run_id="run-q")
    question, refund = outcome.handoffs  # in the order the model called them
    assert question.request_type is RequestType.QUESTION
    assert refund.request_type is RequestType.APPROVAL
    assert question.payload.question == "Which card?"  # type: ignore[union-attr]
    assert question.payload.choices == ["Visa", "Amex"]  # type: ignore[union-attr]
    assert PydanticAIResume.of(question).kind is CallKind.QUESTION
    # A tool that needs no approval ran in the same step, once.
    assert agents.tool_runs(redis) == [{"tool": "lookup", "args": ["A-1"]}]

    answered = handoffs.decide(question.id, "answered", by="U_ALICE", answer="Visa")
    assert asyncio.run(adapter.resume(answered)) is None  # waits for the refund's decision
    asyncio.run(resume_run(handoffs.decide(refund.id, "approved", by="U_A"), handoffs=handoffs))

    assert adapter.final_output("run-q") == "Visa | A-1 found | refunded 30 USD on A-1"
    assert [run["tool"] for run in agents.tool_runs(redis)] == ["lookup", "refund"]


def test_a_declined_question_reaches_the_model_as_a_failed_tool_call(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_question_agent")
    question, refund = adapter.run_sync("Refund A-1", run_id="run-q-no").handoffs

    handoffs.decide(question.id, "rejected", by="U_ALICE", comment="ask the customer")
    _resume(handoffs, question.id)
    _resume(handoffs, handoffs.decide(refund.id, "approved", by="U_A").id)

    output = adapter.final_output("run-q-no")
    assert output.startswith('{"error":"The person did not answer: ask the customer"}')


def test_a_tool_that_raises_approval_required_is_approved_and_runs_with_the_edit(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_conditional_agent")
    outcome = adapter.run_sync("Refund A-1 and B-2", run_id="run-cond")

    # Only the call over 100 USD asked; the small one ran at once.
    [approval] = outcome.handoffs
    assert approval.payload.action.args == {"order_id": "A-1", "amount_usd": 300}  # type: ignore[union-attr]
    assert agents.tool_runs(redis) == [{"tool": "large_refund", "args": ["B-2", 20]}]
    assert (approval.context or "").endswith("wants to call large_refund. Why: over 100 USD")

    edited = handoffs.decide(approval.id, "approved", by="U_A", edited_args={"amount_usd": 250})
    asyncio.run(resume_run(edited, handoffs=handoffs))

    assert adapter.final_output("run-cond") == "refunded 250 USD on A-1 | refunded 20 USD on B-2"
    assert agents.tool_runs(redis)[-1] == {"tool": "large_refund", "args": ["A-1", 250]}


def test_an_external_tool_call_becomes_a_question_whose_answer_is_its_result(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_external_agent")
    [handoff] = adapter.run_sync("Ship A-1 again", run_id="run-ext").handoffs

    assert handoff.request_type is RequestType.QUESTION
    assert PydanticAIResume.of(handoff).kind is CallKind.EXTERNAL
    question = handoff.payload.question  # type: ignore[union-attr]
    assert question == (
        'The agent needs the result of ship_replacement with {"order_id": "A-1"}. Reply with it.'
    )
    assert "a person in the warehouse does it" in (handoff.context or "")

    answered = handoffs.decide(handoff.id, "answered", by="U_W", answer="shipped, tracking 42")
    asyncio.run(resume_run(answered, handoffs=handoffs))

    assert adapter.final_output("run-ext") == "shipped, tracking 42"


def test_an_expired_approval_reaches_the_model_as_a_denial(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_two_step_agent", expires_in=0.2)
    [approval] = adapter.run_sync("Refund A-1", run_id="run-exp").handoffs
    time.sleep(0.3)
    assert handoffs.store.expire_due() == [approval.id]

    outcome = asyncio.run(adapter.resume(handoffs.get(approval.id)))

    # The denial is the first result; the model goes on to its next turn.
    assert outcome is not None and outcome.status == "paused"
    history = outcome.messages
    denial = [
        part
        for message in history
        for part in getattr(message, "parts", [])
        if getattr(part, "tool_call_id", None) == "call_a1" and part.part_kind == "tool-return"
    ]
    assert [part.content for part in denial] == [  # type: ignore[attr-defined]
        "Not run. Nobody decided in time; the request expired."
    ]
    assert agents.tool_runs(redis) == []


def test_an_undeliverable_approval_reaches_the_model_as_a_denial(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-undeliverable").handoffs
    start = handoffs.store.begin_task(first.id, TaskKind.DELIVER, run_token="job-1")
    handoffs.store.finish_task(
        first.id, TaskKind.DELIVER, attempt=start.attempt, error="is_archived", permanent=True
    )
    assert handoffs.get(first.id).status is Status.UNDELIVERABLE

    _resume(handoffs, first.id)
    _resume(handoffs, handoffs.decide(second.id, "approved", by="U1").id)

    output = adapter.final_output("run-undeliverable")
    assert output.startswith("Not run. The request could not be delivered")
    assert "is_archived" in output
    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["B-2", 5]}]


def test_a_repeated_resume_of_a_continued_run_runs_nothing_again(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_agent")
    first, second = adapter.run_sync("Refund A-1 and B-2", run_id="run-rep").handoffs
    _resume(handoffs, handoffs.decide(first.id, "approved", by="U1").id)
    _resume(handoffs, handoffs.decide(second.id, "approved", by="U1").id)

    for handoff_id in (first.id, second.id, second.id):
        _resume(handoffs, handoff_id)

    assert len(agents.tool_runs(redis)) == 2
    assert len(_finished(redis)) == 1


def test_the_stored_history_is_pydantic_ais_own_json_and_continues_a_plain_run(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_refund_agent")
    first, _ = adapter.run_sync("Refund A-1 and B-2", run_id="run-json").handoffs
    pause_id = PydanticAIResume.of(first).pause.pause_id

    raw = redis.get(f"{handoffs.store.keys.prefix}pai:history:{pause_id}")
    assert raw is not None
    messages = ModelMessagesTypeAdapter.validate_json(raw)
    assert isinstance(messages[0], ModelRequest)
    assert isinstance(messages[0].parts[0], UserPromptPart)
    assert messages[0].parts[0].content == "Refund A-1 and B-2"

    # What the worker does, by hand: Pydantic AI's own resume.
    results = DeferredToolResults(
        approvals={
            "call_a1": ToolApproved(override_args={"order_id": "A-1", "amount_usd": 1}),
            "call_b2": ToolDenied("no"),
        }
    )
    result = agents.build_refund_agent().run_sync(
        message_history=messages, deferred_tool_results=results
    )
    assert result.output == "refunded 1 USD on A-1 | no"


def _tamper(redis: Redis, adapter: PydanticAIHandoffs, handoff: Handoff, **changes: Any) -> None:
    """Change the stored call of ``handoff`` in its stop's history, as someone writing to
    Redis could."""
    pause_id = PydanticAIResume.of(handoff).pause.pause_id
    messages = adapter.history(pause_id)
    [response] = [m for m in messages if isinstance(m, ModelResponse)]
    response.parts = [
        replace(part, **changes)
        if isinstance(part, ToolCallPart) and part.tool_call_id == "call_a1"
        else part
        for part in response.parts
    ]
    key = f"{adapter.handoffs.store.keys.prefix}pai:history:{pause_id}"
    redis.set(key, ModelMessagesTypeAdapter.dump_json(messages))


def test_an_approved_call_runs_with_the_arguments_approved_whatever_the_history_says(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_two_step_agent")
    [approval] = adapter.run_sync("Refund A-1, then B-2", run_id="run-bound").handoffs
    _tamper(redis, adapter, approval, args={"order_id": "A-1", "amount_usd": 999})

    asyncio.run(adapter.resume(handoffs.decide(approval.id, "approved", by="U1")))

    assert agents.tool_runs(redis) == [{"tool": "refund", "args": ["A-1", 30]}]


def test_a_stored_call_of_another_tool_than_the_approved_one_is_not_run(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_question_agent")
    question, refund = adapter.run_sync("Refund A-1", run_id="run-swapped").handoffs
    _tamper(redis, adapter, refund, tool_name="lookup", args={"order_id": "B-2"})

    _resume(handoffs, handoffs.decide(question.id, "answered", by="U1", answer="Visa").id)
    _resume(handoffs, handoffs.decide(refund.id, "approved", by="U1").id)

    assert adapter.final_output("run-swapped") == (
        "Visa | A-1 found | Not run: the stored call is not the refund call that was approved."
    )
    assert agents.tool_runs(redis) == [{"tool": "lookup", "args": ["A-1"]}]


def test_deps_are_built_for_the_run_in_the_agent_and_in_the_worker(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(
        handoffs, "build_deps_agent", deps=f"{agents.__name__}:make_deps", agent_name="shop"
    )
    [approval] = adapter.run_sync("Refund A-1", run_id="run-deps").handoffs
    assert "Agent 'shop' (run run-deps)" in (approval.context or "")

    asyncio.run(resume_run(handoffs.decide(approval.id, "approved", by="U1"), handoffs=handoffs))

    assert adapter.final_output("run-deps") == "refunded 7 EUR on A-1 for run-deps"


def test_a_run_that_needs_nobody_finishes_at_once_and_hands_nothing_off(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_chat_agent")

    outcome = adapter.run_sync("Hello", run_id="run-chat")

    assert outcome.status == "finished" and outcome.handoffs == []
    assert outcome.output == "Nothing to do." == adapter.final_output("run-chat")
    assert _finished(redis) == []  # on_finish is for runs a worker finished
    assert handoffs.list_pending(run_id="run-chat").items == []


def test_an_agent_that_cannot_output_deferred_tool_requests_is_refused_before_it_runs(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_unstoppable_agent")
    keys = set(redis.keys())

    with pytest.raises(TypeError, match=r"add DeferredToolRequests to its output_type"):
        adapter.run_sync("Refund A-1 and B-2", run_id="run-refused")

    assert set(redis.keys()) == keys
    assert agents.tool_runs(redis) == []


def test_a_call_id_used_again_in_a_later_stop_runs_that_call_too(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    # Some models name calls alike turn after turn (TestModel: "pyd_ai_tool_call_id__<tool>"):
    # an approved call's recorded result belongs to its stop, not to the id alone.
    adapter = _adapter(handoffs, "build_same_id_agent")
    [first] = adapter.run_sync("Refund A-1, then B-2", run_id="run-same").handoffs
    outcome = asyncio.run(adapter.resume(handoffs.decide(first.id, "approved", by="U1")))
    assert outcome is not None
    [second] = outcome.handoffs

    _resume(handoffs, handoffs.decide(second.id, "approved", by="U1").id)

    assert adapter.final_output("run-same") == "refunded 30 USD on A-1 | refunded 5 USD on B-2"
    assert [run["args"] for run in agents.tool_runs(redis)] == [["A-1", 30], ["B-2", 5]]


def test_pydantic_ais_test_model_runs_offline_through_a_stop(
    redis: Redis, handoffs: Handoffs, agent_env: dict
) -> None:
    adapter = _adapter(handoffs, "build_testmodel_agent")
    [approval] = adapter.run_sync("Refund", run_id="run-tm").handoffs
    assert approval.payload.action.name == "refund"  # type: ignore[union-attr]
    args = approval.payload.action.args  # type: ignore[union-attr]

    asyncio.run(resume_run(handoffs.decide(approval.id, "approved", by="U1"), handoffs=handoffs))

    expected = f"refunded {args['amount_usd']} USD on {args['order_id']}"
    assert adapter.final_output("run-tm") == f'{{"refund":"{expected}"}}'
