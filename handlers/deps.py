"""What the listeners need, put into each request's Bolt context by one middleware."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

from bot import defaults
from bot.access.reviewers import ReviewerPolicy
from bot.slack_client import TimelyRespond, on_the_clock, start_answer_clock
from store.repository import HandoffStore

DEPS_KEY = "handoff_deps"


@dataclass(frozen=True)
class HandlerDeps:
    """The store and the policies of the app.

    Admins are the reviewer policy's (``reviewers.admins``, the app's one ``AdminPolicy``:
    ``HANDOFF_ADMINS`` decide anything; they and workspace admins run admin commands), so
    who may decide and who may run admin commands come from one place. ``slash_command`` is
    the command the app answers. ``modal_key`` seals what modals remember
    (``handlers.modal_metadata``); without one, modal metadata is not sealed.
    """

    store: HandoffStore
    reviewers: ReviewerPolicy
    slash_command: str = defaults.SLASH_COMMAND
    modal_key: bytes | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> HandlerDeps:
        # Bolt deep-copies a request's context for lazy listeners. These are the app's shared
        # services (thread-safe clients and connection pools): lend them, do not copy them.
        return self

    def is_admin(self, user_id: str) -> bool:
        """May ``user_id`` run admin commands? (``AdminPolicy.is_admin``)"""
        return self.reviewers.admins.is_admin(user_id)


class InjectDeps(Middleware):
    """A Bolt middleware that makes ``deps`` available as ``context[DEPS_KEY]``.

    A ``Middleware`` subclass rather than a function: Bolt calls it directly, while for a
    function middleware it first builds every injectable argument, on every request.
    """

    def __init__(self, deps: HandlerDeps) -> None:
        self.deps = deps

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse | None:
        req.context[DEPS_KEY] = self.deps
        return next()


def deps_of(context: dict[str, Any]) -> HandlerDeps:
    """The dependencies the middleware put into the context."""
    return context[DEPS_KEY]  # type: ignore[no-any-return]


class AnswerInTime(Middleware):
    """A Bolt middleware that gives every request one budget for the Web API calls its
    listeners make before the answer (``bot.slack_client.start_answer_clock``), and a
    ``respond`` that keeps to it: Slack waits 3 seconds for the answer, and a listener that
    looks up user groups, then opens a modal, then replies must not outlast them in sum."""

    def __init__(self, seconds: float = defaults.SLACK_ANSWER_BUDGET_SECONDS) -> None:
        self.seconds = seconds

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse | None:
        context = req.context
        if context.client is not None:
            context["client"] = on_the_clock(context.client)
        if context.response_url:
            context["respond"] = TimelyRespond(
                response_url=context.response_url,
                proxy=context.client.proxy if context.client else None,
                ssl=context.client.ssl if context.client else None,
            )
        start_answer_clock(self.seconds)
        return next()
