"""Running a parsed ``/handoff`` command as the person who typed it.

Admin subcommands are checked here (``HANDOFF_ADMINS`` and workspace admins and owners); a
refused one on a handoff is audited as ``denied``. Every change is made by the store, which
audits it with the person as actor.
"""

from __future__ import annotations

import logging

from bot import mrkdwn as block_text
from bot.blockkit import replies
from bot.blockkit.message import RenderedMessage, already_decided_text
from bot.blockkit.replies import PageRequest
from bot.queries.listings import Listings, ListKind
from bot.queries.stats import compute_stats
from handlers.commands.grammar import Command
from handlers.decisions import NOT_FOUND, deny, may_see
from handlers.deps import HandlerDeps
from handlers.origin import remember_ephemeral
from store import slack_ids
from store.exceptions import (
    AlreadyDecided,
    HandoffNotFound,
    InvalidDecision,
    InvalidHandoffRequest,
    NotRetryable,
)
from store.lost_attempts import retry_warning
from store.models import Handoff, Status, TaskKind

logger = logging.getLogger(__name__)

VIA_COMMAND = "slash_command"
"""How the audit names changes made with the command."""

ADMIN_SUBCOMMANDS = frozenset({"cancel", "expire", "reassign", "redeliver", "retry", "stats"})
"""Subcommands only admins may run (``list`` is too, except ``list mine``)."""


def run_command(deps: HandlerDeps, user: str, command: Command) -> RenderedMessage:
    """Run a parsed command as ``user`` and return the reply."""
    if command.name == "help":
        return replies.render_help(deps.slash_command)
    if command.name == "list" and command.listing is not None:
        return listing_reply(deps, user, PageRequest(command.listing))
    if command.name == "show" and command.handoff_id:
        return show_reply(deps, user, command.handoff_id)
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
    except AlreadyDecided as exc:
        if exc.status == Status.UNDELIVERABLE.value and command.name == "reassign":
            return replies.render_notice(_not_reassigned_text(deps, handoff_id))
        return replies.render_notice(
            f"`{handoff_id}`: {already_decided_text(deps.store.get(handoff_id))}"
        )
    except (NotRetryable, InvalidDecision, InvalidHandoffRequest) as exc:
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
        channel = slack_ids.reassigned_channel(
            store.get(handoff_id).channel, command.channel, command.reviewers
        )
        store.reassign(handoff_id, by=user, channel=channel, reviewers=reviewers)
        logger.info("reassigned by command", extra=context)
        who = ", ".join(block_text.reviewer_mention(r) for r in command.reviewers)
        if channel is None:
            return replies.render_notice(
                f":arrow_right: Reassigned `{handoff_id}` to {who}: they decide it now. It is "
                "being posted again where it was, and the old message will point to the new one."
            )
        where = block_text.channel_mention(channel)
        return replies.render_notice(
            f":arrow_right: Reassigned `{handoff_id}` to {where}"
            + (f" for {who}" if who and list(command.reviewers) != [channel] else "")
            + ". It is being posted there, and the old message will point to it (a private "
            "channel needs the bot invited first: if Slack refuses the post, "
            "`/handoff list failed` shows why and the old message keeps its buttons)."
        )
    if command.name == "redeliver":
        made = store.redeliver(handoff_id, by=user, channel=command.channel)
        logger.info("redelivered by command", extra={**context, "new_handoff_id": made.handoff.id})
        return replies.render_notice(_redelivered_text(handoff_id, made.handoff, made.created))
    if command.name == "retry":
        warning = retry_warning(store.get(handoff_id).resume)
        retried = store.retry_failed(handoff_id, requested_by=user)
        logger.info("retried by command", extra=context)
        what = " and ".join(replies.TASK_NAMES[kind] for kind in retried)
        caution = f"\n:warning: {warning}" if warning and TaskKind.RESUME in retried else ""
        return replies.render_notice(
            f":repeat: The {what} of `{handoff_id}` is queued for another round of attempts."
            + caution
        )
    raise AssertionError(f"unhandled command {command.name}")  # parse_command prevents it


def _redelivered_text(old_id: str, new: Handoff, created: bool) -> str:
    where = block_text.channel_mention(new.channel) if new.channel else "the default channel"
    if not created:
        return (
            f":information_source: `{old_id}` was redelivered already, as `{new.id}` "
            f"(_{new.status.value}_); nothing was changed."
        )
    return (
        f":repeat: Redelivered `{old_id}` as the new handoff `{new.id}`: the same request, "
        f"being posted in {where}. When it is decided its run resumes again, with that "
        f"decision; `{old_id}` stays _undeliverable_ (a private channel needs the bot invited "
        "first, or this one fails too)."
    )


def _not_reassigned_text(deps: HandlerDeps, handoff_id: str) -> str:
    return (
        f"`{handoff_id}` could not be delivered and was closed _undeliverable_; its run was "
        "resumed with that, so it is not reassigned. Ask again with "
        f"`{deps.slash_command} redeliver {handoff_id} [#channel]`: a new handoff for the "
        "same run, posted there (or where this one was sent)."
    )


def listing_reply(deps: HandlerDeps, user: str, request: PageRequest) -> RenderedMessage:
    if request.filter.kind is not ListKind.MINE and not deps.is_admin(user):
        return replies.render_notice(
            f"Only handoff admins can list every handoff. "
            f"`{deps.slash_command} list mine` shows the ones you can decide."
        )
    page = Listings(deps.store, deps.reviewers).page(
        request.filter, viewer=user, after=request.after, before=request.before
    )
    return replies.render_listing(page, viewer=user)


def show_reply(deps: HandlerDeps, user: str, handoff_id: str) -> RenderedMessage:
    try:
        handoff = deps.store.get(handoff_id)
    except HandoffNotFound:
        return replies.render_notice(f"`{handoff_id}`: {NOT_FOUND}")
    if not may_see(deps, user, handoff):
        deny(deps, handoff.id, user, via=VIA_COMMAND, reason="may_not_see")
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
