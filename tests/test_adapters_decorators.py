"""``require_approval`` and ``ask_human``: plain Python tools that wait for a person, or
hand the call to a worker."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from agents import function_tool
from langchain_core.tools import tool as langchain_tool
from pydantic import TypeAdapter
from redis import Redis

from store.models import Handoff, Status, TaskKind, TaskState
from tests.conftest import ROOT, WorkerProcesses, wait_until
from tests.support import adapter_tools
from tests.support.loop_ticks import LoopTicks
from worker import ask_human, require_approval
from worker.adapters.decorators import (
    APPROVED_CALL_TARGET,
    ApprovalRejected,
    DecisionTimeout,
    QuestionDeclined,
    current_handoff,
    handoff_run,
    question_tool,
)
from worker.client import Handoffs


class Reviewer:
    """Decides the next handoff that shows up, from another thread, like a person would;
    keeps what it was shown."""

    def __init__(
        self, handoffs: Handoffs, outcome: str, *, delay: float = 0.0, **decision: Any
    ) -> None:
        self.handoffs = handoffs
        self.delay = delay
        self.seen: list[Handoff] = []
        self._thread = threading.Thread(target=self._run, args=(outcome, decision), daemon=True)
        self._thread.start()

    def _run(self, outcome: str, decision: dict[str, Any]) -> None:
        time.sleep(self.delay)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pending = self.handoffs.list_pending().items
            if pending:
                self.seen.append(pending[0])
                self.handoffs.decide(pending[0].id, outcome, by="U_ALICE", **decision)
                return
            time.sleep(0.01)

    def join(self) -> Handoff:
        self._thread.join(timeout=10)
        return self.seen[0]


@pytest.fixture
def calls() -> list[tuple[Any, ...]]:
    return []


def _refund_tool(handoffs: Handoffs, calls: list, **options: Any) -> Any:
    @require_approval(handoffs=handoffs, **options)
    def issue_refund(order_id: str, amount_usd: int = 10, *, note: str | None = None) -> str:
        """Refund part of an order.

        Args:
            order_id: The order to refund.
            amount_usd: How much, in US dollars.
            note: Shown to the customer.
        """
        calls.append((order_id, amount_usd, note))
        return f"refunded {amount_usd} USD on {order_id}"

    return issue_refund


def _plain(order_id: str, amount_usd: int = 10, *, note: str | None = None) -> str:
    """Refund part of an order.

    Args:
        order_id: The order to refund.
        amount_usd: How much, in US dollars.
        note: Shown to the customer.
    """
    return ""


# -- what frameworks see ----------------------------------------------------------------


def test_the_core_and_the_decorators_import_no_agent_framework() -> None:
    code = (
        "import sys, worker, worker.adapters, worker.adapters.decorators, "
        "worker.adapters.pauses, worker.jobs\n"
        "frameworks = ('langgraph', 'langchain', 'langchain_core', 'agents', 'openai')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in frameworks))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_wrapper_keeps_name_signature_annotations_and_docstring(handoffs: Handoffs) -> None:
    wrapped = _refund_tool(handoffs, [])

    assert wrapped.__name__ == "issue_refund"
    assert inspect.signature(wrapped) == inspect.signature(_plain)
    assert typing.get_type_hints(wrapped) == typing.get_type_hints(_plain)
    assert wrapped.__doc__ == wrapped.__wrapped__.__doc__
    assert inspect.getdoc(wrapped) == inspect.getdoc(_plain)
    assert not inspect.iscoroutinefunction(wrapped)


def test_the_bare_decorator_wraps_the_function_the_same_way() -> None:
    @require_approval
    def archive(path: str, *, keep_days: int = 30) -> None:
        """Archive a file."""

    assert archive.__name__ == "archive" and archive.__doc__ == "Archive a file."
    assert list(inspect.signature(archive).parameters) == ["path", "keep_days"]
    assert callable(archive.submit)


def test_frameworks_build_the_original_tool_schema_from_the_wrapped_function(
    handoffs: Handoffs,
) -> None:
    wrapped = _refund_tool(handoffs, [])
    original = wrapped.__wrapped__

    as_langchain = langchain_tool(wrapped)
    assert as_langchain.name == "issue_refund"
    assert as_langchain.args == langchain_tool(original).args
    assert set(as_langchain.args) == {"order_id", "amount_usd", "note"}
    assert as_langchain.description == langchain_tool(original).description
    as_openai = function_tool(wrapped)
    assert as_openai.params_json_schema == function_tool(original).params_json_schema
    assert as_openai.description == "Refund part of an order."
    properties = as_openai.params_json_schema["properties"]
    assert properties["order_id"]["description"] == "The order to refund."
    assert TypeAdapter(wrapped).json_schema() == TypeAdapter(_plain).json_schema()


def test_a_framework_calling_the_tool_goes_through_the_approval(
    handoffs: Handoffs, calls: list
) -> None:
    as_langchain = langchain_tool(_refund_tool(handoffs, calls))
    reviewer = Reviewer(handoffs, "approved")

    result = as_langchain.invoke({"order_id": "A-1", "amount_usd": 30})

    assert result == "refunded 30 USD on A-1"
    assert reviewer.join().payload.action.args == {  # type: ignore[union-attr]
        "order_id": "A-1",
        "amount_usd": 30,
        "note": None,
    }
    assert calls == [("A-1", 30, None)]


# -- blocking calls ---------------------------------------------------------------------


def test_positional_and_default_arguments_are_shown_by_name_with_a_schema(
    handoffs: Handoffs, calls: list
) -> None:
    issue_refund = _refund_tool(handoffs, calls, reviewers=["U0ALICE"])
    reviewer = Reviewer(handoffs, "approved")

    with handoff_run("run-42", "ticket-7"):
        assert issue_refund("A-1") == "refunded 10 USD on A-1"

    seen = reviewer.join()
    action = seen.payload.action  # type: ignore[union-attr]
    assert action.name == "issue_refund"
    assert action.args == {"order_id": "A-1", "amount_usd": 10, "note": None}
    assert action.description == "Refund part of an order."
    assert action.args_schema["properties"]["amount_usd"]["type"] == "integer"  # type: ignore[index]
    assert (seen.run_id, seen.thread_id, seen.reviewers) == ("run-42", "ticket-7", ["U0ALICE"])
    assert seen.resume_target is None  # blocking: nothing for a worker to do


def test_approved_call_runs_with_the_reviewers_edits_to_positional_arguments(
    handoffs: Handoffs, calls: list
) -> None:
    issue_refund = _refund_tool(handoffs, calls)
    Reviewer(handoffs, "approved", edited_args={"amount_usd": 25, "note": "sorry"})

    assert issue_refund("A-1", 30) == "refunded 25 USD on A-1"
    assert calls == [("A-1", 25, "sorry")]


def test_rejection_raises_with_who_rejected_and_why(handoffs: Handoffs, calls: list) -> None:
    issue_refund = _refund_tool(handoffs, calls)
    Reviewer(handoffs, "rejected", comment="over the limit")

    with pytest.raises(ApprovalRejected) as raised:
        issue_refund("A-1", 30)

    assert (
        str(raised.value)
        == "Not done: issue_refund was not run; rejected by U_ALICE: over the limit"
    )
    assert raised.value.handoff.status is Status.REJECTED
    assert calls == []


def test_rejection_can_return_a_message_or_what_a_callable_makes_of_it(
    handoffs: Handoffs, calls: list
) -> None:
    as_message = _refund_tool(handoffs, calls, on_reject="message")
    Reviewer(handoffs, "rejected", comment="no")
    assert as_message("A-1") == "Not done: issue_refund was not run; rejected by U_ALICE: no"

    as_value = _refund_tool(handoffs, calls, on_reject=lambda h: {"refused": h.status.value})
    Reviewer(handoffs, "rejected")
    assert as_value("A-1") == {"refused": "rejected"}
    assert calls == []


def test_the_tools_own_exception_propagates_unchanged(handoffs: Handoffs) -> None:
    class PaymentDeclined(Exception):
        pass

    failure = PaymentDeclined("card expired")

    @require_approval(handoffs=handoffs, on_reject="message")
    def charge(amount: int) -> None:
        raise failure

    Reviewer(handoffs, "approved")
    with pytest.raises(PaymentDeclined) as raised:
        charge(5)
    assert raised.value is failure


def test_a_wait_that_times_out_cancels_the_handoff(handoffs: Handoffs, calls: list) -> None:
    issue_refund = _refund_tool(handoffs, calls, timeout=0.2)

    with pytest.raises(DecisionTimeout) as raised:
        issue_refund("A-1")

    assert handoffs.get(raised.value.handoff.id).status is Status.CANCELLED
    assert calls == []


def test_arguments_json_cannot_hold_are_shown_as_repr_and_passed_unchanged(
    handoffs: Handoffs,
) -> None:
    class Customer:
        def __repr__(self) -> str:
            return "Customer('Dana')"

    received: list[Any] = []

    @require_approval(handoffs=handoffs)
    def email(customer: Customer, subject: str) -> None:
        received.append((customer, subject, current_handoff()))

    dana = Customer()
    reviewer = Reviewer(handoffs, "approved", edited_args={"subject": "Sorry"})
    email(dana, "Hi")

    assert reviewer.join().payload.action.args == {  # type: ignore[union-attr]
        "customer": "Customer('Dana')",
        "subject": "Hi",
    }
    [(customer, subject, approval)] = received
    assert customer is dana and subject == "Sorry"
    assert approval is not None and approval.status is Status.APPROVED


def test_an_async_tool_stays_async_and_waits_without_blocking_the_loop(
    handoffs: Handoffs,
) -> None:
    @require_approval(handoffs=handoffs)
    async def lookup(order_id: str) -> str:
        await asyncio.sleep(0)
        return f"order {order_id}"

    assert inspect.iscoroutinefunction(lookup)

    async def main() -> tuple[str, int]:
        ticks = LoopTicks()
        ticks.start()
        await asyncio.sleep(0)
        result = await lookup("A-1")
        return result, ticks.stop()

    Reviewer(handoffs, "approved", delay=0.3)
    result, ticks = asyncio.run(main())
    assert result == "order A-1"
    assert ticks >= 10  # the loop kept running while the call waited


def test_an_async_tool_rejection_raises(handoffs: Handoffs) -> None:
    @require_approval(handoffs=handoffs)
    async def delete(path: str) -> None:
        raise AssertionError("never runs")

    Reviewer(handoffs, "rejected", comment="keep it")
    with pytest.raises(ApprovalRejected, match="keep it"):
        asyncio.run(delete("/srv/report.pdf"))


# -- durable calls ----------------------------------------------------------------------


@pytest.fixture
def tools_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    yield {"REDIS_URL": redis_url}


def test_submit_hands_the_call_to_a_worker_that_runs_it_once_with_the_edits(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, tools_env: dict
) -> None:
    workers.start()
    pending = adapter_tools.issue_refund.submit("A-1", 30, note="sorry")

    assert pending.is_pending and pending.resume_target == APPROVED_CALL_TARGET
    assert pending.payload.action.args == {  # type: ignore[union-attr]
        "order_id": "A-1",
        "amount_usd": 30,
        "note": "sorry",
    }
    handoffs.decide(pending.id, "approved", by="U_ALICE", edited_args={"amount_usd": 25})
    wait_until(lambda: handoffs.get(pending.id).resume.state is TaskState.COMPLETED, timeout=30)

    calls = [json.loads(raw) for raw in redis.lrange(adapter_tools.CALLS, 0, -1)]
    assert calls == [{"args": ["A-1", 25, "sorry"], "handoff_id": pending.id}]
    then = [json.loads(raw) for raw in redis.lrange(adapter_tools.THEN, 0, -1)]
    assert then == [{"status": "approved", "result": "refunded 25 USD on A-1"}]


def test_a_refused_submitted_call_is_not_made_and_then_is_told(
    redis: Redis, handoffs: Handoffs, tools_env: dict
) -> None:
    from worker.adapters.decorators import run_approved_call

    pending = adapter_tools.issue_refund.submit("A-1")
    run_approved_call(handoffs.decide(pending.id, "rejected", by="U_ALICE"))

    assert redis.llen(adapter_tools.CALLS) == 0
    then = [json.loads(raw) for raw in redis.lrange(adapter_tools.THEN, 0, -1)]
    assert then == [{"status": "rejected", "result": None}]


def test_submit_refuses_arguments_a_worker_could_not_receive(
    handoffs: Handoffs, tools_env: dict
) -> None:
    with pytest.raises(TypeError, match="must be JSON values"):
        adapter_tools.issue_refund.submit("A-1", note=object())  # type: ignore[arg-type]
    assert handoffs.list_pending().items == []


def test_submit_refuses_a_function_a_worker_could_not_import(
    handoffs: Handoffs, calls: list
) -> None:
    local = _refund_tool(handoffs, calls)

    with pytest.raises(TypeError, match="module-level function"):
        local.submit("A-1")
    assert handoffs.list_pending().items == []


# -- questions --------------------------------------------------------------------------


def test_ask_human_returns_the_answer(handoffs: Handoffs) -> None:
    reviewer = Reviewer(handoffs, "answered", answer="Dana")

    answer = ask_human("Which customer first?", choices=["Dana", "Sam"], handoffs=handoffs)

    assert answer == "Dana"
    assert reviewer.join().payload.choices == ["Dana", "Sam"]  # type: ignore[union-attr]


def test_ask_human_without_an_answer_raises_or_returns_a_message(handoffs: Handoffs) -> None:
    Reviewer(handoffs, "rejected", comment="ask the customer")
    with pytest.raises(QuestionDeclined, match="ask the customer"):
        ask_human("Which card?", handoffs=handoffs)

    Reviewer(handoffs, "rejected")
    message = ask_human("Which card?", handoffs=handoffs, on_decline="message")
    assert message == "Not done: the question was not answered; rejected by U_ALICE."


def test_ask_human_with_a_resume_target_returns_the_pending_handoff(handoffs: Handoffs) -> None:
    pending = ask_human(
        "Which card?",
        handoffs=handoffs,
        run_id="run-9",
        resume="tests.support.resume_targets:record",
    )

    assert pending.is_pending
    assert (pending.run_id, pending.resume_target) == (
        "run-9",
        "tests.support.resume_targets:record",
    )


def test_question_tool_has_the_signature_a_framework_needs(handoffs: Handoffs) -> None:
    ask = question_tool(handoffs=handoffs)
    as_langchain = langchain_tool(ask)
    assert as_langchain.name == "ask_human"
    assert set(as_langchain.args) == {"question", "choices"}

    Reviewer(handoffs, "answered", answer="Visa")
    assert as_langchain.invoke({"question": "Which card?"}) == "Visa"


def test_an_undeliverable_approval_is_a_refusal_that_says_why(
    handoffs: Handoffs, calls: list
) -> None:
    issue_refund = _refund_tool(handoffs, calls)

    def slack_refuses() -> None:
        pending = wait_until(lambda: handoffs.list_pending().items)
        store = handoffs.store
        start = store.begin_task(pending[0].id, TaskKind.DELIVER, run_token="job-1")
        store.finish_task(
            pending[0].id,
            TaskKind.DELIVER,
            attempt=start.attempt,
            error="Slack refused the message to C0X: is_archived (the channel is archived)",
            permanent=True,
        )

    refuser = threading.Thread(target=slack_refuses, daemon=True)
    refuser.start()
    with pytest.raises(ApprovalRejected, match=r"could not be delivered.*is_archived") as raised:
        issue_refund("A-1", 30)
    refuser.join(timeout=10)

    assert raised.value.handoff.status is Status.UNDELIVERABLE
    assert calls == []
