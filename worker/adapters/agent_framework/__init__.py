"""Microsoft Agent Framework adapter: agents' tool approvals and workflows' human-input
requests handed to people, the run continued in a worker, exactly once.

Install with ``pip install 'slack-handoff[agent-framework]'`` (``agent-framework-core``).

- ``AgentFrameworkHandoffs`` (``worker.adapters.agent_framework.agents``): an agent run that
  stops for tool approvals (``approval_mode="always_require"``) or for a declaration-only
  tool (``ask_human_tool()``); its ``AgentSession`` is kept in Redis and continued with the
  decisions.
- ``WorkflowHandoffs`` (``worker.adapters.agent_framework.workflows``): a workflow whose
  executors call ``ctx.request_info(...)``; it is checkpointed to a checkpoint storage that
  every worker reaches (``FileCheckpointStorage`` on shared storage) and resumed from the
  checkpoint with the responses.
"""

from worker.adapters.agent_framework.agents import (
    AgentFrameworkHandoffs,
    AgentOutcome,
    ask_human_tool,
)
from worker.adapters.agent_framework.replies import Approval, Correction, HumanReply, Question
from worker.adapters.agent_framework.user_input import UnsupportedRequest
from worker.adapters.agent_framework.workflows import (
    CheckpointMissing,
    WorkflowHandoffs,
    WorkflowOutcome,
)

__all__ = [
    "AgentFrameworkHandoffs",
    "AgentOutcome",
    "Approval",
    "CheckpointMissing",
    "Correction",
    "HumanReply",
    "Question",
    "UnsupportedRequest",
    "WorkflowHandoffs",
    "WorkflowOutcome",
    "ask_human_tool",
]
