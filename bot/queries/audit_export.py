"""``handoff audit export``: the namespace's audit stream as JSON Lines.

One line per event, oldest first::

    {"time": "2025-01-31T09:12:03.120000+00:00", "event": "decided", "actor": "U0ALICE",
     "handoff_id": "ho_01J...", "detail": {"status": "approved"}, "id": "1738314723120-0"}

``id`` is the event's entry id in the stream: unique, so overlapping exports deduplicate on it.

Events: ``created``, ``delivery_started``, ``delivered``, ``viewed_full``, ``denied``,
``claimed``, ``voted`` (an approve or reject that counted towards a quorum but did not decide
it, its detail ``outcome``, ``approvals``, ``rejections`` and ``cleared``: whether it cleared
earlier approvals), ``decided``, ``reminded``, ``escalated``, ``reassigned``, ``expired``,
``cancelled``, ``undeliverable``, and the attempts and results of deliveries, message updates
and resumes (``resume_started``, ``resumed``, ``resume_attempt_failed``, ``resume_failed``,
``resume_retry_requested``...). The stream is trimmed to the retention period
(``HANDOFF_RETENTION_DAYS``) by the dispatcher: export it on a schedule to keep more.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

from store.exceptions import HandoffNotFound
from store.models import AuditEvent
from store.repository import HandoffStore


def iter_audit(
    store: HandoffStore, *, since: datetime | None = None
) -> Iterator[tuple[str, AuditEvent]]:
    """Every event of the namespace's audit stream from ``since`` with its entry id, oldest
    first, read in batches so that a long stream is never held in memory at once."""
    for entry_id, raw in iter_raw_audit(store, since=since):
        yield entry_id, AuditEvent.from_json(raw)


def iter_raw_audit(
    store: HandoffStore, *, since: datetime | None = None
) -> Iterator[tuple[str, bytes]]:
    """Like ``iter_audit``, but each event as the JSON the store wrote, unparsed: for readers
    that skip most events, a byte search costs far less than parsing."""
    for entry in store.audit_entries(since=since):
        if entry.raw:
            yield entry.id, entry.raw


def export_audit(
    store: HandoffStore,
    output: IO[str],
    *,
    since: datetime | None = None,
    run_id: str | None = None,
) -> int:
    """Write the audit events as JSON Lines to ``output``; returns how many were written.

    With ``run_id``, only events of that run's handoffs: events name handoffs, and a
    handoff's run comes from its ``created`` event, or from its record when it was created
    before ``since``.
    """
    runs: dict[str, str | None] = {}
    written = 0
    for entry_id, event in iter_audit(store, since=since):
        if event.event == "created" and "run_id" in event.detail:
            runs[event.handoff_id] = str(event.detail["run_id"])
        if run_id is not None and _run_of(store, runs, event.handoff_id) != run_id:
            continue
        output.write(json.dumps(audit_line(event, entry_id), ensure_ascii=False) + "\n")
        written += 1
    return written


def audit_line(event: AuditEvent, entry_id: str) -> dict[str, Any]:
    """One exported event: time (ISO 8601, UTC), event, actor, handoff id, detail, and the
    stream entry id."""
    return {
        "time": event.at.astimezone(UTC).isoformat(),
        "event": event.event,
        "actor": event.actor,
        "handoff_id": event.handoff_id,
        "detail": event.detail,
        "id": entry_id,
    }


def _run_of(store: HandoffStore, runs: dict[str, str | None], handoff_id: str) -> str | None:
    if handoff_id not in runs:
        try:
            runs[handoff_id] = store.get(handoff_id).run_id
        except HandoffNotFound:  # purged after retention: its run is no longer known
            runs[handoff_id] = None
    return runs[handoff_id]
