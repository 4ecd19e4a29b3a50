"""Bolt listeners, one module per Slack surface; ``register`` attaches them all."""

from slack_bolt import App

from handlers import actions, commands, home, membership, messages, modals
from handlers.deps import AnswerInTime, HandlerDeps, InjectDeps


def register(app: App, deps: HandlerDeps) -> None:
    """Attach every listener of slack-handoff to ``app``, with ``deps`` in their context."""
    app.middleware(AnswerInTime())
    app.middleware(InjectDeps(deps))
    home.register(app)
    actions.register(app)
    modals.register(app)
    messages.register(app)
    membership.register(app)
    commands.register(app, command=deps.slash_command)


__all__ = ["HandlerDeps", "register"]
