"""The examples in ``examples/``: each one's run, decided and resumed here as the dev
worker would resume it (the examples themselves run against `handoff dev`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import (
    agent_framework_refund,
    agent_framework_workflow,
    langgraph_refund,
    openai_agents_refund,
    plain_python_refund,
    pydantic_ai_refund,
)
from examples._common import decide_all, wait_for_result
from store.models import RequestType
from tests.conftest import WorkerProcesses
from tests.support.preloaded_workers import start_preloaded_worker
from worker.adapters.agent_framework.agents import resume_run as resume_af_run
from worker.adapters.langgraph import resume_thread
from worker.adapters.openai_agents import resume_run
from worker.adapters.pauses import forget_built
from worker.adapters.pydantic_ai import resume_run as resume_pydantic_ai_run
from worker.client import Handoffs


@pytest.fixture
def example_env(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("EXAMPLE_CHECKPOINTS", str(tmp_path / "checkpoints.sqlite"))
    forget_built()
    yield
    forget_built()


def test_langgraph_example_pauses_for_approval_and_reports_the_edited_refund(
    handoffs: Handoffs, example_env: None
) -> None:
    outcome = langgraph_refund.start(handoffs, "lg-example-test")
    [approval] = outcome.handoffs
    assert approval.payload.action.args == {"order_id": "A-1001", "amount_usd": 30}  # type: ignore[union-attr]

    decided = handoffs.decide(approval.id, "approved", by="U1", edited_args={"amount_usd": 20})
    resume_thread(decided, handoffs=handoffs)

    result = wait_for_result(handoffs, langgraph_refund.EXAMPLE, "lg-example-test", timeout=1)
    assert result == "refunded 20 USD on A-1001"


def test_langgraph_example_main_runs_through_a_real_worker(
    redis_url: str,
    workers: WorkerProcesses,
    tmp_path: Path,
    example_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"EXAMPLE_CHECKPOINTS": str(tmp_path / "checkpoints.sqlite")}
    start_preloaded_worker(workers, ["examples.langgraph_refund"], extra_env=env)

    assert langgraph_refund.main(["--auto"]) == 0

    assert "The worker resumed the run: refunded 30 USD on A-1001" in capsys.readouterr().out


def test_openai_agents_example_asks_and_refunds_once_both_are_decided(
    handoffs: Handoffs, example_env: None
) -> None:
    outcome = openai_agents_refund.start(handoffs, "oa-example-test")
    assert sorted(h.request_type for h in outcome.handoffs) == [
        RequestType.APPROVAL,
        RequestType.QUESTION,
    ]

    decide_all(handoffs, outcome.handoffs)
    for handoff in outcome.handoffs:
        asyncio.run(resume_run(handoffs.get(handoff.id), handoffs=handoffs))

    result = wait_for_result(handoffs, openai_agents_refund.EXAMPLE, "oa-example-test", timeout=1)
    assert result == "Done: Visa ending 4242; refunded 30 USD on A-1001"


def test_pydantic_ai_example_asks_and_refunds_once_both_are_decided(
    handoffs: Handoffs, example_env: None
) -> None:
    outcome = pydantic_ai_refund.start(handoffs, "pai-example-test")
    assert [h.request_type for h in outcome.handoffs] == [
        RequestType.QUESTION,
        RequestType.APPROVAL,
    ]

    decide_all(handoffs, outcome.handoffs)
    for handoff in outcome.handoffs:
        asyncio.run(resume_pydantic_ai_run(handoffs.get(handoff.id), handoffs=handoffs))

    result = wait_for_result(handoffs, pydantic_ai_refund.EXAMPLE, "pai-example-test", timeout=1)
    assert result == "Done: Visa ending 4242; refunded 30 USD on A-1001"


def test_pydantic_ai_example_main_runs_through_a_real_worker(
    workers: WorkerProcesses, example_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    start_preloaded_worker(workers, ["examples.pydantic_ai_refund"], extra_env={})

    assert pydantic_ai_refund.main(["--auto"]) == 0

    printed = capsys.readouterr().out
    assert "The worker resumed the run: Done: Visa ending 4242; refunded 30 USD" in printed


def test_plain_python_example_runs_with_auto_decisions(
    handoffs: Handoffs, example_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plain_python_refund.main(["--auto"]) == 0

    printed = capsys.readouterr().out
    assert "Answer: Visa ending 4242" in printed
    assert "refunded 30 USD on A-1001 (charged twice; to Visa ending 4242)" in printed


def test_temporal_example_main_runs_through_a_temporal_server_and_a_real_worker(
    workers: WorkerProcesses,
    tmp_path: Path,
    example_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Imported here: only this test needs Temporal (its import takes a second or two).
    from examples import temporal_refund
    from tests.support.temporal_server import ServerUnavailable, start_dev_server

    try:
        server = start_dev_server(tmp_path)
    except ServerUnavailable as exc:
        pytest.skip(f"the Temporal dev server cannot run here: {exc}")
    try:
        env = {"HANDOFF_TEMPORAL_ADDRESS": server.address}
        start_preloaded_worker(workers, ["worker.adapters.temporal"], extra_env=env)

        assert temporal_refund.main(["--auto", "--temporal-address", server.address]) == 0
    finally:
        server.stop()

    printed = capsys.readouterr().out
    assert "waits for 2 decisions" in printed
    assert "The workflow finished: refunded 30 USD on A-1001 to Visa ending 4242" in printed


def test_agent_framework_example_asks_and_refunds_once_both_are_decided(
    handoffs: Handoffs, example_env: None
) -> None:
    outcome = agent_framework_refund.start(handoffs, "af-example-test")
    assert [h.request_type for h in outcome.handoffs] == [
        RequestType.QUESTION,
        RequestType.APPROVAL,
    ]

    decide_all(handoffs, outcome.handoffs)
    for handoff in outcome.handoffs:
        asyncio.run(resume_af_run(handoffs.get(handoff.id), handoffs=handoffs))

    result = wait_for_result(handoffs, agent_framework_refund.EXAMPLE, "af-example-test", timeout=1)
    assert result == "Done: Visa ending 4242; refunded 30 USD on A-1001"


def test_agent_framework_workflow_example_main_runs_through_a_real_worker(
    workers: WorkerProcesses,
    tmp_path: Path,
    example_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"EXAMPLE_AF_CHECKPOINTS": str(tmp_path / "af-checkpoints")}
    monkeypatch.setenv("EXAMPLE_AF_CHECKPOINTS", env["EXAMPLE_AF_CHECKPOINTS"])
    start_preloaded_worker(workers, ["examples.agent_framework_workflow"], extra_env=env)

    assert agent_framework_workflow.main(["--auto"]) == 0

    printed = capsys.readouterr().out
    assert (
        "The worker resumed the run: refunded A-1001 to Visa ending 4242; sent: We refunded "
        "order A-1001; it shows on your card in 3-5 days." in printed
    )
