"""Task-level human input (``Task(human_input=True)``) reviewed in Slack with
``SlackHumanInput``: a real crew whose agent runs on a scripted model (``CannedLLM``), the
crew's process waiting for each decision as CrewAI's console provider waits for Enter."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from crewai.core.providers.human_input import set_provider
from redis import Redis

from store.models import Handoff, RequestType
from tests.conftest import wait_until
from tests.crewai import flows
from tests.support.adapter_runs import adapter_env, recorded
from worker.adapters.crewai import HumanInputNotGiven, SlackHumanInput
from worker.client import Handoffs


@pytest.fixture
def crew_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """The crew's environment (its model records its calls in the test Redis)."""
    yield from adapter_env(monkeypatch, {"REDIS_URL": redis_url})


class CrewRun:
    """``crew.kickoff()`` in a thread (it blocks while people review), with the provider
    set in that thread's context, as an agent process sets it before kicking off."""

    def __init__(self, provider: SlackHumanInput) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        crew = flows.build_crew()

        def run() -> None:
            set_provider(provider)
            try:
                self.result = crew.kickoff()
            except BaseException as exc:  # handed to the test
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def finish(self) -> Any:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the crew did not finish"
        return self.result


def _next_review(handoffs: Handoffs, *, after: Callable[[Handoff], bool] = lambda h: True) -> Any:
    def pending() -> list[Handoff]:
        return [h for h in handoffs.list_pending().items if after(h)]

    [review] = wait_until(pending, timeout=30)  # type: ignore[misc]
    return review


def _llm_calls(redis: Redis) -> list[dict[str, Any]]:
    return [s for s in recorded(redis, flows.STEPS) if s["step"] == "llm"]


def test_a_rejection_reaches_the_agent_and_the_edited_second_answer_is_the_tasks_output(
    redis: Redis, handoffs: Handoffs, crew_env: dict
) -> None:
    run = CrewRun(SlackHumanInput(handoffs, channel="C0SUPPORT", reviewers=["U0ALICE"]))

    first = _next_review(handoffs)
    assert first.request_type is RequestType.CORRECTION
    assert first.payload.draft == "draft 1"  # type: ignore[union-attr]
    assert first.channel == "C0SUPPORT" and first.reviewers == ["U0ALICE"]
    assert first.resume_target is None  # the crew's process waits for it
    assert "Agent 'writer' finished 'refund note' and asks for a review." in (first.context or "")
    assert first.agent_name == "writer"

    handoffs.decide(first.id, "rejected", by="U_ALICE", comment="Mention the amount")
    second = _next_review(handoffs, after=lambda h: h.id != first.id)
    assert second.payload.draft == "draft 2"  # type: ignore[union-attr]
    assert "Round 2: it answered again after the last review." in (second.context or "")
    # The reviewer's reason was the agent's feedback (CrewAI's own feedback message).
    told = _llm_calls(redis)[-1]["told"]
    assert "Mention the amount" in told

    handoffs.decide(second.id, "approved", by="U_ALICE", corrected_draft="draft 2: 30 USD")

    result = run.finish()
    assert run.error is None, run.error
    assert result.raw == "draft 2: 30 USD"
    assert result.tasks_output[0].raw == "draft 2: 30 USD"
    assert len(_llm_calls(redis)) == 2


def test_an_answer_approved_as_it_is_stands_after_one_review(
    redis: Redis, handoffs: Handoffs, crew_env: dict
) -> None:
    run = CrewRun(SlackHumanInput(handoffs, channel="C0SUPPORT"))

    review = _next_review(handoffs)
    handoffs.decide(review.id, "approved", by="U_BOB", comment="good")

    assert run.finish().raw == "draft 1"
    assert run.error is None
    assert len(_llm_calls(redis)) == 1
    assert handoffs.list_pending().items == []


def test_a_review_nobody_gave_fails_the_task_instead_of_going_on_unreviewed(
    redis: Redis, handoffs: Handoffs, crew_env: dict
) -> None:
    run = CrewRun(SlackHumanInput(handoffs, channel="C0SUPPORT"))

    review = _next_review(handoffs)
    handoffs.cancel(review.id, reason="the order was closed", by="U_CAROL")

    assert run.finish() is None
    assert isinstance(run.error, HumanInputNotGiven), run.error
    assert "ended cancelled" in str(run.error) and "the order was closed" in str(run.error)
    assert len(_llm_calls(redis)) == 1
