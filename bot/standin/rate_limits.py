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

TIER_CALLS_PER_MINUTE = {1: 1, 2: 20, 3: 50, 4: 100}
"""Slack's rate-limit tiers: calls a minute each method allows (Slack tolerates bursts a
little over them; the stand-in does not)."""
TIERS = {
    "auth.test": 4,
    "chat.delete": 3,
    "chat.getPermalink": 4,
    "chat.postEphemeral": 4,
    "chat.update": 3,
    "conversations.history": 3,
    "conversations.info": 3,
    "conversations.join": 3,
    "conversations.members": 4,
    "conversations.open": 3,
    "conversations.replies": 3,
    "usergroups.list": 2,
    "usergroups.users.list": 2,
    "users.info": 4,
    "views.open": 4,
    "views.publish": 4,
    "views.push": 4,
    "views.update": 4,
}
"""The tier of each method the stand-in answers, from its page of Slack's method reference
(``views.*`` and ``chat.postEphemeral`` are "Tier 4" or "Special"; the history methods are
tier 3 for Marketplace apps, far less for others: see ``limit_like_slack``)."""
POST_MESSAGE_BURST = 10
"""``chat.postMessage`` is "Special": about one message a second per channel, with short
bursts allowed; the stand-in allows this many in any ten seconds, per channel."""


@dataclass
class MethodLimit:
    """At most ``calls`` calls of one method in any ``per_seconds``; ``page_size`` caps the
    messages a page returns (None: the method's own cap)."""

    calls: int
    per_seconds: float
    page_size: int | None = None
    per_channel: bool = False
    """Counted per ``channel`` argument (``chat.postMessage``'s limit), not per method."""
    made: deque[float] = field(default_factory=deque)
    """When the calls inside the current window were made."""
    by_channel: dict[str, deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.calls < 1 or self.per_seconds <= 0:
            raise ValueError("a limit allows at least one call in a positive time")
        if self.page_size is not None and self.page_size < 1:
            raise ValueError("page_size must be at least 1")

    def admit(self, now: float, channel: str = "") -> int | None:
        """Count a call made ``now`` (to ``channel``): None when it is allowed, else the
        ``Retry-After`` (whole seconds, at least 1) to answer with its 429."""
        made = self.by_channel.setdefault(channel, deque()) if self.per_channel else self.made
        while made and made[0] <= now - self.per_seconds:
            made.popleft()
        if len(made) < self.calls:
            made.append(now)
            return None
        return max(1, math.ceil(made[0] + self.per_seconds - now))


class RateLimits:
    """The limits in force, by method, and how many calls each refused."""

    def __init__(self) -> None:
        self.by_method: dict[str, MethodLimit] = {}
        self.refused: Counter[str] = Counter()

    def set(
        self,
        method: str,
        *,
        calls: int,
        per_seconds: float,
        page_size: int | None = None,
        per_channel: bool = False,
    ) -> None:
        """Limit ``method`` (replacing its limit)."""
        self.by_method[method] = MethodLimit(calls, per_seconds, page_size, per_channel)

    def set_tiers(self, *, time_scale: float = 1.0) -> None:
        """Limit every method to its tier (``TIERS``), and ``chat.postMessage`` per
        channel; ``time_scale`` shrinks Slack's minute. Limits set before are replaced."""
        for method, tier in TIERS.items():
            calls = TIER_CALLS_PER_MINUTE[tier]
            self.set(method, calls=calls, per_seconds=SLACK_MINUTE * time_scale)
        self.set(
            "chat.postMessage",
            calls=POST_MESSAGE_BURST,
            per_seconds=POST_MESSAGE_BURST * time_scale,
            per_channel=True,
        )

    def clear(self) -> None:
        """No limits any more."""
        self.by_method.clear()

    def admit(self, method: str, now: float, channel: str = "") -> int | None:
        """None when a call of ``method`` (to ``channel``) made ``now`` is allowed, else its
        ``Retry-After``."""
        limit = self.by_method.get(method)
        if limit is None:
            return None
        wait = limit.admit(now, channel)
        if wait is not None:
            self.refused[method] += 1
        return wait

    def page_size(self, method: str, asked: int) -> int:
        """The page size a call asking for ``asked`` messages gets."""
        limit = self.by_method.get(method)
        if limit is None or limit.page_size is None:
            return asked
        return min(asked, limit.page_size)
