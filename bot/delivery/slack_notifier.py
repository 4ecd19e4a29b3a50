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

import functools
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
from bot.delivery.conversations import NOT_A_MEMBER_ERRORS, Conversations, is_user
from bot.delivery.posting import (
    NotInConversation,
    Posted,
    Poster,
    PostRefused,
    PostTag,
    delete_extra,
)
from bot.delivery.slack_errors import describe, error_code, is_permanent, retry_after
from bot.mrkdwn import is_usergroup, reviewer_mention
from bot.slack_client import AMBIGUOUS_ERRORS
from store.models import Handoff, PostWindow
from store.policies import decided_by_policy
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


class NoChannel(Undeliverable):
    """The handoff names no channel and no default channel is configured: no retry can
    post it, so its run is told at once (``undeliverable``)."""


class SlackNotifier:
    """Posts a handoff with ``chat.postMessage`` and keeps its messages up to date."""

    def __init__(
        self,
        client: WebClient,
        conversations: Conversations,
        *,
        default_channel: str | None = None,
        on_change: Callable[[Handoff], None] | None = None,
        poster: Poster | None = None,
    ) -> None:
        """``conversations`` turns routing ids into conversations the bot is in (joins,
        DMs). ``on_change`` is called after each delivery, update and escalation (the App
        Home refresh); its failures are logged, never raised, so they cannot fail the task.
        ``poster`` defaults to a ``Poster`` on ``client``."""
        self.client = client
        self.conversations = conversations
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
        if decided_by_policy(handoff):
            # A routing policy's rule decided it as it was created: nobody is asked, so
            # nothing is posted (its audit trail records the rule).
            return {}
        target = handoff.channel or self.default_channel
        if not target:
            raise NoChannel(
                f"handoff {handoff.id} names no channel and HANDOFF_CHANNEL is not set; "
                "set HANDOFF_CHANNEL (or give the request a channel) and ask again",
                code="no_channel",
            )
        with _rate_limits_put_off(attempt.unanswered):
            with self._refused_for_good(target):
                channel = self.conversations.ready_to_post(target)
            attempt = self._clear_strays(handoff, channel, attempt)
            posted = self._post_in(handoff, target, channel, attempt=attempt)
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
        record in the primary message's thread (once: its ts is kept in the refs).

        Each message is updated on its own: one whose ``chat.update`` fails (a Slack error,
        a reset, a timeout) keeps neither the other messages, the thread record nor the App
        Home refresh from being done. A message that is gone (``GONE_ERRORS``) is skipped
        for good. When another failed, the attempt then ends with ``DeliveryFailed`` naming
        it, so the task is retried (updates are idempotent: every message is re-rendered
        again); the failure carries the record's ts in ``message_refs``, which the job
        stores with it, so a retry never posts the record twice. A 429 ends the attempt at
        once, put off for ``Retry-After`` (the next calls would be refused too); nothing has
        been posted then.
        """
        refs = dict(handoff.message_refs)
        channel, ts = refs.get("channel"), refs.get("ts")
        if not channel or not ts:
            if decided_by_policy(handoff):
                return None  # decided by a policy rule, never posted (``deliver``)
            if handoff.delivery.state.value in ("completed", "failed"):
                return None  # never posted to Slack (e.g. delivered to the log): nothing to update
            raise RuntimeError(f"handoff {handoff.id} is not posted yet; will retry")
        failed: list[str] = []
        with _rate_limits_put_off(attempt.unanswered):
            message = render_message(handoff)
            primary_shown = self._update_one(
                handoff,
                {"channel": channel, "ts": ts},
                lambda: self.client.chat_update(
                    channel=channel, ts=ts, text=message.text, blocks=message.blocks
                ),
                failed,
            )
            for copy in refs.get("copies", []):
                if copy.get("moved_to"):
                    show = functools.partial(self._show_moved, handoff, copy)
                    self._update_one(handoff, copy, show, failed)
                    continue
                shown = render_message(handoff, note=escalation_note(handoff))
                update = functools.partial(
                    self.client.chat_update,
                    channel=copy["channel"],
                    ts=copy["ts"],
                    text=shown.text,
                    blocks=shown.blocks,
                )
                self._update_one(handoff, copy, update, failed)
            self._changed(handoff)
            record_ts: str | None = None
            # A primary message that is gone has no thread to record the outcome in.
            if not handoff.is_pending and not refs.get("record_ts") and primary_shown:
                record_ts = self.poster.post(
                    channel=channel,
                    thread_ts=ts,
                    text=thread_record_text(handoff),
                    tag=PostTag(RECORD_EVENT_TYPE, {"handoff_id": handoff.id}),
                    neutralise=delete_extra,
                    attempt=attempt,
                ).ts
        kept = {"record_ts": record_ts} if record_ts else None
        if failed:
            raise DeliveryFailed(
                f"could not update {len(failed)} message(s) of the handoff: {'; '.join(failed)}",
                # The record, if posted now, is known: nothing is left to look for.
                unanswered=None if record_ts else attempt.unanswered,
                message_refs=kept,
            )
        # Only what this task made: the store merges it into the refs as they are then (a
        # reassignment's delivery may have replaced the primary message meanwhile).
        return kept

    def _update_one(
        self,
        handoff: Handoff,
        where: dict[str, Any],
        update: Callable[[], object],
        failed: list[str],
    ) -> bool:
        """Run one message's update; a failure is logged and added to ``failed`` (a 429 is
        raised). Returns whether the message is there (updated, or failed for now)."""
        try:
            update()
            return True
        except SlackApiError as exc:
            if retry_after(exc) is not None:
                raise
            if error_code(exc) in GONE_ERRORS:
                logger.info(
                    "a message of the handoff is gone (%s)",
                    error_code(exc),
                    extra={"handoff_id": handoff.id, "channel": where.get("channel")},
                )
                return False
            reason = describe(exc)
        except AMBIGUOUS_ERRORS as exc:
            reason = f"no answer from Slack ({type(exc).__name__})"
        failed.append(f"{where.get('channel')}/{where.get('ts')}: {reason}")
        logger.warning(
            "could not update a message of the handoff: %s",
            reason,
            extra={"handoff_id": handoff.id, "channel": where.get("channel")},
        )
        return True

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
                # A copy Slack refuses for good (a private channel the bot is not in) fails
                # the escalation at once, saying why, rather than after its attempts.
                with self._refused_for_good(target):
                    channel = self.conversations.ready_to_post(target)
                note = escalation_note(handoff)
                posted = self._post_in(handoff, target, channel, note=note, attempt=attempt)
        self._changed(handoff)
        # Only the new copy: the store adds it to the copies as they are then (a delivery
        # running at the same time may have added its own, or moved the primary message).
        return {"copies": [{"channel": posted["channel"], "ts": posted["ts"]}]}

    @contextmanager
    def _refused_for_good(self, target: str) -> Iterator[None]:
        """Slack's refusals no retry can fix (an archived channel, a person it cannot write
        to, a private channel the bot is not in) become ``Undeliverable``, saying what to do;
        anything else goes on as it is (retried)."""
        try:
            yield
        except PostRefused as exc:
            # Only the post's own refusal says the message cannot be delivered: the
            # look-up for an earlier post or removing a duplicate may fail where posting
            # works; those failures are retried.
            if is_permanent(exc.slack_error):
                raise Undeliverable(
                    self._refusal_text(target, exc.slack_error),
                    code=error_code(exc.slack_error),
                ) from exc
            raise
        except SlackApiError as exc:
            if is_permanent(exc):
                raise Undeliverable(self._refusal_text(target, exc), code=error_code(exc)) from exc
            raise

    def _post_in(
        self,
        handoff: Handoff,
        target: str,
        channel: str,
        *,
        note: str | None = None,
        attempt: Attempt,
    ) -> dict[str, str]:
        """Post in ``channel``, the conversation of ``target``. When Slack says the bot is
        not in it any more (removed since it joined), it joins again and goes on once."""
        try:
            with self._refused_for_good(target):
                return self._post(handoff, channel, note=note, attempt=attempt)
        except NotInConversation as exc:
            logger.warning(
                "the bot is not in %s any more: joining again",
                channel,
                extra={"handoff_id": handoff.id},
            )
            self.conversations.forget(channel)
            with self._refused_for_good(target):
                channel = self.conversations.ready_to_post(target)
                return self._post(
                    handoff, channel, note=note, attempt=replace(attempt, unanswered=exc.unanswered)
                )

    def _refusal_text(self, target: str, exc: SlackApiError) -> str:
        """What an admin (and the agent) read about a post Slack refused for good."""
        text = f"Slack refused the message to {target}: {describe(exc)}"
        if error_code(exc) in NOT_A_MEMBER_ERRORS and not is_user(target):
            text += (
                f"; if {target} is a private channel, invite the bot to it "
                f"(/invite @{self.poster.our_bot_name()} there) and ask again"
            )
        return text

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
            channel=self.conversations.conversation_of(target),
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
        route = window.route or self.default_channel
        old = self.conversations.conversation_of(route) if route else None
        if not old or old == channel:
            return attempt
        clear = functools.partial(
            self.poster.clear,
            channel=old,
            tag=PostTag(METADATA_EVENT_TYPE, {"handoff_id": handoff.id, "run_id": handoff.run_id}),
            neutralise=self._neutraliser(handoff),
        )
        try:
            cleared = clear(window=window)
        except NotInConversation as exc:
            # Removed from the old channel since: join it again to read it, once; a channel
            # that still cannot be read keeps what may be there (logged), and the post here
            # goes on.
            self.conversations.forget(old)
            try:
                self.conversations.ready_to_post(old)
                cleared = clear(window=exc.unanswered or window)
            except (NotInConversation, SlackApiError):
                logger.warning(
                    "cannot read %s to clear what an earlier attempt may have posted there",
                    old,
                    extra={"handoff_id": handoff.id},
                )
                cleared = 0
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
