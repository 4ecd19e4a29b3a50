"""Posting a Slack message once, although Slack's answer to a post can be lost.

A ``chat.postMessage`` whose answer never arrives (a timeout, a reset connection, a 5xx) may
or may not have posted. Repeating it blindly, as slack_sdk's connection-error handler or a
task retry would, can leave two messages with live buttons. So each post is tagged with
message metadata (an event type and the handoff id), sent through a client that never
repeats it, and after an ambiguous failure the poster looks for the message it may have
posted before posting again: found, it is adopted; not found, it is posted again. When two
tries both landed, the extra copies are neutralised.

Looking is expensive: ``conversations.history`` and ``conversations.replies`` allow apps
outside the Slack Marketplace one call a minute, and 15 messages a page. So the poster looks
only when a post may really have landed unanswered (an attempt's ``unanswered`` window, kept
by the store, or a lost answer in this attempt); it reads only that window (by the store's
clock, with a margin for Slack's), page by page with Slack's page size, newest first, down
to its start; and every page is taken from one budget per method shared by the whole
deployment (``store.rate_budget``). When the budget is spent, or Slack answers 429, the
attempt ends at once with what is left of the window: the task comes back when a call is
free, without sleeping in a worker, and goes on where the look-up stopped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import defaults
from bot.delivery.slack_errors import (
    describe,
    error_code,
    is_permanent,
    maybe_carried_out,
    retry_after,
)
from bot.slack_client import AMBIGUOUS_ERRORS, posting_client, reading_client
from store.keys import KeySpace
from store.models import PostWindow
from store.rate_budget import RateBudget
from worker.notifier import FIRST_ATTEMPT, Attempt, DeliveryFailed

logger = logging.getLogger(__name__)

_NEUTRALISE_ERRORS: tuple[type[Exception], ...] = (SlackApiError, *AMBIGUOUS_ERRORS)

HISTORY = "conversations.history"
REPLIES = "conversations.replies"


class AnswerLost(DeliveryFailed):
    """Every try at a post lost its answer and the post was not found; the next attempt
    looks for it again (``unanswered``) before posting."""


class NotInConversation(DeliveryFailed):
    """Slack will not let the bot read the conversation to look for a lost post because the
    bot is not in it (``not_in_channel``: it was removed since it joined). The caller joins
    again and goes on (``unanswered`` says what is left to look for)."""


class PostRefused(DeliveryFailed):
    """Slack answered the post with an error: that post was not made. ``slack_error`` is
    Slack's answer (classify it with ``bot.delivery.slack_errors``)."""

    def __init__(
        self,
        message: str,
        *,
        slack_error: SlackApiError,
        unanswered: PostWindow | None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, unanswered=unanswered, retry_after=retry_after)
        self.slack_error = slack_error


@dataclass(frozen=True)
class PostTag:
    """What marks a message as ours and as the post of one thing: its metadata.

    Example: ``PostTag("handoff_posted", {"handoff_id": "ho_01J...", "run_id": "run-7"})``.
    """

    event_type: str
    payload: Mapping[str, Any]
    key: str = field(default="handoff_id")
    """The payload field that identifies the post (compared with what Slack lists)."""

    def metadata(self) -> dict[str, Any]:
        """The ``metadata`` argument of ``chat.postMessage``."""
        return {"event_type": self.event_type, "event_payload": dict(self.payload)}

    def matches(self, message: Mapping[str, Any]) -> bool:
        """Does ``message`` (as ``conversations.history`` lists it) carry this tag?"""
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        return bool(
            metadata.get("event_type") == self.event_type
            and payload.get(self.key) == self.payload.get(self.key)
        )


@dataclass(frozen=True)
class Posted:
    """Where a post landed; ``adopted`` when it was found rather than answered."""

    channel: str
    ts: str
    adopted: bool = False


