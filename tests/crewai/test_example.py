"""examples/crewai_refund.py (it needs CrewAI, so it is tested here, in the side
environment, rather than in tests/test_examples.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from redis import Redis

from examples import crewai_refund
from examples._common import wait_for_result
from store.models import RequestType
from tests.conftest import WorkerProcesses
from tests.crewai.test_flows import _ready
from tests.support.adapter_runs import adapter_env
from tests.support.preloaded_workers import start_preloaded_worker
from worker.adapters.crewai import resume_flow
from worker.client import Handoffs


@pytest.fixture
def example_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})
    crewai_refund.slack._handoffs = None  # made again from the next test's environment


def test_crewai_example_asks_for_the_card_then_refunds_as_approved(
    handoffs: Handoffs, example_env: dict
) -> None:
    flow_id = crewai_refund.start_flow()
    [question] = handoffs.list_pending(run_id=flow_id).items
    assert question.request_type is RequestType.QUESTION
    assert question.agent_name == "crewai-example"

    answered = handoffs.decide(question.id, "answered", by="U1", answer="Visa ending 4242")
    asyncio.run(resume_flow(answered, handoffs=handoffs))
    [approval] = handoffs.list_pending(run_id=flow_id).items
    assert approval.payload.action.args == {  # type: ignore[union-attr]
        "order_id": "A-1001",
        "amount_usd": 30,
        "card": "Visa ending 4242",
    }

    edited = handoffs.decide(approval.id, "approved", by="U1", edited_args={"amount_usd": 20})
    asyncio.run(resume_flow(edited, handoffs=handoffs))

    result = wait_for_result(handoffs, crewai_refund.EXAMPLE, flow_id, timeout=1)
    assert result == "refunded 20 USD on A-1001 to Visa ending 4242"


def test_crewai_example_main_runs_through_a_real_worker(
    redis: Redis,
    workers: WorkerProcesses,
    example_env: dict,
    capsys: pytest.CaptureFixture[str],
) -> None:
    start_preloaded_worker(workers, ["examples.crewai_refund"], extra_env={})
    _ready(redis, workers)

    assert crewai_refund.main(["--auto"]) == 0

    printed = capsys.readouterr().out
    assert "waits for a person (one question, then an approval)" in printed
    assert "The worker resumed the flow: refunded 30 USD on A-1001 to Visa ending 4242" in printed
