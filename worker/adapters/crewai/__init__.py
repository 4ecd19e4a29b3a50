"""CrewAI adapter: the human feedback of Flows and the human input of tasks answered in
Slack instead of on the console.

Install with ``pip install 'slack-handoff[crewai]'``.

- ``SlackFeedbackProvider`` (``worker.adapters.crewai.flows``): a ``@human_feedback``
  provider. The step becomes an approval, a correction or a question; the flow pauses
  (``HumanFeedbackPending``), its state is kept, and a worker resumes it with the answer,
  once (``Flow.from_pending`` + ``resume_async``).
- ``SlackHumanInput`` (``worker.adapters.crewai.tasks``): a human input provider for
  ``Task(human_input=True)``. The answer is reviewed in Slack while the crew waits (CrewAI
  cannot resume a task's human input in another process).
"""

from worker.adapters.crewai.flows import (
    ChosenOutcome,
    CrewAIResume,
    SlackFeedbackProvider,
    UnsupportedFlow,
    resume_flow,
)
from worker.adapters.crewai.requests import FeedbackRequest, FeedbackShape
from worker.adapters.crewai.tasks import HumanInputNotGiven, SlackHumanInput

__all__ = [
    "ChosenOutcome",
    "CrewAIResume",
    "FeedbackRequest",
    "FeedbackShape",
    "HumanInputNotGiven",
    "SlackFeedbackProvider",
    "SlackHumanInput",
    "UnsupportedFlow",
    "resume_flow",
]
