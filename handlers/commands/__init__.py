"""The ``/handoff`` slash command (its name is ``HANDOFF_SLASH_COMMAND``) and the buttons of
its replies.

The command's text is parsed into a ``Command``, checked against who is asking, run against
the store, and answered in the HTTP response (``ack``) as an ephemeral Block Kit reply, well
inside Slack's 3 seconds. Previous/Next buttons carry their listing and cursor in their value
and replace the reply in place through its ``response_url``.

``list mine``, ``show`` (of a handoff the user may decide, or asked for) and ``help`` are open
to everyone; the other subcommands are for admins (``HANDOFF_ADMINS`` and workspace admins
and owners). Every change is made by the store, which audits it with the user as actor; a
refused admin subcommand on a handoff is audited as ``denied``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slack_bolt import Ack, App, Respond

from bot.blockkit import ids, replies
from bot.blockkit import text as block_text
from bot.blockkit.message import RenderedMessage, already_decided_text
from bot.blockkit.replies import PageRequest, decode_page
from bot.queries.listings import ListFilter, Listings, ListKind
from bot.queries.stats import compute_stats
from handlers.decisions import NOT_FOUND, STORE_DOWN, UNAVAILABLE, may_see
from handlers.deps import HandlerDeps, deps_of
from handlers.origin import remember_ephemeral
from store.exceptions import AlreadyDecided, HandoffNotFound, InvalidDecision, NotRetryable
from store.ids import is_handoff_id
from store.models import RequestType, TaskKind

logger = logging.getLogger(__name__)

VIA_COMMAND = "slash_command"

ADMIN_SUBCOMMANDS = frozenset({"cancel", "expire", "reassign", "retry", "stats"})

_TASK_NAMES = {
    TaskKind.DELIVER: "delivery",
    TaskKind.RESUME: "resume",
    TaskKind.NOTIFY: "message update",
}
"""Subcommands only admins may run (``list`` is too, except ``list mine``)."""

SLOW_SUBCOMMANDS = {"stats": ":hourglass_flowing_sand: Working out the stats; they follow shortly."}
"""Subcommands answered after the ack (see ``answer_slow_command``), with what the ack says."""

DEFAULT_STATS_WINDOW = timedelta(days=7)
MAX_STATS_WINDOW = timedelta(days=366)

_CHANNEL = re.compile(r"^(?:<#([CG][A-Z0-9]+)(?:\|[^>]*)?>|#?([CG][A-Z0-9]{2,}))$")
_USER = re.compile(r"^(?:<@([UW][A-Z0-9]+)(?:\|[^>]*)?>|@?([UW][A-Z0-9]{2,}))$")
_GROUP = re.compile(r"^(?:<!subteam\^(S[A-Z0-9]+)(?:\|[^>]*)?>|@?(S[A-Z0-9]{2,}))$")
_WINDOW = re.compile(r"^(\d{1,4})([hdw])$")
_WINDOW_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


class UsageError(ValueError):
    """The command's text does not say something the bot understands; the message says why."""


@dataclass(frozen=True)
class Command:
    """A parsed ``/handoff`` command.

    Example: ``parse_command("cancel ho_01J... duplicate")`` is
    ``Command("cancel", handoff_id="ho_01J...", reason="duplicate")``.
    """

    name: str
    listing: ListFilter | None = None
    handoff_id: str | None = None
    reason: str | None = None
    channel: str | None = None
    reviewers: tuple[str, ...] = ()
    window: timedelta = DEFAULT_STATS_WINDOW


def parse_command(text: str) -> Command:
    """Parse the text after the command name; raises ``UsageError``."""
    words = text.split(maxsplit=1)
    if not words:
        return Command("help")
    name, rest = words[0].lower(), (words[1].strip() if len(words) > 1 else "")
    if name == "help":
        return Command("help")
    if name == "list":
        return Command("list", listing=_parse_listing(rest))
    if name in ("show", "cancel", "expire", "retry", "reassign"):
        parts = rest.split(maxsplit=1)
        if not parts:
            raise UsageError(f"`{name}` needs a handoff id, e.g. `{name} ho_01JD...`.")
        handoff_id, tail = _handoff_id(parts[0]), (parts[1].strip() if len(parts) > 1 else "")
        if name == "cancel":
            return Command(name, handoff_id=handoff_id, reason=tail or None)
        if name == "reassign":
            channel, reviewers = _parse_targets(tail)
            return Command(name, handoff_id=handoff_id, channel=channel, reviewers=reviewers)
        if tail:
            raise UsageError(f"`{name}` takes only a handoff id; I don't know what `{tail}` is.")
        return Command(name, handoff_id=handoff_id)
    if name == "stats":
        return Command("stats", window=_parse_window(rest) if rest else DEFAULT_STATS_WINDOW)
    raise UsageError(f"I don't know the subcommand `{words[0]}`.")


