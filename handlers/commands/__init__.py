"""The ``/handoff`` slash command (its name is ``HANDOFF_SLASH_COMMAND``) and the buttons of
its replies: the listeners.

The command's text is parsed into a ``Command`` (``grammar``), checked against who is asking
and run against the store (``run``), and answered in the HTTP response (``ack``) as an
ephemeral Block Kit reply, well inside Slack's 3 seconds. Previous/Next buttons carry their
listing and cursor in their value and replace the reply in place through its
``response_url``.

``list mine``, ``show`` (of a handoff the user may decide, or asked for) and ``help`` are open
to everyone; the other subcommands are for admins.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import Ack, App, Respond

from bot.blockkit import ids, replies
from bot.blockkit.message import RenderedMessage
from bot.blockkit.replies import decode_page
from handlers.commands.grammar import Command, UsageError, parse_command
from handlers.commands.run import listing_reply, run_command, show_reply
from handlers.decisions import STORE_DOWN, UNAVAILABLE
from handlers.deps import deps_of

logger = logging.getLogger(__name__)

SLOW_SUBCOMMANDS = {"stats": ":hourglass_flowing_sand: Working out the stats; they follow shortly."}
"""Subcommands answered after the ack (see ``answer_slow_command``), with what the ack says."""

__all__ = ["Command", "UsageError", "parse_command", "register", "run_command"]


def register(app: App, *, command: str) -> None:
    """Attach the slash command and its buttons' listeners to ``app``."""
    app.command(command)(ack=on_command, lazy=[answer_slow_command])
    app.action(ids.LIST_PREV)(on_page)
    app.action(ids.LIST_NEXT)(on_page)
    app.action(ids.LIST_SHOW)(on_show_button)


def on_command(ack: Ack, command: dict[str, Any], context: dict[str, Any]) -> None:
    """Answer ``/handoff ...`` with an ephemeral reply."""
    deps = deps_of(context)
    user = str(command["user_id"])
    try:
        parsed = parse_command(str(command.get("text") or ""))
    except UsageError as exc:
        _ack(ack, replies.render_help(deps.slash_command, problem=str(exc)))
        return
    try:
        # Who is an admin is cached in Redis too.
        if parsed.name in SLOW_SUBCOMMANDS and deps.is_admin(user):
            _ack(ack, replies.render_notice(SLOW_SUBCOMMANDS[parsed.name]))
            return  # answered by answer_slow_command, after the ack
        reply = run_command(deps, user, parsed)
    except STORE_DOWN:
        logger.exception("store unavailable", extra={"user": user, "command": parsed.name})
        reply = replies.render_notice(UNAVAILABLE)
    _ack(ack, reply)


def answer_slow_command(command: dict[str, Any], respond: Respond, context: dict[str, Any]) -> None:
    """Lazy listener, run after the ack: answer the subcommands that read too much to answer
    within Slack's 3 seconds (``stats`` reads the audit of its whole window) through the
    command's response_url. Does nothing for the others, answered in the ack."""
    deps = deps_of(context)
    user = str(command["user_id"])
    try:
        parsed = parse_command(str(command.get("text") or ""))
    except UsageError:
        return
    if parsed.name not in SLOW_SUBCOMMANDS or not deps.is_admin(user):
        return
    try:
        reply = run_command(deps, user, parsed)
    except STORE_DOWN:
        logger.exception("store unavailable", extra={"user": user, "command": parsed.name})
        reply = replies.render_notice(UNAVAILABLE)
    _respond(respond, reply, replace_original=False)


def on_page(ack: Ack, body: dict[str, Any], respond: Respond, context: dict[str, Any]) -> None:
    """Previous/Next: replace the reply with the requested page."""
    ack()
    deps = deps_of(context)
    user = str(body["user"]["id"])
    try:
        request = decode_page(_value(body))
        reply = listing_reply(deps, user, request)
    except ValueError:
        reply = replies.render_notice("That page is no longer available; run the list again.")
    except STORE_DOWN:
        logger.exception("store unavailable", extra={"user": user})
        reply = replies.render_notice(UNAVAILABLE)
    _respond(respond, reply, replace_original=True)


def on_show_button(
    ack: Ack, body: dict[str, Any], respond: Respond, context: dict[str, Any]
) -> None:
    """Details: the full record of one listed handoff, as a new ephemeral reply."""
    ack()
    deps = deps_of(context)
    user = str(body["user"]["id"])
    try:
        reply = show_reply(deps, user, _value(body))
    except STORE_DOWN:
        logger.exception("store unavailable", extra={"user": user})
        reply = replies.render_notice(UNAVAILABLE)
    _respond(respond, reply, replace_original=False)


def _ack(ack: Ack, reply: RenderedMessage) -> None:
    ack(response_type="ephemeral", text=reply.text, blocks=reply.blocks)


def _respond(respond: Respond, reply: RenderedMessage, *, replace_original: bool) -> None:
    try:
        respond(
            text=reply.text,
            blocks=reply.blocks,
            response_type="ephemeral",
            replace_original=replace_original,
        )
    except Exception:  # the reply is a courtesy; the person can run the command again
        logger.exception("reply through response_url failed")


def _value(body: dict[str, Any]) -> str:
    actions = body.get("actions") or [{}]
    return str(actions[0].get("value") or "")
