"""Slack's rate limits, as the stand-in plays them.

Slack limits each Web API method per app and workspace, and answers a call over the limit
with HTTP 429 and ``Retry-After`` (whole seconds until a call is allowed again). The tightest
one the bot meets: since 2025, apps outside the Slack Marketplace may call
``conversations.history`` and ``conversations.replies`` once a minute, for 15 messages a page
at most (``limit`` above 15 is cut to 15). ``SlackStandIn.limit_like_slack`` sets those;
``time_scale`` shrinks Slack's minute for tests that cannot wait one (the ``Retry-After``
answered stays in whole seconds, as Slack's does).

See https://docs.slack.dev/apis/web-api/rate-limits/ and the changelog of 2025-05-29.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

SLACK_MINUTE = 60.0
NON_MARKETPLACE_HISTORY_CALLS = 1
"""Calls a minute to each history method for apps outside the Marketplace."""
NON_MARKETPLACE_PAGE_SIZE = 15
"""Messages a page those methods return at most for such apps."""
HISTORY_METHODS = ("conversations.history", "conversations.replies")


@dataclass
class MethodLimit:
    """At most ``calls`` calls of one method in any ``per_seconds``; ``page_size`` caps the
    messages a page returns (None: the method's own cap)."""

    calls: int
    per_seconds: float
    page_size: int | None = None
    made: deque[float] = field(default_factory=deque)
    """When the calls inside the current window were made."""

    def __post_init__(self) -> None:
        if self.calls < 1 or self.per_seconds <= 0:
            raise ValueError("a limit allows at least one call in a positive time")
        if self.page_size is not None and self.page_size < 1:
            raise ValueError("page_size must be at least 1")

    def admit(self, now: float) -> int | None:
        """Count a call made ``now``: None when it is allowed, else the ``Retry-After``
        (whole seconds, at least 1) to answer with its 429."""
        while self.made and self.made[0] <= now - self.per_seconds:
            self.made.popleft()
        if len(self.made) < self.calls:
            self.made.append(now)
            return None
        return max(1, math.ceil(self.made[0] + self.per_seconds - now))


class RateLimits:
    """The limits in force, by method, and how many calls each refused."""

    def __init__(self) -> None:
        self.by_method: dict[str, MethodLimit] = {}
        self.refused: Counter[str] = Counter()

    def set(
        self, method: str, *, calls: int, per_seconds: float, page_size: int | None = None
    ) -> None:
        """Limit ``method`` (replacing its limit)."""
        self.by_method[method] = MethodLimit(calls, per_seconds, page_size)

    def clear(self) -> None:
        """No limits any more."""
        self.by_method.clear()

    def admit(self, method: str, now: float) -> int | None:
        """None when a call of ``method`` made ``now`` is allowed, else its ``Retry-After``."""
        limit = self.by_method.get(method)
        if limit is None:
            return None
        wait = limit.admit(now)
        if wait is not None:
            self.refused[method] += 1
        return wait

    def page_size(self, method: str, asked: int) -> int:
        """The page size a call asking for ``asked`` messages gets."""
        limit = self.by_method.get(method)
        if limit is None or limit.page_size is None:
            return asked
        return min(asked, limit.page_size)