def _parse_listing(text: str) -> ListFilter:
    words = text.split(maxsplit=1)
    if not words or words[0].lower() == "pending":
        if len(words) > 1:
            raise UsageError(f"`list pending` takes nothing more; I don't know `{words[1]}`.")
        return ListFilter(ListKind.PENDING)
    first, rest = words[0], (words[1].strip() if len(words) > 1 else "")
    if first.lower() == "mine" and not rest:
        return ListFilter(ListKind.MINE)
    if first.lower() == "run" and rest and len(rest.split()) == 1:
        return ListFilter(ListKind.RUN, rest)
    if first.lower() == "type" and rest:
        kind = rest.lower().removesuffix("s")
        if kind not in {t.value for t in RequestType}:
            known = ", ".join(t.value for t in RequestType)
            raise UsageError(f"`{rest}` is not a request type; use one of {known}.")
        return ListFilter(ListKind.TYPE, kind)
    channel = _CHANNEL.match(first)
    if channel and not rest:
        return ListFilter(ListKind.CHANNEL, channel.group(1) or channel.group(2))
    if first.startswith("#"):
        raise UsageError(
            f"Slack did not turn `{first}` into a channel: pick the channel from the "
            "autocomplete list, or give its id (`#C0123ABCD`)."
        )
    raise UsageError(f"I can't list `{text}`.")


def _parse_targets(text: str) -> tuple[str | None, tuple[str, ...]]:
    if not text:
        raise UsageError("`reassign` needs where to: a #channel, an @person or an @group.")
    channel: str | None = None
    reviewers: list[str] = []
    for word in text.split():
        if found := _CHANNEL.match(word):
            if channel is not None:
                raise UsageError("A handoff can be reassigned to one channel at a time.")
            channel = found.group(1) or found.group(2)
        elif found := _USER.match(word) or _GROUP.match(word):
            reviewers.append(found.group(1) or found.group(2))
        else:
            raise UsageError(
                f"`{word}` is not a #channel, an @person or an @group that Slack resolved; "
                "pick it from the autocomplete list."
            )
    return channel, tuple(dict.fromkeys(reviewers))


def _parse_window(text: str) -> timedelta:
    found = _WINDOW.match(text.strip().lower())
    if not found:
        raise UsageError(f"`stats` takes a window such as `7d`, `24h` or `2w`, not `{text}`.")
    window = timedelta(**{_WINDOW_UNITS[found.group(2)]: int(found.group(1))})
    if not timedelta(0) < window <= MAX_STATS_WINDOW:
        raise UsageError("The stats window must be between 1 hour and a year.")
    return window


def _handoff_id(word: str) -> str:
    if not is_handoff_id(word):
        raise UsageError(f"`{word}` is not a handoff id (they look like `ho_01JDZ3Q6T5...`).")
    return word


# -- listeners ---------------------------------------------------------------------------


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
        reply = _listing(deps, user, request)
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
        reply = _show(deps, user, _value(body))
    except STORE_DOWN:
        logger.exception("store unavailable", extra={"user": user})
        reply = replies.render_notice(UNAVAILABLE)
    _respond(respond, reply, replace_original=False)


# -- running a command -------------------------------------------------------------------


