"""CrewAI tasks with ``human_input=True``: the agent's final answer reviewed in Slack
instead of on the console, while the crew waits.

CrewAI asks for a task's human input through a human input provider
(``crewai.core.providers.human_input``, set per context with ``set_provider``); the console
one prints the answer and reads feedback until the person presses Enter. ``SlackHumanInput``
posts the answer as a correction and waits for the decision::

    from crewai.core.providers.human_input import set_provider
    from worker.adapters.crewai import SlackHumanInput

    set_provider(SlackHumanInput(channel="C0123ABCD"))
    crew.kickoff()  # each human_input task waits for a person in Slack

- Approved: the answer stands. Edited: the edited text is the task's answer.
- Rejected with a reason: the reason is the agent's feedback, it answers again, and the new
  answer is posted for review (the console's loop, in Slack).
- Expired, cancelled or undeliverable: nobody reviewed it, so the task fails with
  ``HumanInputNotGiven`` (the console would have waited; an expiry never approves), at
  once: CrewAI does not retry it as it retries a task that failed otherwise.

The crew's process waits: CrewAI keeps a task's conversation in memory only, so a task's
human input cannot be paused and resumed in a worker. To pause for days, put the review in
a Flow step with ``@human_feedback`` (``SlackFeedbackProvider``), which a worker resumes.
``crew.train()`` still asks on the console.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Unpack

from crewai.agents.parser import AgentFinish
from crewai.core.providers.human_input import (
    AsyncExecutorContext,
    ExecutorContext,
    HumanInputProvider,
    SyncHumanInputProvider,
)
from crewai.hooks import HookAborted
from pydantic import BaseModel, ValidationError

from store.exceptions import HandoffError
from store.models import CorrectionPayload, Handoff, Status
from worker.adapters.pauses import HandoffOptions, RequestDefaults, decision_note, option_names
from worker.client import Handoffs, RequestOptions, reject_unknown_options

logger = logging.getLogger(__name__)

_INSTRUCTIONS = (
    "Approve the answer, edit it, or reject it saying what to improve: the agent then "
    "answers again and asks anew."
)


class HumanInputNotGiven(HandoffError, HookAborted):
    """Nobody reviewed a task's answer (the review expired, was cancelled or could not be
    posted): the task fails rather than go on unreviewed.

    A ``HookAborted``, CrewAI's deliberate stop: CrewAI re-runs a task that raised anything
    else (``max_retry_limit`` times), which would post the answer for review again."""


class SlackHumanInput(HumanInputProvider):
    """A CrewAI human input provider that has people review a task's answer in Slack.

    ``handoffs`` defaults to ``Handoffs.from_env()`` (made at the first review);
    ``options`` (``HandoffOptions``: channel, reviewers, expires_in, ...) are given to every
    review. Install it with ``crewai.core.providers.human_input.set_provider``.
    """

    def __init__(self, handoffs: Handoffs | None = None, **options: Unpack[HandoffOptions]) -> None:
        reject_unknown_options("SlackHumanInput", options, option_names(HandoffOptions))
        self.defaults = RequestDefaults.build(**options)
        self._handoffs = handoffs

    @property
    def handoffs(self) -> Handoffs:
        """The client reviews are handed off with."""
        if self._handoffs is None:
            self._handoffs = Handoffs.from_env()
        return self._handoffs

    def setup_messages(self, context: ExecutorContext) -> bool:
        """CrewAI's own message setup is kept."""
        return False

    def post_setup_messages(self, context: ExecutorContext) -> None:
        """Nothing to add after CrewAI's message setup."""

    def handle_feedback(self, formatted_answer: AgentFinish, context: ExecutorContext) -> Any:
        """Have people review the answer until they approve it (what CrewAI calls)."""
        if context._is_training_mode():
            return SyncHumanInputProvider().handle_feedback(formatted_answer, context)
        answer, round_ = formatted_answer, 1
        while True:
            decided = self._review(answer, context, round_)
            final, feedback = _outcome(answer, decided)
            if final is not None:
                return final
            context.messages.append(context._format_feedback_message(feedback))
            answer, round_ = context._invoke_loop(), round_ + 1

    async def handle_feedback_async(
        self, formatted_answer: AgentFinish, context: AsyncExecutorContext
    ) -> Any:
        """``handle_feedback`` for async crews: the wait runs in a thread."""
        if context._is_training_mode():
            return await SyncHumanInputProvider().handle_feedback_async(formatted_answer, context)
        answer, round_ = formatted_answer, 1
        while True:
            decided = await asyncio.to_thread(self._review, answer, context, round_)
            final, feedback = _outcome(answer, decided)
            if final is not None:
                return final
            context.messages.append(context._format_feedback_message(feedback))
            answer, round_ = await context._ainvoke_loop(), round_ + 1

    def _review(self, answer: AgentFinish, context: ExecutorContext, round_: int) -> Handoff:
        """Post the answer for review and wait for the decision."""
        task, crew = context.task, context.crew
        run_id = str(crew.id) if crew is not None else str(task.id if task else "task")
        role = getattr(context.agent, "role", None) or "agent"
        about = (task.name or task.description) if task is not None else "its task"
        said = f"Agent {role!r} finished {_clip(about)!r} and asks for a review."
        if round_ > 1:
            said += f" Round {round_}: it answered again after the last review."
        defaults = self.defaults
        # No resume target: this process waits for the decision itself.
        options: RequestOptions = {
            "context": f"{defaults.context}\n\n{said}" if defaults.context else said,
            "channel": defaults.channel,
            "reviewers": defaults.reviewers,
            "requester": defaults.requester,
            "agent_name": defaults.agent_name or role,
        }
        if defaults.expires_in_seconds is not None:
            options["expires_in"] = defaults.expires_in_seconds
        handoff = self.handoffs.request_correction(
            run_id=run_id,
            thread_id=str(task.id) if task is not None else run_id,
            draft=self._get_output_string(answer),
            instructions=_INSTRUCTIONS,
            **options,
        )
        logger.info(
            "task answer posted for review (round %d)",
            round_,
            extra={"handoff_id": handoff.id, "run_id": run_id},
        )
        return self.handoffs.wait(handoff.id)


def _outcome(answer: AgentFinish, decided: Handoff) -> tuple[AgentFinish | None, str]:
    """The task's final answer, or (None, the feedback for another round)."""
    decision = decided.resume_data
    if decided.status is Status.APPROVED:
        corrected = decision.corrected_draft if decision else None
        payload = decided.payload
        if not corrected or not isinstance(payload, CorrectionPayload):
            return answer, ""
        if corrected == payload.draft:
            return answer, ""
        if isinstance(answer.output, BaseModel):
            try:
                output: Any = type(answer.output).model_validate_json(corrected)
            except ValidationError as exc:
                # Not the answer's shape: the agent gets the edit as what to answer instead.
                return None, f"Answer with this instead, in the required format: {corrected}\n{exc}"
        else:
            output = corrected
        return dataclasses.replace(answer, output=output, text=corrected), ""
    if decided.status is Status.REJECTED:
        reason = decision.comment if decision and decision.comment else None
        return None, reason or "The reviewer rejected this answer; improve it."
    ended = decided.status.value
    raise HumanInputNotGiven(
        f"the review of the task's answer (handoff {decided.id}) ended {ended}: "
        f"{decision_note(decided) or 'nobody reviewed it'}"
    )


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["HumanInputNotGiven", "SlackHumanInput"]
