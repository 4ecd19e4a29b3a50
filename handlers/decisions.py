"""The one path from a Slack user's action to the store: authorize, then decide.

Every surface (buttons, modals, thread replies) goes through here, so authorization,
the audit of denials and the "already decided" answers are the same everywhere.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.blockkit.message import already_decided_text
from bot.http.prefetch import Prefetched
from bot.mrkdwn import mention
from handlers.deps import HandlerDeps
from handlers.origin import Origin, shows_handoff
from store.exceptions import (
    AlreadyDecided,
    AlreadyVoted,
    ArgumentsChanged,
    ClaimedByOther,
    ClaimRequired,
    HandoffError,
    HandoffNotFound,
    InvalidDecision,
    RequesterMayNotVote,
    TooManyVotes,
)
from store.models import Handoff, TaskState
from worker.tracing import set_attributes, span

logger = logging.getLogger(__name__)

UNAVAILABLE = (
    "slack-handoff cannot reach its database right now, so nothing was recorded. "
    "Please try again in a minute."
)
NOT_FOUND = "This request no longer exists (it may have been removed after its retention period)."
NOT_SHOWN_HERE = (
    "This button is not on a message of that request, so nothing was done. "
    "Use the buttons on the request's own message (or on your App Home)."
)
MAY_NOT_SEE = (
    "You can see only the handoffs you may decide or asked for, and this is no longer one of them."
)
STILL_POSTING = (
    "This request is still being posted, so nothing was done yet. "
    "Please try again in a few seconds."
)

STORE_DOWN = (RedisConnectionError, RedisTimeoutError)


@dataclass(frozen=True)
class Refusal:
    """Why a user's action changed nothing, in words for that user."""

    message: str


def load_for(
    deps: HandlerDeps,
    handoff_id: str | None,
    user_id: str,
    *,
    via: str,
    channel: str | None = None,
    origin: Origin | None = None,
    prefetched: Prefetched | None = None,
) -> Handoff | Refusal:
    """The pending handoff ``user_id`` wants to act on (from ``channel``), or why they
    cannot. Denials are audited. Used before opening a modal, and before every decision.

    ``origin`` is where a click happened: it must be a place that shows the handoff (see
    ``handlers.origin``), and then its channel, not ``channel``, counts for who may decide.
    ``prefetched`` is the request gate's read of the handoff (``bot.http.prefetch``), used
    instead of reading it again when it is this handoff's.
    """
    if not handoff_id:
        return Refusal(NOT_FOUND)
    try:
        if prefetched is not None and prefetched.key == deps.store.keys.handoff(handoff_id):
            handoff = deps.store.from_document(handoff_id, prefetched.reply)
        else:
            handoff = deps.store.get(handoff_id)
        if not handoff.is_pending:
            return Refusal(already_decided_text(handoff))
        if origin is not None:
            if not shows_handoff(deps, handoff, origin, user_id):
                if being_posted(handoff, origin):
                    deny(deps, handoff_id, user_id, via=via, reason="not_posted_yet")
                    return Refusal(STILL_POSTING)
                deny(deps, handoff_id, user_id, via=via, reason="not_shown_here")
                return Refusal(NOT_SHOWN_HERE)
            channel = origin.decision_channel
        denial = deps.reviewers.denial(user_id, handoff, channel=channel)
        if denial:
            deny(deps, handoff_id, user_id, via=via)
            return Refusal(denial)
        return handoff
    except HandoffNotFound:
        return Refusal(NOT_FOUND)
    except STORE_DOWN:
        logger.exception("store unavailable")
        return Refusal(UNAVAILABLE)


def being_posted(handoff: Handoff, origin: Origin) -> bool:
    """Is a click on a message not (yet) recorded as the handoff's perhaps a click on the
    message its delivery is posting? Slack shows a message before the worker can record it
    (a slow or lost answer from Slack, Redis slow to take the record): such a click is
    refused with "try again in a few seconds" rather than "not on this request's message"."""
    in_progress = (TaskState.QUEUED, TaskState.RUNNING, TaskState.RETRYING)
    return origin.surface == "message" and handoff.delivery.state in in_progress