def run_command(deps: HandlerDeps, user: str, command: Command) -> RenderedMessage:
    """Run a parsed command as ``user`` and return the reply."""
    if command.name == "help":
        return replies.render_help(deps.slash_command)
    if command.name == "list" and command.listing is not None:
        return _listing(deps, user, PageRequest(command.listing))
    if command.name == "show" and command.handoff_id:
        return _show(deps, user, command.handoff_id)
    if command.name in ADMIN_SUBCOMMANDS and not deps.is_admin(user):
        _audit_denial(deps, user, command)
        return replies.render_notice(
            f"Only handoff admins can run `{deps.slash_command} {command.name}`. "
            f"Try `{deps.slash_command} list mine` or `{deps.slash_command} help`."
        )
    if command.name == "stats":
        return replies.render_stats(compute_stats(deps.store, window=command.window))
    handoff_id = command.handoff_id or ""
    try:
        return _change(deps, user, command, handoff_id)
    except HandoffNotFound:
        return replies.render_notice(f"`{handoff_id}`: {NOT_FOUND}")
    except AlreadyDecided:
        return replies.render_notice(
            f"`{handoff_id}`: {already_decided_text(deps.store.get(handoff_id))}"
        )
    except (NotRetryable, InvalidDecision) as exc:
        return replies.render_notice(f"`{handoff_id}`: {exc}")


def _change(deps: HandlerDeps, user: str, command: Command, handoff_id: str) -> RenderedMessage:
    store = deps.store
    context = {"handoff_id": handoff_id, "user": user, "command": command.name}
    if command.name == "cancel":
        store.cancel(handoff_id, cancelled_by=user, reason=command.reason, via=VIA_COMMAND)
        logger.info("cancelled by command", extra=context)
        return replies.render_notice(
            f":wastebasket: Cancelled `{handoff_id}`. Its run resumes with _cancelled_, and "
            "its message will say so."
        )
    if command.name == "expire":
        store.expire_now(handoff_id, expired_by=user)
        logger.info("expired by command", extra=context)
        return replies.render_notice(
            f":hourglass: Expired `{handoff_id}`. Its run resumes with _expired_."
        )
    if command.name == "reassign":
        reviewers = list(command.reviewers) if command.reviewers else None
        store.reassign(handoff_id, by=user, channel=command.channel, reviewers=reviewers)
        logger.info("reassigned by command", extra=context)
        where = [f"<#{command.channel}>"] if command.channel else []
        where += [block_text.reviewer_mention(r) for r in command.reviewers]
        return replies.render_notice(
            f":arrow_right: Reassigned `{handoff_id}` to {', '.join(where)}. It is posted "
            "there, and the old message points to it."
        )
    if command.name == "retry":
        retried = store.retry_failed(handoff_id, requested_by=user)
        logger.info("retried by command", extra=context)
        what = " and ".join(_TASK_NAMES[kind] for kind in retried)
        return replies.render_notice(
            f":repeat: The {what} of `{handoff_id}` is queued for another round of attempts."
        )
    raise AssertionError(f"unhandled command {command.name}")  # parse_command prevents it


def _listing(deps: HandlerDeps, user: str, request: PageRequest) -> RenderedMessage:
    if request.filter.kind is not ListKind.MINE and not deps.is_admin(user):
        return replies.render_notice(
            f"Only handoff admins can list every handoff. "
            f"`{deps.slash_command} list mine` shows the ones you can decide."
        )
    page = Listings(deps.store, deps.reviewers).page(
        request.filter, viewer=user, after=request.after, before=request.before
    )
    return replies.render_listing(page)


def _show(deps: HandlerDeps, user: str, handoff_id: str) -> RenderedMessage:
    try:
        handoff = deps.store.get(handoff_id)
    except HandoffNotFound:
        return replies.render_notice(f"`{handoff_id}`: {NOT_FOUND}")
    if not may_see(deps, user, handoff):
        return replies.render_notice(
            f"You can see only the handoffs you may decide or asked for; `{handoff_id}` "
            "is not one of them."
        )
    if handoff.is_pending:  # the reply carries the decision buttons
        remember_ephemeral(deps, user, handoff.id)
    return replies.render_detail(handoff, deps.store.audit_trail(handoff_id))


def _audit_denial(deps: HandlerDeps, user: str, command: Command) -> None:
    if not command.handoff_id:
        return
    try:
        deps.store.record_audit(
            command.handoff_id,
            "denied",
            actor=user,
            detail={"via": VIA_COMMAND, "command": command.name},
        )
    except HandoffNotFound:
        return
    logger.info(
        "admin command denied",
        extra={"handoff_id": command.handoff_id, "user": user, "command": command.name},
    )


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
