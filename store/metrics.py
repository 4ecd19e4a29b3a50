"""The store's side of the metrics: counters every deployment process shares, kept in Redis.

Handoffs are created by agent processes that nobody scrapes, and decided by whichever
process got the click, so what is counted per handoff lives in one hash of the namespace
(``{ns}:metrics``), written by the scripts that already run: CREATE counts a creation by
request type, every closing of a pending handoff (``close_pending``) counts it by request
type, status and where it was decided (``via_class``), and a decision adds the time it took
to a histogram of fixed buckets (``defaults.DECISION_SECONDS_BUCKETS``); a task that uses up
its attempts is counted by kind. ``FigureReader`` reads that hash with the sizes of the
pending indexes, the outbox and the failed tasks, in one script call.

Every process that exposes these (``handoff serve``, ``handoff worker``, ``handoff api``)
shows the same store-wide values: aggregate them with ``max()``, never ``sum()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import Redis

from store import defaults, scripts
from store.decoding import as_text
from store.keys import KeySpace
from store.lua import LuaScript
from store.models import RequestType

VIA_CLASSES = (
    "slack",
    "api",
    "python",
    "cli",
    "admin",
    "policy",
    "expiry",
    "delivery",
    "other",
)
"""Where a handoff was closed, as its counters say: a small fixed set (never a key's name)."""

_VIA_AS_IS = frozenset({"cli", "admin", "policy", "expiry", "delivery"})


def via_class(via: str) -> str:
    """The class of a decision's ``via``, a label of the store's counters: ``slack`` for
    every Slack surface (``slack_button``, ``slack_modal``, ``slack_thread``,
    ``slash_command``), ``api`` for the HTTP API (``api:<key name>``), ``python`` for the
    Python client (its default ``api``), ``cli``, ``admin``, ``policy``, ``expiry``,
    ``delivery`` as they are, and ``other`` for anything else.

    Example: ``via_class("api:billing-agent") == "api"``.
    """
    if via.startswith("slack_") or via == "slash_command":
        return "slack"
    if via.startswith("api:"):
        return "api"
    if via == "api":
        return "python"
    return via if via in _VIA_AS_IS else "other"


@dataclass(frozen=True)
class DecisionTimes:
    """The histogram of time from creation to decision of one request type."""

    buckets: dict[str, int] = field(default_factory=dict)
    """Decisions per bucket, by upper bound (``"60"``, ``"+Inf"``): not cumulative."""
    sum_seconds: float = 0.0

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, decisions at most that long)`` for every bound, ``+Inf`` last, as
        Prometheus reads a histogram."""
        bounds = [str(b) for b in defaults.DECISION_SECONDS_BUCKETS] + ["+Inf"]
        total, rows = 0, []
        for bound in bounds:
            total += self.buckets.get(bound, 0)
            rows.append((bound, total))
        return rows

    @property
    def count(self) -> int:
        """Decisions counted."""
        return sum(self.buckets.values())


@dataclass(frozen=True)
class StoreFigures:
    """What the store's metrics say now (see the module text)."""

    created: dict[str, int]
    """Handoffs created, by request type."""
    closed: dict[tuple[str, str, str], int]
    """Handoffs closed, by (request type, status, via class)."""
    decision_times: dict[str, DecisionTimes]
    """Time from creation to decision, by request type (decisions by people and agents, not
    by a routing policy; expiries, cancels and failed deliveries are not decisions)."""
    given_up: dict[str, int]
    """Tasks that used up their attempts (or failed for good), by task kind, ever."""
    pending: dict[str, int]
    """Pending handoffs now, by request type (every type, 0 included)."""
    outbox: int
    """Tasks in the outbox: waiting, running (under a lease), retrying, timers."""
    outbox_due: int
    """Of those, the ones due now and not yet taken by a dispatcher."""
    oldest_due_seconds: float
    """How long the oldest due entry has been due (0 when none is)."""
    failed: dict[str, int]
    """Tasks marked failed now (``handoff failed`` lists them), by kind."""
    failed_total: int
    """Tasks marked failed now, all kinds (exact even past ``defaults.FAILED_TASKS_COUNTED``)."""


class FigureReader:
    """Reads ``StoreFigures`` in one script call (``scripts.STORE_FIGURES``).

    Example::

        figures = FigureReader(redis, KeySpace("handoff")).read()
        figures.pending["approval"]
    """

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.keys = keys
        self._script = LuaScript(redis, scripts.STORE_FIGURES)
        self._keys = [
            keys.metrics,
            keys.outbox,
            keys.failed,
            *(keys.pending_by_type(t.value) for t in RequestType),
        ]

    def read(self) -> StoreFigures:
        """The figures now."""
        reply = self._script(
            keys=self._keys, args=[self.keys.prefix, defaults.FAILED_TASKS_COUNTED]
        )
        counters, pending, outbox, due, oldest, now, failed_total, failed = reply
        created, closed, times, given_up = _parse_counters(
            {as_text(counters[i]): int(counters[i + 1]) for i in range(0, len(counters), 2)}
        )
        waited = 0.0
        if oldest not in (b"", "", None):
            waited = max(0.0, (int(now) - float(as_text(oldest))) / 1000)
        return StoreFigures(
            created=created,
            closed=closed,
            decision_times=times,
            given_up=given_up,
            pending={t.value: int(n) for t, n in zip(RequestType, pending, strict=True)},
            outbox=int(outbox),
            outbox_due=int(due),
            oldest_due_seconds=waited,
            failed={as_text(failed[i]): int(failed[i + 1]) for i in range(0, len(failed), 2)},
            failed_total=int(failed_total),
        )


def _parse_counters(
    counters: dict[str, int],
) -> tuple[
    dict[str, int], dict[tuple[str, str, str], int], dict[str, DecisionTimes], dict[str, int]
]:
    """The metrics hash's fields (``created:<type>``, ``closed:<type>:<status>:<via>``,
    ``decision:<type>:<bound>``, ``decision_ms:<type>``, ``gave_up:<kind>``), parsed."""
    created: dict[str, int] = {}
    closed: dict[tuple[str, str, str], int] = {}
    buckets: dict[str, dict[str, int]] = {}
    sums: dict[str, int] = {}
    given_up: dict[str, int] = {}
    for name, value in counters.items():
        kind, _, rest = name.partition(":")
        if kind == "created":
            created[rest] = value
        elif kind == "closed":
            parts = rest.split(":")
            if len(parts) == 3:
                closed[(parts[0], parts[1], parts[2])] = value
        elif kind == "decision":
            request_type, _, bound = rest.rpartition(":")
            buckets.setdefault(request_type, {})[bound] = value
        elif kind == "decision_ms":
            sums[rest] = value
        elif kind == "gave_up":
            given_up[rest] = value
    times = {t: DecisionTimes(buckets.get(t, {}), sums.get(t, 0) / 1000) for t in {*buckets, *sums}}
    return created, closed, times, given_up
