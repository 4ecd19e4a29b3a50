"""Posting a Slack message once, although Slack's answer to a post can be lost.

A ``chat.postMessage`` whose answer never arrives (a timeout, a reset connection, a 5xx) may
or may not have posted. Repeating it blindly, as slack_sdk's connection-error handler or a
task retry would, can leave two messages with live buttons. So each post is tagged with
message metadata (an event type and the handoff id), sent through a client that retries only
429s, and after an ambiguous failure the poster first looks for the message it may have
posted (``conversations.history``, or ``conversations.replies`` in a thread, with
``include_all_metadata``) from the time of the first try: found, it is adopted; not found, it
is posted again. When two tries both landed, the extra copies are neutralised.

Those reads are rate-limited hard for some apps (one call a minute outside the Slack
Marketplace), so they happen only after an ambiguous failure, or when the caller says that an
earlier attempt may have posted (``since``, e.g. on a task's second attempt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.slack_client import AMBIGUOUS_ERRORS, posting_client
from store.exceptions import HandoffError

logger = logging.getLogger(__name__)

CLOCK_SKEW_SECONDS = 60.0
"""Slack's clock (message ts) and ours may differ: look this much earlier than our clock says."""
MAX_PAGES = 5
"""Most pages of history read when looking for a post (newest first, so ours come early)."""
PAGE_SIZE = 200


class AnswerLost(HandoffError):
    """Every try at a post lost its answer and the post was not found; the caller should
    retry later with ``since`` (the next try looks for it again before posting)."""


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


Neutralise = Callable[[WebClient, str, str, str], None]
"""``(client, channel, extra_ts, kept_ts)``: make an extra copy harmless."""


def delete_extra(client: WebClient, channel: str, extra_ts: str, kept_ts: str) -> None:
    """Neutralise an extra copy by deleting it (for thread replies nobody acts on)."""
    try:
        client.chat_delete(channel=channel, ts=extra_ts)
    except SlackApiError as exc:
        if exc.response.get("error") != "message_not_found":  # deleted by an earlier try
            raise


class Poster:
    """Posts tagged messages at most once (see the module's docstring).

    ``client`` (with its retries) reads history and neutralises extras; posts go through
    ``posting`` (by default a twin of ``client`` that retries only 429s). After an ambiguous
    failure the poster waits ``settle_seconds`` (default: the client's timeout), so that a
    post still on its way lands before it looks; it tries ``tries`` posts per call (each
    lost answer costs the client's timeout plus the settling time: keep ``tries`` times
    twice the timeout inside the job's timeout, ``HANDOFF_DELIVERY_TIMEOUT_SECONDS``).

    Example::

        poster = Poster(client)
        posted = poster.post(channel="C0APPROVALS", tag=tag, text="Approve?", blocks=blocks)
    """

    def __init__(
        self,
        client: WebClient,
        *,
        posting: WebClient | None = None,
        settle_seconds: float | None = None,
        tries: int = 2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.posting = posting or posting_client(client)
        self.settle_seconds = float(client.timeout if settle_seconds is None else settle_seconds)
        self.tries = tries
        self.sleep = sleep
        self._bot_id: str | None = None

    def post(
        self,
        *,
        channel: str,
        tag: PostTag,
        neutralise: Neutralise,
        since: float | None = None,
        exclude: Collection[str] = (),
        thread_ts: str | None = None,
        **message: Any,
    ) -> Posted:
        """Post ``message`` (``chat.postMessage`` fields) tagged with ``tag``, once.

        ``since`` (epoch seconds): an earlier attempt may have posted from then on, so look
        first. ``exclude``: ts of messages with the same tag that are known and must not be
        adopted (an old message left by a reassignment). Raises ``AnswerLost`` when every
        try was ambiguous and nothing was found; other Slack errors are raised as they are.
        """
        if since is not None:
            found = self._find(channel, tag, since, exclude, thread_ts, neutralise)
            if found is not None:
                logger.info("adopted an earlier post", extra={"channel": channel, "ts": found.ts})
                return found
        first_try: float | None = None
        error: Exception | None = None
        for _ in range(self.tries):
            first_try = first_try or time.time()
            try:
                answer = self.posting.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, metadata=tag.metadata(), **message
                )
                return Posted(str(answer["channel"]), str(answer["ts"]))
            except SlackApiError as exc:
                if exc.response.status_code < 500:
                    raise  # Slack answered: nothing was posted
                error = exc
            except AMBIGUOUS_ERRORS as exc:
                error = exc
            logger.warning(
                "answer to a post lost (%s); looking for it before posting again",
                type(error).__name__,
                extra={"channel": channel},
            )
            self.sleep(self.settle_seconds)
            found = self._find(
                channel, tag, first_try - CLOCK_SKEW_SECONDS, exclude, thread_ts, neutralise
            )
            if found is not None:
                return found
        raise AnswerLost(
            f"posting to {channel} lost its answer {self.tries} times ({error!r}) and the post "
            "was not found; the next attempt looks for it again"
        )

    def _find(
        self,
        channel: str,
        tag: PostTag,
        oldest: float,
        exclude: Collection[str],
        thread_ts: str | None,
        neutralise: Neutralise,
    ) -> Posted | None:
        """Our message carrying ``tag`` in ``channel`` since ``oldest``; the first one posted
        is kept and the others neutralised."""
        bot_id = self._our_bot_id()
        found = sorted(
            (
                m
                for m in self._listed(channel, oldest, thread_ts)
                if tag.matches(m)
                and m.get("bot_id") == bot_id
                and str(m.get("ts")) not in exclude
                and str(m.get("ts")) != thread_ts
            ),
            key=lambda m: float(m["ts"]),
        )
        if not found:
            return None
        kept = str(found[0]["ts"])
        for extra in found[1:]:
            logger.warning(
                "neutralising a duplicate post", extra={"channel": channel, "ts": extra["ts"]}
            )
            neutralise(self.client, channel, str(extra["ts"]), kept)
        return Posted(channel, kept, adopted=True)

    def _listed(self, channel: str, oldest: float, thread_ts: str | None) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            arguments: dict[str, Any] = {
                "channel": channel,
                "oldest": f"{max(oldest, 0):.6f}",
                "include_all_metadata": True,
                "limit": PAGE_SIZE,
            }
            if cursor:
                arguments["cursor"] = cursor
            if thread_ts:
                page = self.client.conversations_replies(ts=thread_ts, **arguments)
            else:
                page = self.client.conversations_history(**arguments)
            listed.extend(page.get("messages") or [])
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor:
                break
        # conversations.replies lists the parent whatever ``oldest`` says.
        return [m for m in listed if float(m.get("ts") or 0) > oldest]

    def _our_bot_id(self) -> str | None:
        """The bot's own bot id: only its messages may be adopted, never another app's
        message that happens to carry the same metadata."""
        if self._bot_id is None:
            self._bot_id = str(self.client.auth_test()["bot_id"])
        return self._bot_id
