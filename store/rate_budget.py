"""A budget of calls to a rate-limited API, shared by every process of a deployment.

Some Slack methods allow an app very few calls (``conversations.history`` and
``conversations.replies``: one a minute for apps outside the Slack Marketplace). Each worker
keeping its own count would let N workers make N calls; each call that Slack refuses costs a
429 and a wait. So the calls are counted in Redis, by Redis's clock (workers' clocks may
differ), in one script (``store.scripts.TAKE_BUDGET``).

Why not the ``limits`` package: its Redis strategies time calls by each client's
``time.time()``, offer no way to push the budget back when the API answers 429 all the same
(another app on the same token), and name keys outside the namespace's hash tag.
"""

from __future__ import annotations

import secrets

from redis import Redis

from store import scripts
from store.keys import KeySpace
from store.lua import LuaScript


class RateBudget:
    """Calls to one API method, ``calls_per_minute`` at most, evenly spaced.

    Example::

        budget = RateBudget(redis, KeySpace("ho"), "conversations.history", calls_per_minute=1)
        wait = budget.take()
        if wait:
            ...  # come back in ``wait`` seconds; do not sleep holding a worker
    """

    def __init__(self, redis: Redis, keys: KeySpace, name: str, *, calls_per_minute: float) -> None:
        if calls_per_minute <= 0:
            raise ValueError("calls_per_minute must be positive")
        self.name = name
        self.calls_per_minute = calls_per_minute
        self._key = keys.budget(name)
        self._held = keys.budget_reservations(name)
        self._prefix = keys.prefix
        self._interval_ms = max(1, round(60_000 / calls_per_minute))
        self._script = LuaScript(redis, scripts.TAKE_BUDGET)

    def take(self, holder: str = "") -> float:
        """Take a call if one is free now (returns 0), else the seconds until one is.

        A ``holder`` (say, the task that asks) that must wait gets that call kept for it:
        calling again with the same holder then (and not before) returns 0. Without one,
        whoever asks first when a call is free gets it.
        """
        waited = self._script(
            keys=[self._key, self._held],
            args=[self._prefix, self._interval_ms, 0, secrets.token_hex(8), holder],
        )
        return int(waited) / 1000

    def hold(self, seconds: float) -> None:
        """Make no call for ``seconds`` (the API answered 429 with ``Retry-After``)."""
        if seconds > 0:
            self._script(
                keys=[self._key, self._held],
                args=[self._prefix, self._interval_ms, max(1, int(seconds * 1000)), "", ""],
            )
