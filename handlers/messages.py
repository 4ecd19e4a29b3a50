"""Replies in a question's thread: the first reply by an allowed reviewer answers it.

Slack retries events it thinks were not received, so each event is handled once, by
``event_id``. The bot's own messages (dropped by Bolt), other bots' messages, edits,
deletions, messages outside a handoff's thread and replies to a handoff that no longer
exists (purged after its retention) are ignored.

What the agent receives is what the person typed, not Slack's wire text: entities unescaped,
``@name (U123)`` for a mention, a link's URL kept (``bot.received_text``). Names of people
mentioned come from ``users.info``, waited for at most ``MENTION_NAME_LOOKUP_SECONDS``.

Replies that answer: plain ones, ``thread_broadcast`` ones (also sent to the channel) and
``file_share`` ones with text, whose answer ends with the names of the files attached (the
agent cannot open them: the app has no ``files:read``). A file with no text answers nothing,
and the person is told so privately: taking it would close the question with no answer in it.

A question with a typed answer (``answer_schema``) is answered by a reply only when its
schema is a single text field (the reply is that field). Otherwise a reply answers nothing,
and the person is told so privately, with a button that opens the Answer form (the message's
own button, counted from that reply as from ``/handoff show``'s: ``handlers.origin``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from bot import defaults
from bot.blockkit.message import render_form_needed
from bot.received_text import mentioned_users, plain_text
from bot.slack_client import patient_twin
from handlers.decisions import STORE_DOWN, UNAVAILABLE, Refusal, decide_as, load_for
from handlers.deps import HandlerDeps, deps_of
from handlers.origin import remember_ephemeral
from store.answer_schemas import single_text_field
from store.exceptions import HandoffNotFound
from store.models import Handoff, RequestType

logger = logging.getLogger(__name__)

VIA_THREAD = "slack_thread"

ANSWERING_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})
"""Message subtypes that may answer: a plain reply, one also sent to the channel, one with
files. Edits, deletions, joins and the like never do."""

FILE_ALONE = (
    "A file alone does not answer this question, so nothing was recorded: the agent cannot "
    "open files. Reply in the thread with your answer in words (you may attach files too)."
)
FILES_SHOWN = 10
"""File names listed at most in an answer; more are counted."""


def register(app: App) -> None:
    """Attach the message-event listener to ``app``."""
    app.event("message")(on_message)


def on_message(
    body: dict[str, Any], event: dict[str, Any], client: WebClient, context: dict[str, Any]
) -> None:
    """Answer a pending question from a reply in its thread."""
    if event.get("subtype") not in ANSWERING_SUBTYPES or event.get("bot_id"):
        return  # edits, deletions, joins and bots' messages never answer a question
    thread_ts, channel, user = event.get("thread_ts"), event.get("channel"), event.get("user")
    if not thread_ts or thread_ts == event.get("ts") or not channel or not user:
        return
    deps = deps_of(context)
    try:
        handoff_id = deps.store.handoff_for_message(channel, thread_ts)
        if handoff_id is None:
            return
        # Read before the event is marked seen: a reply to a handoff that is gone (purged
        # after its retention, while a link to it survived) changes nothing at all.
        handoff = deps.store.get(handoff_id)
        event_id = body.get("event_id")
        if event_id and not deps.store.first_sighting(str(event_id)):
            logger.info("duplicate event ignored", extra={"event_id": event_id})
            return
    except HandoffNotFound:
        logger.info("reply to a handoff that no longer exists", extra={"handoff_id": handoff_id})
        return
    except STORE_DOWN:
        logger.exception("store unavailable while reading a thread reply")
        if _parent_author(event) == context.get("bot_user_id"):
            # Likely an answer to one of our questions: say it was not taken, rather than
            # leave the person thinking it was.
            _reply_privately(client, channel, user, thread_ts, UNAVAILABLE)
        return
    if handoff.request_type is not RequestType.QUESTION:
        return
    if _needs_the_form(handoff):
        if event.get("text") or event.get("files"):
            _offer_the_form(deps, client, handoff_id, channel, user, thread_ts)
        return
    raw = event.get("text")
    # Names only for an answer that may be taken: a late reply is refused anyway.
    names = _user_names(client, raw) if handoff.is_pending else {}
    text = plain_text(raw, user_names=names).strip()
    files = _file_names(event.get("files"))
    if not text:
        if files:
            loaded = load_for(deps, handoff_id, user, via=VIA_THREAD, channel=channel)
            refusal = loaded.message if isinstance(loaded, Refusal) else FILE_ALONE
            _reply_privately(client, channel, user, thread_ts, refusal)
        return
    if files:
        text = f"{text}\n\n(attached in Slack: {files})"
    result = decide_as(
        deps, user, handoff_id, "answered", via=VIA_THREAD, channel=channel, answer=text
    )
    if isinstance(result, Refusal):
        _reply_privately(client, channel, user, thread_ts, result.message)


def _needs_the_form(handoff: Handoff) -> bool:
    """Does ``handoff`` take a typed answer that a reply in its thread cannot give (anything
    but a single text field)?"""
    schema = getattr(handoff.payload, "answer_schema", None)
    return schema is not None and single_text_field(schema) is None


def _offer_the_form(
    deps: HandlerDeps, client: WebClient, handoff_id: str, channel: str, user: str, thread_ts: str
) -> None:
    """Tell ``user``, privately in the thread, that their reply answered nothing and offer
    the Answer form; or, if they may not answer, why (as a reply that answers would be)."""
    loaded = load_for(deps, handoff_id, user, via=VIA_THREAD, channel=channel)
    if isinstance(loaded, Refusal):
        _reply_privately(client, channel, user, thread_ts, loaded.message)
        return
    try:
        # The button is the message's own; a click counts only from a reply we recorded.
        remember_ephemeral(deps, user, loaded.id)
    except STORE_DOWN:
        logger.exception("store unavailable while offering the answer form")
        _reply_privately(client, channel, user, thread_ts, UNAVAILABLE)
        return
    reply = render_form_needed(loaded)
    logger.info("thread reply needs the form", extra={"handoff_id": loaded.id, "user": user})
    _reply_privately(client, channel, user, thread_ts, reply.text, blocks=reply.blocks)


def _parent_author(event: dict[str, Any]) -> Any:
    """Who wrote the message the reply is in the thread of: a broadcast reply names it in
    its ``root`` (the parent message), others in ``parent_user_id``."""
    root = event.get("root")
    if isinstance(root, Mapping):
        return event.get("parent_user_id") or root.get("user")
    return event.get("parent_user_id")


def _file_names(files: Any) -> str:
    """The names of a reply's files, for its answer ("" for none)."""
    if not isinstance(files, list) or not files:
        return ""
    names = [
        str(f.get("name") or f.get("title") or "a file") if isinstance(f, Mapping) else "a file"
        for f in files
    ]
    shown = ", ".join(names[:FILES_SHOWN])
    return f"{shown} and {len(names) - FILES_SHOWN} more" if len(names) > FILES_SHOWN else shown


