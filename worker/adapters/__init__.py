"""Adapters between agent frameworks and handoffs.

Each framework module imports its framework, so import the one you use; this package
itself imports none of them (the core stays usable without any framework installed):

- ``worker.adapters.langgraph``: LangGraph interrupts (``pip install 'slack-handoff[langgraph]'``).
- ``worker.adapters.openai_agents``: OpenAI Agents SDK tool approvals
  (``pip install 'slack-handoff[openai-agents]'``).
- ``worker.adapters.pydantic_ai``: Pydantic AI deferred tool calls (approvals and questions)
  (``pip install 'slack-handoff[pydantic-ai]'``).
- ``worker.adapters.agent_framework``: Microsoft Agent Framework agents' tool approvals and
  workflows' ``request_info`` requests (``pip install 'slack-handoff[agent-framework]'``).
- ``worker.adapters.temporal``: Temporal workflows that ask a person and wait for the decision
  (``pip install 'slack-handoff[temporal]'``).
- ``worker.adapters.decorators``: ``require_approval`` and ``ask_human`` for plain Python
  tools (no framework needed; also exported by ``worker``).
- ``worker.adapters.pauses``: what the framework adapters share: the handoffs of one stop
  of a run, resumed together, exactly once.
"""
