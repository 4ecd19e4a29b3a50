"""``/handoff stats``: what is waiting now, and how decisions went over a recent window.

What is pending comes from the store's pending indexes (their sizes, no handoff is read);
decisions, time to decision, expiries, undeliverable handoffs and failed resumes come from
the namespace's audit stream since the start of the window; failed deliveries and resumes
now from the store's failed set.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.queries.audit_export import iter_raw_audit
from store.models import AuditEvent, RequestType, TaskKind
from store.repository import HandoffStore

CHANNELS_SHOWN = 10
"""Channels listed by pending count (the busiest first)."""

_LOOKUP_BATCH = 500
_COUNTED = (
    b'"decided"',
    b'"expired"',
    b'"cancelled"',
    b'"undeliverable"',
    b'"resume_failed"',
)
FAILED_DELIVERIES_SHOWN = 5
"""Ids of failed deliveries listed by ``/handoff stats`` (the newest first)."""


@dataclass(frozen=True)
class Stats:
    """Figures for one window; times in seconds."""

    since: datetime
    window: timedelta
    pending: int
    pending_by_type: dict[str, int]
    pending_by_channel: dict[str, int]
    """The busiest ``CHANNELS_SHOWN`` channels; handoffs posted to the default channel
    without naming one are not in any channel's count."""
    decided: int
    """Decisions by people (approved, rejected, answered)."""
    expired: int
    cancelled: int
    median_decision_seconds: float | None
    p90_decision_seconds: float | None
    failed_resumes: int
    """Resumes that used up their attempts during the window."""
    failing_resumes: int
    """Resumes marked failed right now (``/handoff retry <id>`` queues them again)."""
    undeliverable: int = 0
    """Handoffs closed ``undeliverable`` during the window (Slack refused their message)."""
    failed_deliveries: tuple[str, ...] = ()
    """Handoffs whose delivery is marked failed right now, the newest first (at most
    ``FAILED_DELIVERIES_SHOWN``; ``failed_deliveries_total`` counts them all)."""
    failed_deliveries_total: int = 0

    @property
    def closed(self) -> int:
        """Handoffs that stopped being pending during the window, however."""
        return self.decided + self.expired + self.cancelled + self.undeliverable

    @property
    def expiry_rate(self) -> float | None:
        """Share of the closed handoffs that expired; None when none closed."""
        return self.expired / self.closed if self.closed else None


def compute_stats(
    store: HandoffStore, *, window: timedelta = timedelta(days=7), now: datetime | None = None
) -> Stats:
    """Figures for the last ``window`` (default 7 days).

    Reads every audit event of the window (seconds for hundreds of thousands): run it off the
    request path.
    """
    since = (now or datetime.now(UTC)) - window
    by_type = _pending_by_type(store)
    counts: Counter[str] = Counter()
    decided_at: dict[str, datetime] = {}
    for _, raw in iter_raw_audit(store, since=since):
        # Most events are creations, deliveries and attempts: skip them unparsed.
        if not any(name in raw for name in _COUNTED):
            continue
        event = AuditEvent.from_json(raw)
        counts[event.event] += 1
        if event.event == "decided":
            decided_at[event.handoff_id] = event.at
    created_at = _created_at(store, list(decided_at))
    waits = sorted(
        (decided_at[i] - created_at[i]).total_seconds() for i in decided_at if i in created_at
    )
    failed = store.failed_tasks()
    failing = sum(1 for kind, _ in failed if kind is TaskKind.RESUME)
    undelivered = [i for kind, i in reversed(failed) if kind is TaskKind.DELIVER]
    return Stats(
        since=since,
        window=window,
        pending=store.count_pending(),
        pending_by_type=by_type,
        pending_by_channel=_pending_by_channel(store),
        decided=counts["decided"],
        expired=counts["expired"],
        cancelled=counts["cancelled"],
        median_decision_seconds=percentile(waits, 50),
        p90_decision_seconds=percentile(waits, 90),
        failed_resumes=counts["resume_failed"],
        failing_resumes=failing,
        undeliverable=counts["undeliverable"],
        failed_deliveries=tuple(undelivered[:FAILED_DELIVERIES_SHOWN]),
        failed_deliveries_total=len(undelivered),
    )


def percentile(sorted_values: list[float], percent: float) -> float | None:
    """The nearest-rank percentile of already sorted values; None for no values.

    Example: ``percentile([1, 2, 3, 4], 50) == 2``.
    """
    if not sorted_values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _pending_by_type(store: HandoffStore) -> dict[str, int]:
    counts = store.index_sizes([store.keys.pending_by_type(t.value) for t in RequestType])
    return {t.value: n for t, n in zip(RequestType, counts, strict=True) if n}


def _pending_by_channel(store: HandoffStore) -> dict[str, int]:
    # Channel indexes are named by channel, and there is no list of them: find them by name.
    # SCAN walks the keyspace in steps, without blocking Redis. An index that grew into
    # levels may have emptied its own key: its level names it.
    prefix = store.keys.pending_by_channel("")
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"
    found = {
        key.decode() if isinstance(key, bytes) else str(key)
        for key in store.redis.scan_iter(match=pattern, count=1000, _type="zset")
    }
    grown = prefix.removeprefix(store.keys.prefix)
    for field in store.redis.hkeys(store.keys.lookup_levels):
        name = field.decode() if isinstance(field, bytes) else str(field)
        if name.startswith(grown):
            found.add(store.keys.prefix + name)
    keys = sorted(found)
    sizes = store.index_sizes(keys)
    counts = {key.removeprefix(prefix): n for key, n in zip(keys, sizes, strict=True) if n}
    busiest = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:CHANNELS_SHOWN]
    return dict(busiest)


def _created_at(store: HandoffStore, handoff_ids: list[str]) -> dict[str, datetime]:
    """Creation times of handoffs, from their records (purged ones are left out)."""
    found: dict[str, datetime] = {}
    for start in range(0, len(handoff_ids), _LOOKUP_BATCH):
        for handoff in store.get_many(handoff_ids[start : start + _LOOKUP_BATCH]):
            found[handoff.id] = handoff.created_at
    return found