def may_view(
    deps: HandlerDeps, handoff: Handoff, origin: Origin, user_id: str, *, via: str
) -> Refusal | None:
    """Why ``user_id`` may not see everything the agent sent for ``handoff`` from ``origin``
    (None: they may). Anyone who sees a message of the handoff may; from their App Home or
    an ephemeral reply (``/handoff show``), only who may see the handoff now: what those
    showed earlier stays on screen after someone is taken off the handoff or leaves its
    channel."""
    try:
        if origin.surface == "message":
            if shows_handoff(deps, handoff, origin, user_id):
                return None
        elif origin.surface in ("home", "ephemeral"):
            if not may_see(deps, user_id, handoff):
                deny(deps, handoff.id, user_id, via=via, reason="may_not_see")
                return Refusal(MAY_NOT_SEE)
            # A ``show`` reply may show any handoff its reader may see; a Home, only its own.
            if origin.surface == "ephemeral" or shows_handoff(deps, handoff, origin, user_id):
                return None
        deny(deps, handoff.id, user_id, via=via, reason="not_shown_here")
    except HandoffNotFound:
        return Refusal(NOT_FOUND)
    except STORE_DOWN:
        logger.exception("store unavailable")
        return Refusal(UNAVAILABLE)
    return Refusal(NOT_SHOWN_HERE)


def may_see(deps: HandlerDeps, user_id: str, handoff: Handoff) -> bool:
    """May ``user_id`` see ``handoff`` in full: they asked for it, may decide it, or are an
    admin."""
    if handoff.requester == user_id or deps.is_admin(user_id):
        return True
    return deps.reviewers.denial(user_id, handoff) is None


def deny(
    deps: HandlerDeps, handoff_id: str, user_id: str, *, via: str, reason: str | None = None
) -> None:
    """Audit (as ``denied``) and log that ``user_id`` was refused an action on a handoff."""
    detail = {"via": via, **({"reason": reason} if reason else {})}
    deps.store.record_audit(handoff_id, "denied", actor=user_id, detail=detail)
    logger.info("denied", extra={"handoff_id": handoff_id, "user": user_id, **detail})


def decide_as(
    deps: HandlerDeps,
    user_id: str,
    handoff_id: str | None,
    outcome: str,
    *,
    via: str,
    channel: str | None = None,
    origin: Origin | None = None,
    prefetched: Prefetched | None = None,
    **decision: Any,
) -> Handoff | Refusal:
    """Decide ``handoff_id`` as ``user_id`` if they may; the first decision wins."""
    loaded = load_for(
        deps,
        handoff_id,
        user_id,
        via=via,
        channel=channel,
        origin=origin,
        prefetched=prefetched,
    )
    if isinstance(loaded, Refusal):
        return loaded
    try:
        # In the agent's trace (worker.tracing): the person's part, between post and resume.
        attributes = {"handoff.id": loaded.id, "handoff.run_id": loaded.run_id, "handoff.via": via}
        with span("handoff.decide", loaded.trace_context, attributes, refusals=(HandoffError,)):
            decided = deps.store.decide(
                loaded.id,
                outcome,
                decided_by=user_id,
                via=via,
                current=loaded,
                # HANDOFF_ADMINS may decide anything, a claimed escalation too.
                respect_claim=not deps.reviewers.admins.may_decide_anything(user_id),
                **decision,
            )
            set_attributes({"handoff.status": decided.status.value})
            return decided
    except AlreadyDecided:
        return Refusal(already_decided_text(deps.store.get(loaded.id)))
    except AlreadyVoted as exc:
        return Refusal(
            f"You already voted on this request ({exc.outcome}); each person votes once. "
            "It is decided when enough others have voted."
        )
    except ArgumentsChanged:
        return Refusal(
            "The arguments were edited since you opened this request, so your approval was "
            "not counted: look at the new arguments on the message, then decide again."
        )
    except TooManyVotes:
        return Refusal(
            "This request has taken as many votes as it can hold, so yours was not counted: "
            "ask an admin to decide it."
        )
    except RequesterMayNotVote:
        return Refusal("You asked for this request, so your vote does not count towards it.")
    except ClaimRequired:
        return Refusal("Claim this escalation first, then resolve it.")
    except ClaimedByOther as exc:
        return Refusal(
            f"{mention(exc.claimed_by)} has claimed this escalation; only they (or an admin) "
            "can decide it now."
        )
    except InvalidDecision as exc:
        return Refusal(f"That decision does not fit this request: {exc}")
    except STORE_DOWN:
        logger.exception("store unavailable")
        return Refusal(UNAVAILABLE)
