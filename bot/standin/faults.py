"""Injected Web API failures: one-off faults queued by ``fail_next``, and a seeded random
mix (``fail_randomly``) for reliability tests that want a flaky Slack rather than one failure.

Each fault is one of the ways a call to Slack goes wrong for the bot:

- ``ratelimited``: HTTP 429 with ``Retry-After``; Slack did nothing.
- ``server_error``: HTTP 500; Slack did nothing.
- ``timeout``: the answer comes later than the bot waits, but the call IS carried out (Slack
  did the work and answered too late).
- ``reset``: the connection is reset before Slack does anything.
- ``answer_lost``: Slack carries the call out, then the connection is reset unanswered.

``timeout`` and ``answer_lost`` are the ambiguous ones: the bot cannot tell from what it got
whether the call happened.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

RATELIMITED = "ratelimited"
SERVER_ERROR = "server_error"
TIMEOUT = "timeout"
RESET = "reset"
ANSWER_LOST = "answer_lost"
KINDS = (RATELIMITED, SERVER_ERROR, TIMEOUT, RESET, ANSWER_LOST)
"""Every kind of random fault, in the order ``fail_randomly`` documents them."""


@dataclass(frozen=True)
class Fault:
    """An injected Web API failure, consumed by the next matching call.

    ``carried_out`` with ``reset_connection``: the call is made first, then the connection is
    reset (the answer is lost). With ``status`` 200 and no ``error``, a ``delay`` only slows
    the answer down and the call is carried out.
    """

    status: int
    retry_after: int | None
    delay: float
    reset_connection: bool
    error: str | None
    carried_out: bool = False
    then: Callable[[dict[str, Any]], None] | None = None
    """Run with the call's parameters after the call is carried out and before its answer
    is lost (say, other people post in the channel meanwhile)."""
    truncated: bool = False
    """With ``carried_out``: the answer's body is cut in half (a connection closed early)."""


class RandomFaults:
    """Fails a share (``rate``) of Web API calls with a kind drawn from ``kinds``.

    Seeded, so one seed gives one sequence of draws (which call gets which draw still
    depends on the order calls arrive in). ``methods`` limits it to some methods (all when
    None). ``timeout_delay`` is how long a ``timeout`` answer takes: make it longer than the
    client's timeout. ``injected`` counts what was injected, by (method, kind).
    """

    def __init__(
        self,
        *,
        rate: float,
        seed: int | None = None,
        kinds: Iterable[str] = KINDS,
        methods: Collection[str] | None = None,
        timeout_delay: float = 2.0,
        retry_after: int = 1,
    ) -> None:
        if not 0 <= rate <= 1:
            raise ValueError("rate is a share of calls, between 0 and 1")
        self.kinds = tuple(kinds)
        unknown = set(self.kinds) - set(KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be some of {', '.join(KINDS)}; got {sorted(unknown)}")
        self.rate = rate
        self.methods = frozenset(methods) if methods is not None else None
        self.timeout_delay = timeout_delay
        self.retry_after = retry_after
        self.injected: Counter[tuple[str, str]] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def draw(self, method: str) -> Fault | None:
        """The fault for this call of ``method``, or None to answer it normally."""
        if self.methods is not None and method not in self.methods:
            return None
        with self._lock:
            if self._random.random() >= self.rate:
                return None
            kind = self._random.choice(self.kinds)
            self.injected[(method, kind)] += 1
        return self.fault(kind)

    def fault(self, kind: str) -> Fault:
        """The ``Fault`` that plays ``kind``."""
        if kind == RATELIMITED:
            return Fault(429, self.retry_after, 0.0, False, None)
        if kind == SERVER_ERROR:
            return Fault(500, None, 0.0, False, None)
        if kind == TIMEOUT:
            return Fault(200, None, self.timeout_delay, False, None)
        if kind == RESET:
            return Fault(500, None, 0.0, True, None)
        return Fault(200, None, 0.0, True, None, carried_out=True)

    def counts(self) -> dict[str, int]:
        """How many faults of each kind were injected so far."""
        with self._lock:
            totals: Counter[str] = Counter()
            for (_, kind), count in self.injected.items():
                totals[kind] += count
            return dict(totals)
