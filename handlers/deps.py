"""What the listeners need, put into each request's Bolt context by one middleware."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.reviewers import ReviewerPolicy
from store.repository import HandoffStore

DEPS_KEY = "handoff_deps"


@dataclass(frozen=True)
class HandlerDeps:
    """The store and the reviewer policy of the app."""

    store: HandoffStore
    reviewers: ReviewerPolicy


def inject(deps: HandlerDeps) -> Callable[..., Any]:
    """A Bolt middleware that makes ``deps`` available as ``context[DEPS_KEY]``."""

    def middleware(context: dict[str, Any], next: Callable[[], Any]) -> Any:
        context[DEPS_KEY] = deps
        return next()

    return middleware


def deps_of(context: dict[str, Any]) -> HandlerDeps:
    """The dependencies the middleware put into the context."""
    return context[DEPS_KEY]  # type: ignore[no-any-return]