@dataclass(frozen=True)
class LookUps:
    """How the poster reads a conversation to find a post whose answer was lost.

    ``page_size``: messages per page (Slack gives apps outside the Marketplace 15 at most).
    ``clock_skew_seconds``: how far Slack's clock (message ts) may be from Redis's (the
    window's times). ``budgets``: the shared budget of each method (``HISTORY``,
    ``REPLIES``); a method without one is called whenever needed (tests, a Marketplace app
    with a budget of its own).
    """

    page_size: int = defaults.SLACK_HISTORY_PAGE_SIZE
    clock_skew_seconds: float = defaults.SLACK_CLOCK_SKEW_SECONDS
    budgets: Mapping[str, RateBudget] = field(default_factory=dict)
    max_wait_seconds: float = 1.0
    """A budget's call due within this long is waited for in the attempt; a later one ends
    the attempt, put off until then (one call a minute: always)."""

    @classmethod
    def shared(
        cls,
        redis: Redis,
        keys: KeySpace,
        *,
        calls_per_minute: float = defaults.SLACK_HISTORY_CALLS_PER_MINUTE,
        page_size: int = defaults.SLACK_HISTORY_PAGE_SIZE,
        clock_skew_seconds: float = defaults.SLACK_CLOCK_SKEW_SECONDS,
    ) -> LookUps:
        """Look-ups with one budget per method in Redis, shared by every worker."""
        budgets = {
            method: RateBudget(redis, keys, method, calls_per_minute=calls_per_minute)
            for method in (HISTORY, REPLIES)
        }
        return cls(page_size=page_size, clock_skew_seconds=clock_skew_seconds, budgets=budgets)


Neutralise = Callable[[WebClient, str, str, str | None], None]
"""``(client, channel, extra_ts, kept_ts)``: make an extra copy harmless (``kept_ts`` None:
there is no kept copy in that channel, as for a stray left behind by a reassignment)."""


def delete_extra(client: WebClient, channel: str, extra_ts: str, kept_ts: str | None) -> None:
    """Neutralise an extra copy by deleting it (for thread replies nobody acts on)."""
    try:
        client.chat_delete(channel=channel, ts=extra_ts)
    except SlackApiError as exc:
        if exc.response.get("error") != "message_not_found":  # deleted by an earlier try
            raise


