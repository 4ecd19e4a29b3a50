"""Button clicks on handoff messages. Each acks, then decides, claims or opens a modal.

Bolt runs these before answering Slack (``process_before_response``), so the one Redis
transaction of a decision is acknowledged only once it is committed; ``views.open`` is
called straight away because a trigger id expires three seconds after the click.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.blockkit import ids, modals
from bot.blockkit.message import vote_recorded_text
from bot.http.prefetch import prefetched_in
from bot.mrkdwn import mention
from bot.slack_client import AMBIGUOUS_ERRORS
from handlers.decisions import STORE_DOWN, UNAVAILABLE, Refusal, decide_as, load_for, may_view
from handlers.deps import deps_of
from handlers.modal_metadata import ModalOrigin, seal
from handlers.origin import origin_of
from store.exceptions import AlreadyDecided, ClaimedByOther, HandoffNotFound
from store.ids import parse_decision_value
from store.models import Handoff

logger = logging.getLogger(__name__)

VIA_BUTTON = "slack_button"


def register(app: App) -> None:
    """Attach the button listeners to ``app``."""
    app.action(ids.APPROVE)(approve)
    app.action(ids.CLAIM)(claim)
    app.action(ids.VIEW_FULL)(view_full)
    app.action(ids.REJECT)(_opens(modals.render_reject_modal))
    app.action(ids.EDIT)(_opens(modals.render_edit_modal))
    app.action(ids.ANSWER)(_opens(modals.render_answer_modal))
    app.action(ids.CORRECT)(_opens(modals.render_correction_modal))
    app.action(ids.RESOLVE)(_opens(modals.render_resolve_modal, needs_claim=True))


def approve(ack: Ack, body: dict[str, Any], respond: Respond, context: dict[str, Any]) -> None:
    """Approve: decided right here, in one Redis transaction."""
    ack()
    result = decide_as(
        deps_of(context),
        _user(body),
        _handoff_id(body),
        "approved",
        via=VIA_BUTTON,
        channel=_channel(body),
        origin=origin_of(body),
        prefetched=prefetched_in(context),
        seen_digest=_shown_digest(body),
    )
    if isinstance(result, Refusal):
        _tell(respond, result.message)
    elif result.is_pending:  # a vote, counted; the message shows the new count
        _tell(respond, vote_recorded_text(result))


def claim(ack: Ack, body: dict[str, Any], respond: Respond, context: dict[str, Any]) -> None:
    """Claim an escalation; the message then shows who owns it."""
    ack()
    deps = deps_of(context)
    user = _user(body)
    loaded = load_for(
        deps,
        _handoff_id(body),
        user,
        via=VIA_BUTTON,
        origin=origin_of(body),
        prefetched=prefetched_in(context),
    )
    if isinstance(loaded, Refusal):
        _tell(respond, loaded.message)
        return
    try:
        deps.store.claim(loaded.id, claimed_by=user)
    except ClaimedByOther as exc:
        _tell(respond, f"{mention(exc.claimed_by)} already claimed this escalation.")
    except (AlreadyDecided, HandoffNotFound) as exc:
        _tell(respond, str(exc))
    except STORE_DOWN:
        _tell(respond, UNAVAILABLE)


def view_full(
    ack: Ack, body: dict[str, Any], client: WebClient, respond: Respond, context: dict[str, Any]
) -> None:
    """Open a modal with everything the agent sent. Open to anyone who sees the message."""
    ack()
    deps = deps_of(context)
    handoff_id = _handoff_id(body)
    try:
        handoff = deps.store.get(handoff_id or "")
    except HandoffNotFound:
        _tell(respond, "This request no longer exists.")
        return
    except STORE_DOWN:
        _tell(respond, UNAVAILABLE)
        return
    refusal = may_view(deps, handoff, origin_of(body), _user(body), via=VIA_BUTTON)
    if refusal is not None:
        _tell(respond, refusal.message)
        return
    _open_modal(client, body, respond, modals.render_full_content_modal(handoff))
    deps.store.record_audit(handoff.id, "viewed_full", actor=_user(body))


def _opens(
    render: Callable[[Handoff], dict[str, Any]], *, needs_claim: bool = False
) -> Callable[..., None]:
    """A listener that opens the modal ``render`` builds, for a user allowed to decide."""

    def open_modal(
        ack: Ack, body: dict[str, Any], client: WebClient, respond: Respond, context: dict[str, Any]
    ) -> None:
        ack()
        user = _user(body)
        origin = origin_of(body)
        loaded = load_for(
            deps_of(context),
            _handoff_id(body),
            user,
            via=VIA_BUTTON,
            origin=origin,
            prefetched=prefetched_in(context),
        )
        if isinstance(loaded, Refusal):
            _tell(respond, loaded.message)
            return
        if needs_claim and loaded.claimed_by != user:
            owner = (
                f"{mention(loaded.claimed_by)} has claimed it"
                if loaded.claimed_by
                else "claim it first"
            )
            _tell(respond, f"Only the person who claimed this escalation resolves it ({owner}).")
            return
        admin = deps_of(context).reviewers.admins.may_decide_anything(user)
        if loaded.claimed_by and loaded.claimed_by != user and not admin:
            # A claimed escalation is its claimer's: nobody else sends it back either (the
            # store refuses it too; this only spares the reviewer a modal).
            _tell(
                respond,
                f"{mention(loaded.claimed_by)} has claimed this escalation; only they "
                "(or an admin) can decide it now.",
            )
            return
        view = render(loaded)
        # Remember where the modal was opened (it matters for who may decide: escalation),
        # and the arguments it shows: an approval submitted from it is of those.
        opened = ModalOrigin(loaded.id, origin.decision_channel, user, loaded.current_digest)
        view["private_metadata"] = seal(deps_of(context).modal_key, opened)
        _open_modal(client, body, respond, view)

    open_modal.__name__ = f"open_{render.__name__.removeprefix('render_')}"
    return open_modal


def _open_modal(
    client: WebClient, body: dict[str, Any], respond: Respond, view: dict[str, Any]
) -> None:
    try:
        client.views_open(trigger_id=body["trigger_id"], view=view)
    except SlackApiError as exc:
        error = exc.response.get("error")
        logger.warning("views.open failed: %s", error)
        _tell(respond, FORM_NOT_OPENED)
    except AMBIGUOUS_ERRORS as exc:
        # No answer from Slack (timeout, reset): the form may still open. The click must
        # get its 200 all the same, or Slack shows the person an error.
        logger.warning("views.open got no answer: %s", type(exc).__name__)
        _tell(respond, FORM_MAYBE_NOT_OPENED)


FORM_NOT_OPENED = "Slack did not open the form in time; please click again."
"""Told to a person whose click should have opened a modal that Slack refused to open."""
FORM_MAYBE_NOT_OPENED = "Slack did not answer in time; if no form opened, please click again."
"""Told when ``views.open`` got no answer within the request's budget: it may still open."""


def _tell(respond: Respond, message: str) -> None:
    """An ephemeral reply to the user who clicked, leaving the message as it is."""
    try:
        respond(text=message, response_type="ephemeral", replace_original=False)
    except Exception:  # the reply is a courtesy; a failure must not fail the click
        logger.exception("ephemeral reply failed")


def _user(body: dict[str, Any]) -> str:
    return str(body["user"]["id"])


def _channel(body: dict[str, Any]) -> str | None:
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    return str(channel) if channel else None


def _handoff_id(body: dict[str, Any]) -> str | None:
    return _button_value(body)[0]


def _shown_digest(body: dict[str, Any]) -> str | None:
    """The digest of the arguments the clicked button's message showed (approvals)."""
    return _button_value(body)[1]


def _button_value(body: dict[str, Any]) -> tuple[str | None, str | None]:
    actions = body.get("actions") or [{}]
    return parse_decision_value(actions[0].get("value"))
