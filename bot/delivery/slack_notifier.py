"""Delivers handoffs to Slack and keeps their messages up to date (runs in workers).

A handoff's ``message_refs`` hold its primary message (``channel``, ``ts``) and ``copies``:
the copy posted to an escalation channel, and old messages left behind by a reassignment
(``moved_to``). Every update re-renders all of them from the handoff's current state.

Posts go through ``bot.delivery.posting.Poster``: a post whose answer was lost is looked for
before it is made again, so a flaky network never leaves two messages with live buttons.
A 429 from Slack ends the attempt with ``DeliveryFailed(retry_after=...)``: the task comes
back after ``Retry-After`` without spending an attempt, and no worker sleeps meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.blockkit.message import (
    escalation_note,
    reminder_text,
    render_duplicate,
    render_message,
    render_moved,
    thread_record_text,
)
from bot.delivery.posting import Posted, Poster, PostRefused, PostTag, delete_extra
from bot.delivery.slack_errors import describe, error_code, is_permanent, retry_after
from bot.mrkdwn import is_usergroup, reviewer_mention
from store.exceptions import HandoffError
from store.models import Handoff, PostWindow
from worker.notifier import FIRST_ATTEMPT, Attempt, DeliveryFailed, Undeliverable

logger = logging.getLogger(__name__)

GONE_ERRORS = frozenset({"message_not_found", "channel_not_found", "is_archived"})
"""Errors of ``chat.update`` on a message that is no longer there to update (deleted, or its
channel gone or archived): nothing to show there, and no reason to fail the task."""

METADATA_EVENT_TYPE = "handoff_posted"
RECORD_EVENT_TYPE = "handoff_recorded"
"""Metadata of the short record posted in the thread after a decision."""
REMINDER_EVENT_TYPE = "handoff_reminder"
"""Metadata of a reminder in the thread (one per reminder number)."""
ESCALATION_CALL_EVENT_TYPE = "handoff_escalation_call"
"""Metadata of the thread reply that calls the escalation user group."""
DUPLICATE_EVENT_TYPE = "handoff_duplicate"
"""Metadata of an extra copy once neutralised, so that it is never adopted again."""


class NoChannel(HandoffError):
    """The handoff names no channel and no default channel is configured."""


class SlackNotifier:
    """Posts a handoff with ``chat.postMessage`` and keeps its messages up to date."""

    def __init__(
        self,
        client: WebClient,
        *,
        default_channel: str | None = None,
        on_change: Callable[[Handoff], None] | None = None,
        poster: Poster | None = None,
    ) -> None:
        """``on_change`` is called after each delivery, update and escalation (the App Home
        refresh); its failures are logged, never raised, so they cannot fail the task.
        ``poster`` defaults to a ``Poster`` on ``client``."""
        self.client = client
        self.default_channel = default_channel
        self.on_change = on_change
        self.poster = poster or Poster(client)

    def deliver(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> dict[str, Any]:
        """Post the handoff's message; returns its references.

        When ``attempt.unanswered`` says an earlier attempt may have posted without hearing
        back, the message is looked for there (and adopted) before it is posted. When the
        handoff was posted before (it has been reassigned), the new message becomes the
        primary one and the old one is updated to point to it (an old message that cannot be
        updated, say deleted, never keeps the new one from being linked).

        Raises ``Undeliverable`` when Slack refuses the post for good (``is_archived``,
        ``not_in_channel``, ``invalid_auth``...; see ``bot.delivery.slack_errors``): the
        handoff is then closed ``undeliverable`` without further attempts; and
        ``DeliveryFailed`` for what a later attempt may fix (with ``retry_after`` for a
        rate limit).
        """
        channel = handoff.channel or self.default_channel
        if not channel:
            raise NoChannel(f"handoff {handoff.id} names no channel and HANDOFF_CHANNEL is not set")
        with _rate_limits_put_off(attempt.unanswered):
            attempt = self._clear_strays(handoff, channel, attempt)
            try:
                posted = self._post(handoff, channel, attempt=attempt)
            except PostRefused as exc:
                # Only the post's own refusal says the message cannot be delivered: the
                # look-up for an earlier post or removing a duplicate may fail where posting
                # works; those failures are retried.
                if is_permanent(exc.slack_error):
                    raise Undeliverable(
                        f"Slack refused the message to {channel}: {describe(exc.slack_error)}",
                        code=error_code(exc.slack_error),
                    ) from exc
                raise
        refs: dict[str, Any] = {"channel": posted["channel"], "ts": posted["ts"]}
        old = handoff.message_refs
        if old.get("ts"):
            moved = {"channel": old["channel"], "ts": old["ts"], "moved_to": posted["channel"]}
            refs["copies"] = [*old.get("copies", []), moved]
            try:
                self._show_moved(handoff, moved)
            except Exception:
                # The new message is posted: it must be linked whatever became of the old
                # one (a later update shows the move there again, if it can).
                logger.warning(
                    "could not point the old message to the new one",
                    exc_info=True,
                    extra={"handoff_id": handoff.id, "channel": old["channel"]},
                )
            refs["record_ts"] = None
        logger.info("posted", extra={"handoff_id": handoff.id, "channel": posted["channel"]})
        self._changed(handoff)
        return refs

    def update(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Re-render every message of the handoff; after a decision, also post a short
        record in the primary message's thread (once: its ts is kept in the refs)."""
        refs = dict(handoff.message_refs)
        channel, ts = refs.get("channel"), refs.get("ts")
        if not channel or not ts:
            if handoff.delivery.state.value in ("completed", "failed"):
                return None  # never posted to Slack (e.g. delivered to the log): nothing to update
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        with _rate_limits_put_off(attempt.unanswered):
            message = render_message(handoff)
            self.client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
            for copy in refs.get("copies", []):
                if copy.get("moved_to"):
                    self._show_moved(handoff, copy)
                else:
                    shown = render_message(handoff, note=escalation_note(handoff))
                    self.client.chat_update(
                        channel=copy["channel"],
                        ts=copy["ts"],
                        text=shown.text,
                        blocks=shown.blocks,
                    )
            self._changed(handoff)
            if handoff.is_pending or refs.get("record_ts"):
                return None
            record = self.poster.post(
                channel=channel,
                thread_ts=ts,
                text=thread_record_text(handoff),
                tag=PostTag(RECORD_EVENT_TYPE, {"handoff_id": handoff.id}),
                neutralise=delete_extra,
                attempt=attempt,
            )
        refs["record_ts"] = record.ts
        return refs

    def remind(self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT) -> None:
        """Reply in the message's thread, mentioning the reviewers; posted once, like the
        handoff itself (a reminder whose answer was lost is looked for, not posted twice)."""
        refs = handoff.message_refs
        if not refs.get("ts"):
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        number = handoff.reminders_sent + 1
        with _rate_limits_put_off(attempt.unanswered):
            self.poster.post(
                channel=refs["channel"],
                thread_ts=refs["ts"],
                text=reminder_text(handoff),
                tag=PostTag(
                    REMINDER_EVENT_TYPE, {"reminder": f"{handoff.id}:{number}"}, key="reminder"
                ),
                neutralise=delete_extra,
                attempt=attempt,
            )

    def escalate(
        self, handoff: Handoff, *, attempt: Attempt = FIRST_ATTEMPT
    ) -> dict[str, Any] | None:
        """Post a copy to the escalation channel, or call the escalation user group in the
        message's thread (its members may then decide). ``attempt`` as in ``deliver``."""
        target = handoff.escalate_to or ""
        refs = dict(handoff.message_refs)
        with _rate_limits_put_off(attempt.unanswered):
            # The same test of "a user group" as the permission check's, and its one
            # mention, which escapes anything that is not a group id.
            if is_usergroup(target):
                if refs.get("ts") and handoff.is_pending:
                    group = reviewer_mention(target)
                    self.poster.post(
                        channel=refs["channel"],
                        thread_ts=refs["ts"],
                        text=f":rotating_light: {group}: please decide this request.",
                        tag=PostTag(ESCALATION_CALL_EVENT_TYPE, {"handoff_id": handoff.id}),
                        neutralise=delete_extra,
                        attempt=attempt,
                    )
                return None
            if not handoff.is_pending:
                # Decided meanwhile: no copy to post any more, but one whose answer was lost
                # is found and kept, so that it shows the outcome rather than live buttons.
                found = self._find_copy(handoff, target, attempt)
                if found is None:
                    return None
                posted = {"channel": found.channel, "ts": found.ts}
            else:
                posted = self._post(handoff, target, note=escalation_note(handoff), attempt=attempt)
        refs["copies"] = [
            *refs.get("copies", []),
            {"channel": posted["channel"], "ts": posted["ts"]},
        ]
        self._changed(handoff)
        return refs

    def _changed(self, handoff: Handoff) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(handoff)
        except Exception:  # a stale App Home must not fail (and repeat) a Slack post
            logger.exception("App Home refresh failed", extra={"handoff_id": handoff.id})

    def _post(
        self, handoff: Handoff, channel: str, *, note: str | None = None, attempt: Attempt
    ) -> dict[str, str]:
        """Post the handoff's message with buttons to ``channel``, once (see ``Poster``)."""
        message = render_message(handoff, note=note)
        refs = handoff.message_refs
        known = [refs.get("ts"), *(copy.get("ts") for copy in refs.get("copies", []))]
        posted = self.poster.post(
            channel=channel,
            text=message.text,
            blocks=message.blocks,
            tag=PostTag(METADATA_EVENT_TYPE, {"handoff_id": handoff.id, "run_id": handoff.run_id}),
            neutralise=self._neutraliser(handoff),
            attempt=attempt,
            exclude={str(ts) for ts in known if ts},
            unfurl_links=False,
            unfurl_media=False,
        )
        if posted.adopted:
            logger.info("adopted an earlier post", extra={"handoff_id": handoff.id})
        return {"channel": posted.channel, "ts": posted.ts}

    def _find_copy(self, handoff: Handoff, target: str, attempt: Attempt) -> Posted | None:
        """The escalation copy an earlier attempt may have posted unanswered, or None."""
        if attempt.unanswered is None:
            return None
        refs = handoff.message_refs
        known = [refs.get("ts"), *(copy.get("ts") for copy in refs.get("copies", []))]
        return self.poster.find(
            channel=target,
            tag=PostTag(METADATA_EVENT_TYPE, {"handoff_id": handoff.id, "run_id": handoff.run_id}),
            neutralise=self._neutraliser(handoff),
            window=attempt.unanswered,
            exclude={str(ts) for ts in known if ts},
        )

    def _clear_strays(self, handoff: Handoff, channel: str, attempt: Attempt) -> Attempt:
        """When an earlier attempt's post went unanswered in another channel (the handoff was
        reassigned since), the copies it may have left there are turned into notes without
        buttons; the post here then needs no look-up. Returns the attempt to post with."""
        window = attempt.unanswered
        if window is None or window.route in (None, "?"):
            return attempt
        old = window.route or self.default_channel
        if not old or old == channel:
            return attempt
        cleared = self.poster.clear(
            channel=old,
            tag=PostTag(METADATA_EVENT_TYPE, {"handoff_id": handoff.id, "run_id": handoff.run_id}),
            neutralise=self._neutraliser(handoff),
            window=window,
        )
        if cleared:
            logger.info(
                "neutralised %d stray post(s) left in %s before a reassignment",
                cleared,
                old,
                extra={"handoff_id": handoff.id},
            )
        return replace(attempt, unanswered=None)

    def _neutraliser(self, handoff: Handoff) -> Callable[[WebClient, str, str, str | None], None]:
        """Turns an extra copy of the handoff's message into a pointer to the kept one (or,
        with none kept there, a note without a link), without buttons, and retags it so that
        it is never adopted."""

        def neutralise(client: WebClient, channel: str, extra_ts: str, kept_ts: str | None) -> None:
            link = None
            if kept_ts is not None:
                try:
                    link = str(
                        client.chat_getPermalink(channel=channel, message_ts=kept_ts)["permalink"]
                    )
                except Exception:  # the pointer is a courtesy: say it without a link
                    link = None
            shown = render_duplicate(handoff, link=link)
            client.chat_update(
                channel=channel,
                ts=extra_ts,
                text=shown.text,
                blocks=shown.blocks,
                metadata={
                    "event_type": DUPLICATE_EVENT_TYPE,
                    "event_payload": {"handoff_id": handoff.id},
                },
            )

        return neutralise

    def _show_moved(self, handoff: Handoff, moved: dict[str, Any]) -> None:
        """Point a message the handoff moved from to its new place; a message that is gone
        (deleted, its channel archived) is left alone."""
        shown = render_moved(handoff, channel=str(moved["moved_to"]))
        try:
            self.client.chat_update(
                channel=moved["channel"], ts=moved["ts"], text=shown.text, blocks=shown.blocks
            )
        except SlackApiError as exc:
            if error_code(exc) not in GONE_ERRORS:
                raise
            logger.info(
                "the message the handoff moved from is gone (%s)",
                error_code(exc),
                extra={"handoff_id": handoff.id, "channel": moved["channel"]},
            )


@contextmanager
def _rate_limits_put_off(unanswered: PostWindow | None) -> Iterator[None]:
    """A 429 from any call in the block ends the attempt with ``DeliveryFailed``, to be run
    again after ``Retry-After`` (no worker sleeps it out); ``unanswered`` is what the
    attempt leaves to look for, unchanged by calls that post nothing."""
    try:
        yield
    except SlackApiError as exc:
        wait = retry_after(exc)
        if wait is None:
            raise
        method = str(getattr(exc.response, "api_url", "") or "").rstrip("/").rsplit("/", 1)[-1]
        raise DeliveryFailed(
            f"Slack rate-limits {method or 'the call'}; trying again in {wait:.0f} s",
            unanswered=unanswered,
            retry_after=wait,
        ) from exc