class Poster:
    """Posts tagged messages at most once (see the module's docstring).

    ``client`` neutralises extras; posts go through ``posting`` (by default a twin of
    ``client`` that repeats nothing but what its client does for 429s), and the look-ups
    through ``reading`` (a twin that repeats nothing: each call is one of the budget's).
    After an ambiguous failure the poster waits ``settle_seconds`` (default: the client's
    timeout), so that a post still on its way lands before it looks; it tries ``tries``
    posts per call (each lost answer costs the client's timeout plus the settling time:
    keep ``tries`` times twice the timeout inside the job's timeout,
    ``HANDOFF_DELIVERY_TIMEOUT_SECONDS``).

    Example::

        poster = Poster(client, look_ups=LookUps.shared(redis, keys))
        posted = poster.post(channel="C0APPROVALS", tag=tag, text="Approve?", blocks=blocks,
                             neutralise=delete_extra, attempt=attempt)
    """

    def __init__(
        self,
        client: WebClient,
        *,
        posting: WebClient | None = None,
        settle_seconds: float | None = None,
        tries: int = 2,
        sleep: Callable[[float], None] = time.sleep,
        look_ups: LookUps | None = None,
        reading: WebClient | None = None,
    ) -> None:
        self.client = client
        self.posting = posting or posting_client(client)
        self.reading = reading or reading_client(client)
        self.settle_seconds = float(client.timeout if settle_seconds is None else settle_seconds)
        self.tries = tries
        self.sleep = sleep
        self.look_ups = look_ups or LookUps()
        self._identity_answer: dict[str, Any] | None = None

    def post(
        self,
        *,
        channel: str,
        tag: PostTag,
        neutralise: Neutralise,
        attempt: Attempt = FIRST_ATTEMPT,
        exclude: Collection[str] = (),
        thread_ts: str | None = None,
        **message: Any,
    ) -> Posted:
        """Post ``message`` (``chat.postMessage`` fields) tagged with ``tag``, once.

        ``attempt.unanswered``: an earlier attempt's post may have landed then, so look
        there first. ``exclude``: ts of messages with the same tag that are known and must
        not be adopted (an old message left by a reassignment).

        Raises ``PostRefused`` when Slack answers the post with an error (a 429 with its
        ``retry_after``), ``AnswerLost`` when every try was ambiguous and nothing was found,
        and ``DeliveryFailed`` when a look-up could not finish (its budget spent, Slack
        busy); each says what is left to look for (``unanswered``).
        """
        started = attempt.started_at or time.time()
        unresolved = attempt.unanswered
        search = _Search(self, channel, tag, exclude, thread_ts, neutralise)
        if unresolved is not None:
            found = search.run(unresolved)
            if found is not None:
                logger.info("adopted an earlier post", extra={"channel": channel, "ts": found.ts})
                return found
            unresolved = None  # nothing landed there
        error: Exception | None = None
        for _ in range(self.tries):
            try:
                answer = self.posting.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, metadata=tag.metadata(), **message
                )
                return Posted(str(answer["channel"]), str(answer["ts"]))
            except SlackApiError as exc:
                if not maybe_carried_out(exc):  # Slack refused it: nothing was posted
                    raise PostRefused(
                        f"Slack refused the post to {channel}: {describe(exc)}",
                        slack_error=exc,
                        unanswered=unresolved,
                        retry_after=retry_after(exc),
                    ) from exc
                error = exc
            except AMBIGUOUS_ERRORS as exc:
                error = exc
            unresolved = PostWindow(started)
            logger.warning(
                "answer to a post lost (%s); looking for it before posting again",
                type(error).__name__,
                extra={"channel": channel},
            )
            self.sleep(self.settle_seconds)
            found = search.run(unresolved)
            if found is not None:
                return found
        raise AnswerLost(
            f"posting to {channel} lost its answer {self.tries} times ({error!r}) and the post "
            "was not found; the next attempt looks for it again",
            unanswered=unresolved,
        )

    def find(
        self,
        *,
        channel: str,
        tag: PostTag,
        neutralise: Neutralise,
        window: PostWindow,
        exclude: Collection[str] = (),
        thread_ts: str | None = None,
    ) -> Posted | None:
        """Only look: our post carrying ``tag`` in ``window``, adopted (extra copies
        neutralised), or None. Raises ``DeliveryFailed`` when the look-up could not finish
        (its ``unanswered`` says what is left)."""
        return _Search(self, channel, tag, exclude, thread_ts, neutralise).run(window)

    def clear(
        self, *, channel: str, tag: PostTag, neutralise: Neutralise, window: PostWindow
    ) -> int:
        """Neutralise every post carrying ``tag`` in ``window`` (strays: none of them is
        kept, say in a channel the handoff was moved from); returns how many."""
        search = _Search(self, channel, tag, (), None, neutralise)
        search.run(window, keep_first=False)
        return search.neutralised

    def our_bot_id(self) -> str:
        """The bot's own bot id: only its messages may be adopted, never another app's
        message that happens to carry the same metadata."""
        return str(self._identity()["bot_id"])

    def our_bot_name(self) -> str:
        """The bot user's name, as people mention it (``/invite @handoff``); "handoff"
        when Slack cannot be asked."""
        try:
            return str(self._identity().get("user") or "handoff")
        except _NEUTRALISE_ERRORS:  # Slack's refusals and lost answers alike
            return "handoff"

    def _identity(self) -> dict[str, Any]:
        if self._identity_answer is None:
            data = self.client.auth_test().data
            self._identity_answer = dict(data) if isinstance(data, dict) else {}
        return self._identity_answer