_LOOKUPS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mention-names")
"""Asks ``users.info`` for the people thread answers mention, a few at a time for all the
answers a process takes (a storm of answers must not start a thread per mention)."""


def _user_names(client: WebClient, text: Any) -> dict[str, str]:
    """Names of the people ``text`` mentions, as far as ``users.info`` tells them in time.

    The look-ups run side by side, waited for together at most
    ``MENTION_NAME_LOOKUP_SECONDS``: a slow or failing Slack costs the answer its names,
    never the answer (nor Slack's 3 seconds). A late look-up's name is not read.
    """
    users = mentioned_users(text)[: defaults.MENTION_NAME_LOOKUPS]
    if not users:
        return {}
    asked = {_LOOKUPS.submit(_name_of, client, user): user for user in users}
    done, _ = wait(asked, timeout=defaults.MENTION_NAME_LOOKUP_SECONDS)
    names = {asked[future]: future.result() for future in done}
    return {user: name for user, name in names.items() if name}


def _name_of(client: WebClient, user_id: str) -> str | None:
    try:
        person = client.users_info(user=user_id).get("user") or {}
        profile = person.get("profile") or {}
        name = profile.get("display_name") or profile.get("real_name") or person.get("name")
    except Exception as exc:  # the answer keeps the id: a name is only a nicety
        logger.info("users.info failed for mentioned user %s: %s", user_id, exc)
        return None
    return name if isinstance(name, str) and name else None


_COURTESY = ThreadPoolExecutor(max_workers=4, thread_name_prefix="thread-reply")
"""Posts the private replies to thread answers once Slack has its answer to the event."""


def _reply_privately(
    client: WebClient,
    channel: str,
    user: str,
    thread_ts: str,
    text: str,
    *,
    blocks: list[dict[str, Any]] | None = None,
) -> None:
    """Tell ``user`` privately in the thread (``text``, shown as ``blocks`` when given), after
    the event is answered.

    The decision (or refusal) stands already, so the reply need not hold the event's answer
    (Slack's 3 seconds, and the request client's 2 s a call); and a Slack slow to take it
    must not cost the person the reply. So it is posted in the background, with the jobs'
    patience (``bot.slack_client.patient_twin``: resets and a 429 retried); a process that
    stops first loses it, as a courtesy can be."""
    _COURTESY.submit(_post_privately, patient_twin(client), channel, user, thread_ts, text, blocks)


def _post_privately(
    client: WebClient,
    channel: str,
    user: str,
    thread_ts: str,
    text: str,
    blocks: list[dict[str, Any]] | None = None,
) -> None:
    try:
        client.chat_postEphemeral(
            channel=channel, user=user, thread_ts=thread_ts, text=text, blocks=blocks
        )
    except Exception:  # a courtesy reply; the decision (or refusal) already stands
        logger.exception("ephemeral reply failed")
