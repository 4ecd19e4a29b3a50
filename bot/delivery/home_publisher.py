"""The App Home: each viewer's queue of handoffs to decide, and what they decided recently.

The Home is published when a person opens it (``handlers.home``) and refreshed when a
handoff they can see changes (``refresh_homes``, called after each change). To know whom to
refresh without asking Slack, the people who opened the Home recently are kept in a sorted
set, and, per person, the handoffs their published Home shows.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import defaults
from bot.access.reviewers import ReviewerPolicy
from bot.blockkit.home import HOME_QUEUE_SHOWN, HOME_RECENT_SHOWN, render_home
from bot.keys import BotKeys
from bot.queries.listings import Listings
from bot.slack_client import AMBIGUOUS_ERRORS
from store.decoding import as_text
from store.models import Handoff, Status
from store.repository import HandoffStore

logger = logging.getLogger(__name__)


VIEWER_TTL_SECONDS = 14 * 86400
"""A person who has not opened the Home for this long is no longer refreshed."""

RECENT_WINDOW = timedelta(days=7)
"""How far back "recently decided" goes."""

RECENT_SCAN_EVENTS = 500
"""Most audit events read (newest first) per Home build to catch up on the viewer's
decisions since their last build. ``refresh_homes`` records every decision as it happens,
so this only matters for decisions it was not told about."""

RECENT_KEPT = 50
"""Recent decisions remembered per person."""

HOME_PUBLISH_TRIES = 3
"""Publishes of one Home refresh, counting those refused with ``hash_conflict``."""

_PERSON_OUTCOMES = frozenset({Status.APPROVED, Status.REJECTED, Status.ANSWERED})


@dataclass(frozen=True)
class BuiltHome:
    """A Home view and what it shows: the handoffs listed, and the last one of the queue
    when the queue is full (a newer handoff would not appear)."""

    view: dict[str, Any]
    shown: list[str]
    queue_end: str | None


class Homes:
    """Builds, publishes and refreshes App Home tabs.

    Example::

        homes = Homes(store, reviewers)
        homes.opened("U0ALICE")
        homes.publish(client, "U0ALICE")
    """

    def __init__(
        self,
        store: HandoffStore,
        reviewers: ReviewerPolicy,
        *,
        command: str = defaults.SLASH_COMMAND,
    ) -> None:
        self.store = store
        self.reviewers = reviewers
        self.command = command
        self.keys = BotKeys(store.keys)
        self.listings = Listings(store, reviewers)

    def build(
        self, user_id: str, *, notice: str | None = None, now: datetime | None = None
    ) -> BuiltHome:
        """The Home view for ``user_id``, with what it shows."""
        now = now or datetime.now(UTC)
        queue = self.listings.queue(user_id, limit=HOME_QUEUE_SHOWN)
        recent = self.recent_decisions(user_id, now=now)
        view = render_home(
            queue, recent, command=self.command, viewer=user_id, notice=notice, now=now
        )
        queue_ids = [h.id for h in queue.items[:HOME_QUEUE_SHOWN]]
        full = len(queue.items) >= HOME_QUEUE_SHOWN
        return BuiltHome(
            view=view,
            shown=queue_ids + [h.id for h in recent],
            queue_end=queue_ids[-1] if full else None,
        )

    def publish(
        self,
        client: WebClient,
        user_id: str,
        *,
        notice: str | None = None,
        view_hash: str | None = None,
    ) -> None:
        """Publish the Home of ``user_id`` (``views.publish``), and remember what it shows.

        Each publish passes the ``hash`` Slack gave the Home last time (``view_hash``, as an
        ``app_home_opened`` event carries it, or the one kept in Redis), read before the
        state: a refresh rendered from older state than the Home shows is refused with
        ``hash_conflict`` instead of overwriting it. On a conflict the state is read again,
        re-rendered and published with the newer hash, up to ``HOME_PUBLISH_TRIES`` times;
        when no newer hash is known (the answer that carried it was lost), the fresh
        rendering is published without one: it was read after the conflict, so it is at
        least as new as the Home that won.
        """
        hash_key = self.keys.home_hash(user_id)
        known = view_hash or _text_or_none(self.store.redis.get(hash_key))
        for tries_left in range(HOME_PUBLISH_TRIES - 1, -1, -1):
            built = self.build(user_id, notice=notice)
            try:
                answer = client.views_publish(
                    user_id=user_id, view=built.view, **({"hash": known} if known else {})
                )
                break
            except SlackApiError as exc:
                if exc.response.get("error") != "hash_conflict" or not tries_left:
                    raise
                newer = _text_or_none(self.store.redis.get(hash_key))
                logger.info("the Home of %s changed meanwhile; publishing it again", user_id)
                known = newer if newer != known else None
        self._remember_shown(user_id, built, (answer.get("view") or {}).get("hash"))

    def _remember_shown(self, user_id: str, built: BuiltHome, view_hash: str | None) -> None:
        shown_key, end_key = self.keys.home_shown(user_id), self.keys.home_queue_end(user_id)
        pipe = self.store.redis.pipeline(transaction=True)
        if view_hash:
            pipe.set(self.keys.home_hash(user_id), view_hash, ex=VIEWER_TTL_SECONDS)
        pipe.delete(shown_key, end_key)
        if built.shown:
            pipe.sadd(shown_key, *built.shown)
            pipe.expire(shown_key, VIEWER_TTL_SECONDS)
        if built.queue_end:
            pipe.set(end_key, built.queue_end, ex=VIEWER_TTL_SECONDS)
        pipe.execute()

    def opened(self, user_id: str) -> None:
        """Remember that ``user_id`` looks at their Home, so changes refresh it."""
        now_ms = int(time.time() * 1000)
        pipe = self.store.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.home_viewers, {user_id: now_ms})
        pipe.zremrangebyscore(self.keys.home_viewers, "-inf", now_ms - VIEWER_TTL_SECONDS * 1000)
        pipe.execute()

    def viewers(self) -> list[str]:
        """People who opened their Home within ``VIEWER_TTL_SECONDS``."""
        oldest = int(time.time() * 1000) - VIEWER_TTL_SECONDS * 1000
        return [
            as_text(v)
            for v in self.store.redis.zrangebyscore(self.keys.home_viewers, oldest, "+inf")
        ]

    def refresh(self, client: WebClient, handoff: Handoff) -> int:
        """Remember the decision (if it is one), then republish the Homes that ``handoff``
        changes; returns how many were republished.

        Those are the recent viewers whose Home shows it or who decided it, and those who may
        decide it and would see it: their Home's queue, oldest first, is not full, or ends
        with a newer handoff. Busy namespaces thus republish few Homes per change (Slack
        rate-limits ``views.publish``).
        """
        self.note_decision(handoff)
        viewers = self.viewers()
        if not viewers:
            return 0
        pipe = self.store.redis.pipeline(transaction=False)
        for viewer in viewers:
            pipe.sismember(self.keys.home_shown(viewer), handoff.id)
            pipe.get(self.keys.home_queue_end(viewer))
        answers: list[Any] = pipe.execute()
        decider = handoff.resume_data.decided_by if handoff.resume_data else None
        refreshed = 0
        for viewer, shown, end in zip(viewers, answers[0::2], answers[1::2], strict=True):
            would_appear = (
                handoff.is_pending
                and (end is None or handoff.id < as_text(end))
                and self.reviewers.denial(viewer, handoff) is None
            )
            if not (shown or viewer == decider or would_appear):
                continue
            try:
                self.publish(client, viewer)
                refreshed += 1
            except SlackApiError as exc:
                # One person's Home failing (say, they left the workspace) spares the others.
                logger.warning(
                    "cannot refresh the Home of %s: %s", viewer, exc.response.get("error")
                )
            except AMBIGUOUS_ERRORS as exc:  # no answer from Slack: the others may get one
                logger.warning("cannot refresh the Home of %s: %s", viewer, type(exc).__name__)
        return refreshed

    def recent_decisions(self, user_id: str, *, now: datetime | None = None) -> list[Handoff]:
        """What ``user_id`` decided within ``RECENT_WINDOW``, newest first."""
        self._catch_up(user_id)
        oldest_ms = int(((now or datetime.now(UTC)) - RECENT_WINDOW).timestamp() * 1000)
        ids = [
            as_text(i)
            for i in self.store.redis.zrevrangebyscore(
                self.keys.home_decided(user_id), "+inf", oldest_ms, start=0, num=HOME_RECENT_SHOWN
            )
        ]
        return [
            h
            for h in self.store.get_many(ids)
            if h.resume_data is not None and h.resume_data.decided_by == user_id
        ]

    def note_decision(self, handoff: Handoff) -> None:
        """Remember a person's decision for their Home's "recently decided" list."""
        decision = handoff.resume_data
        if handoff.status not in _PERSON_OUTCOMES or decision is None or not handoff.decided_at:
            return
        self._remember(decision.decided_by, {handoff.id: handoff.decided_at})

    def _catch_up(self, user_id: str) -> None:
        """Record the user's decisions among the audit events added since their last build
        (at most the newest ``RECENT_SCAN_EVENTS``)."""
        last = self.store.redis.get(self.keys.home_read(user_id))
        entries = list(
            self.store.audit_entries(
                after=as_text(last) if last is not None else None,
                newest_first=True,
                limit=RECENT_SCAN_EVENTS,
            )
        )
        if not entries:
            return
        decided: dict[str, datetime] = {}
        needle = user_id.encode()
        for entry in entries:
            # Most events are not this person's decisions: skip them before parsing.
            if b'"decided"' not in entry.raw or needle not in entry.raw:
                continue
            event = entry.event
            if event.event == "decided" and event.actor == user_id:
                decided.setdefault(event.handoff_id, event.at)
        self._remember(user_id, decided, read_up_to=entries[0].id)

    def _remember(
        self, user_id: str, decided: dict[str, datetime], *, read_up_to: str | None = None
    ) -> None:
        key = self.keys.home_decided(user_id)
        pipe = self.store.redis.pipeline(transaction=False)
        if decided:
            pipe.zadd(key, {i: int(at.timestamp() * 1000) for i, at in decided.items()})
            pipe.zremrangebyrank(key, 0, -RECENT_KEPT - 1)
            pipe.expire(key, int(RECENT_WINDOW.total_seconds()))
        if read_up_to is not None:
            pipe.set(self.keys.home_read(user_id), read_up_to, ex=VIEWER_TTL_SECONDS)
        pipe.execute()


def _text_or_none(value: bytes | str | None) -> str | None:
    return as_text(value) if value is not None else None


def refresh_homes(
    client: WebClient,
    store: HandoffStore,
    policy: ReviewerPolicy,
    handoff: Handoff,
    *,
    command: str = defaults.SLASH_COMMAND,
) -> int:
    """Republish the App Home of the recent viewers who may decide ``handoff`` or whose Home
    shows it, after it changed (created, claimed, decided, reassigned...). Returns how many
    Homes were republished. Safe to call from a worker; Slack errors are logged per viewer.

    Example (in the notify job, after the message update)::

        refresh_homes(client, store, reviewers, handoff, command=settings.slash_command)
    """
    return Homes(store, policy, command=command).refresh(client, handoff)