class _Search:
    """One look for a tagged post in a window of a channel (or of a thread)."""

    def __init__(
        self,
        poster: Poster,
        channel: str,
        tag: PostTag,
        exclude: Collection[str],
        thread_ts: str | None,
        neutralise: Neutralise,
    ) -> None:
        self.poster = poster
        self.channel = channel
        self.tag = tag
        self.exclude = exclude
        self.thread_ts = thread_ts
        self.neutralise = neutralise
        self.method = REPLIES if thread_ts else HISTORY
        self.holder = f"{tag.event_type}:{tag.payload.get(tag.key)}:{channel}"
        """Who waits for a call of the budget: one search, attempt after attempt."""
        self.found: list[str] = []
        """The ts of our posts found so far."""
        self.neutralised = 0
        self._read_all: str | None = None
        """The read mark of a window read to its end."""

    def run(self, window: PostWindow, *, keep_first: bool = True) -> Posted | None:
        """Our message carrying the tag, posted in ``window``; the first one posted is kept
        and the others neutralised (all of them, without ``keep_first``; None is returned
        then). None when nothing is there (or the conversation cannot be read at all, after
        a warning: posting again is then all that can be done).

        Copies seen by an earlier look-up cut short (``window.found``) count as found; a
        look-up cut short here, or a copy that cannot be neutralised now, raises
        ``DeliveryFailed`` with what is left: the window from where reading stopped, and
        every copy found so far."""
        logger.info(
            "looking for a lost post of %s in %s (from %.3f to %s, read to %s, %d found)",
            self.holder,
            self.channel,
            window.start,
            "now" if window.end is None else f"{window.end:.3f}",
            window.read or "-",
            len(window.found),
        )
        self.found = [ts for ts in window.found if ts not in self.exclude]
        bot_id = self._bot_id(window)
        for message in self._listed(window):
            ts = str(message.get("ts"))
            if (
                self.tag.matches(message)
                and message.get("bot_id") == bot_id
                and ts not in self.exclude
                and ts != self.thread_ts
                and ts not in self.found
            ):
                self.found.append(ts)
        copies = sorted(set(self.found), key=Decimal)
        if not copies:
            return None
        kept = copies[0] if keep_first else None
        for extra in copies[1:] if keep_first else copies:
            logger.warning(
                "neutralising a %s post",
                "duplicate" if keep_first else "stray",
                extra={"channel": self.channel, "ts": extra},
            )
            try:
                self.neutralise(self.poster.client, self.channel, extra, kept)
            except _NEUTRALISE_ERRORS as exc:
                # Read to the end: the next attempt only neutralises what was found.
                done = PostWindow(
                    window.start, window.end, self._read_all, tuple(copies), window.route
                )
                raise DeliveryFailed(
                    f"neutralising a copy of {self.holder} in {self.channel}: "
                    f"{describe(exc) if isinstance(exc, SlackApiError) else type(exc).__name__}",
                    unanswered=done,
                    retry_after=retry_after(exc),
                ) from exc
            self.neutralised += 1
        return Posted(self.channel, kept, adopted=True) if kept else None

    def _bot_id(self, window: PostWindow) -> str:
        try:
            return self.poster.our_bot_id()
        except SlackApiError as exc:
            raise DeliveryFailed(
                f"looking for a lost post in {self.channel}: auth.test said {describe(exc)}",
                unanswered=window,
                retry_after=retry_after(exc),
            ) from exc
        except AMBIGUOUS_ERRORS as exc:
            raise DeliveryFailed(
                f"looking for a lost post in {self.channel}: auth.test failed "
                f"({type(exc).__name__})",
                unanswered=window,
            ) from exc

    def _listed(self, window: PostWindow) -> Iterator[dict[str, Any]]:
        """Every message of the window, a page at a time.

        Slack's ts is whole seconds of its clock plus a sequence number, so the window's
        times (Redis's clock, give or take ``clock_skew_seconds``) become whole seconds: from
        the second of its start to the one after its end. History lists newest first, so
        each page moves the upper bound down to the oldest message it held; a thread lists
        oldest first, so each page moves the lower bound up. Where an earlier look-up
        stopped (``window.read``), this one goes on; a page that held the post is never
        counted as read.
        """
        skew = self.poster.look_ups.clock_skew_seconds
        oldest = Decimal(math.floor(max(window.start - skew, 0.0)))
        latest = None if window.end is None else Decimal(math.floor(window.end + skew) + 1)
        if window.read:
            mark = Decimal(window.read)
            if self.thread_ts:
                oldest = max(oldest, mark)
            else:
                latest = mark if latest is None else min(latest, mark)
        read = window.read
        # Read to the end, the bound where a page starts is past the window's other end.
        self._read_all = f"{latest if self.thread_ts else oldest:f}" if latest is not None else None
        while latest is None or oldest < latest:
            left = PostWindow(window.start, window.end, read, tuple(self.found), window.route)
            page = self._page(oldest, latest, left)
            if page is None:
                return
            logger.debug(
                "%s: page between %s and %s: %s",
                self.holder,
                oldest,
                latest,
                [str(m.get("ts")) for m in page.get("messages") or []],
            )
            messages = [
                m
                for m in page.get("messages") or []
                if m.get("ts")
                and str(m.get("ts")) != self.thread_ts
                and _inside(Decimal(str(m["ts"])), oldest, latest)
            ]
            yield from messages
            if not page.get("has_more") or not messages:
                return
            stamps = [Decimal(str(m["ts"])) for m in messages]
            if self.thread_ts:
                oldest = max(stamps)
            else:
                latest = min(stamps)
            # Read up to here (what was ours in it is in ``found``): the next attempt goes on
            # from here. Not in the window of this attempt's own post (no end yet): a post
            # still on its way may land above what was read, so it is read again from the top.
            if window.end is not None:
                read = f"{oldest if self.thread_ts else latest:f}"

    def _page(
        self, oldest: Decimal, latest: Decimal | None, left: PostWindow
    ) -> dict[str, Any] | None:
        """One page of the conversation between ``oldest`` and ``latest`` (exclusive), or
        None when Slack will never let the bot read it. ``left`` is what remains to be read,
        for the next attempt when this one has to stop."""
        look_ups = self.poster.look_ups
        budget = look_ups.budgets.get(self.method)
        if budget is not None:
            wait = budget.take(holder=self.holder)
            for _ in range(3):
                # A call due within a moment (a generous budget) is waited for here; a
                # longer wait ends the attempt, and no worker sleeps out a minute.
                if not 0 < wait <= look_ups.max_wait_seconds:
                    break
                self.poster.sleep(wait)
                wait = budget.take(holder=self.holder)
            if wait > 0:
                raise DeliveryFailed(
                    f"looking for a lost post in {self.channel}: the budget of {self.method} "
                    f"calls is spent; looking again in {wait:.2f} s",
                    unanswered=left,
                    retry_after=wait,
                )
        arguments: dict[str, Any] = {
            "channel": self.channel,
            "oldest": f"{oldest:f}",
            "inclusive": False,
            "include_all_metadata": True,
            "limit": look_ups.page_size,
        }
        if latest is not None:
            arguments["latest"] = f"{latest:f}"
        try:
            if self.thread_ts:
                answer = self.poster.reading.conversations_replies(ts=self.thread_ts, **arguments)
            else:
                answer = self.poster.reading.conversations_history(**arguments)
            return dict(answer.data) if isinstance(answer.data, dict) else {}
        except SlackApiError as exc:
            limited = retry_after(exc)
            if limited is not None:
                if budget is not None:
                    budget.hold(limited)  # another app on the token, or a budget set too high
                raise DeliveryFailed(
                    f"looking for a lost post in {self.channel}: Slack limits {self.method}; "
                    f"looking again in {limited:.0f} s",
                    unanswered=left,
                    retry_after=limited,
                ) from exc
            if error_code(exc) == "not_in_channel":
                raise NotInConversation(
                    f"looking for a lost post in {self.channel}: the bot is not in it",
                    unanswered=left,
                ) from exc
            if is_permanent(exc):
                logger.warning(
                    "cannot read %s to look for a lost post (%s): posting again; a copy may "
                    "show twice",
                    self.channel,
                    describe(exc),
                    extra={"channel": self.channel},
                )
                return None
            raise DeliveryFailed(
                f"looking for a lost post in {self.channel}: {describe(exc)}", unanswered=left
            ) from exc
        except AMBIGUOUS_ERRORS as exc:
            raise DeliveryFailed(
                f"looking for a lost post in {self.channel}: {type(exc).__name__}",
                unanswered=left,
            ) from exc


def _inside(ts: Decimal, oldest: Decimal, latest: Decimal | None) -> bool:
    return ts > oldest and (latest is None or ts < latest)
