"""Old home of the demo agent, kept because its path is stored.

Handoffs that ``handoff dev`` created before the demo moved to ``bot.dev.demo_agent`` name
``bot.demo:on_decision`` as their resume target, in Redis: this alias lets a worker resume
them still. New runs store the new path.
"""

from bot.dev.demo_agent import on_decision

__all__ = ["on_decision"]
