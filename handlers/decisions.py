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

from bot.views import already_decided_text
from handlers.deps import HandlerDeps
from store.exceptions import (
    AlreadyDecided,
    ClaimedByOther,
    ClaimRequired,
    HandoffNotFound,
    InvalidDecision,
)
from store.models import Handoff

logger = logging.getLogger(__name__)

UNAVAILABLE = (
    "slack-handoff cannot reach its database right now, so nothing was recorded. "
    "Please try again in a minute."
)
NOT_FOUND = "This request no longer exists (it may have been removed after its retention period)."

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
) -> Handoff | Refusal:
    """The pending handoff ``user_id`` wants to act on (from ``channel``), or why they
    cannot. Denials are audited. Used before opening a modal, and before every decision.
    """
    if not handoff_id:
        return Refusal(NOT_FOUND)
    try:
        handoff = deps.store.get(handoff_id)
        if not handoff.is_pending:
            return Refusal(already_decided_text(handoff))
        denial = deps.reviewers.denial(user_id, handoff, channel=channel)
        if denial:
            deps.store.record_audit(handoff_id, "denied", actor=user_id, detail={"via": via})
            logger.info("denied", extra={"handoff_id": handoff_id, "user": user_id, "via": via})
            return Refusal(denial)
        return handoff
    except HandoffNotFound:
        return Refusal(NOT_FOUND)
    except STORE_DOWN:
        logger.exception("store unavailable")
        return Refusal(UNAVAILABLE)


def decide_as(
    deps: HandlerDeps,
    user_id: str,
    handoff_id: str | None,
    outcome: str,
    *,
    via: str,
    channel: str | None = None,
    **decision: Any,
) -> Handoff | Refusal:
    """Decide ``handoff_id`` as ``user_id`` if they may; the first decision wins."""
    loaded = load_for(deps, handoff_id, user_id, via=via, channel=channel)
    if isinstance(loaded, Refusal):
        return loaded
    try:
        return deps.store.decide(
            loaded.id, outcome, decided_by=user_id, via=via, current=loaded, **decision
        )
    except AlreadyDecided:
        return Refusal(already_decided_text(deps.store.get(loaded.id)))
    except ClaimRequired:
        return Refusal("Claim this escalation first, then resolve it.")
    except ClaimedByOther as exc:
        return Refusal(
            f"<@{exc.claimed_by}> has claimed this escalation; only they can resolve it."
        )
    except InvalidDecision as exc:
        return Refusal(f"That decision does not fit this request: {exc}")
    except STORE_DOWN:
        logger.exception("store unavailable")
        return Refusal(UNAVAILABLE)
