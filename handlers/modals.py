"""Modal submissions: reject with a reason, approve with edits, answer, correct, resolve.

A refused submission keeps the modal open with the reason shown under its first input
(``response_action: errors``), so the reviewer sees it where they were typing. Which handoff
a modal decides, and from which channel, comes from its sealed ``private_metadata``
(``handlers.modal_metadata``): a submission whose metadata we did not seal for that person
is refused.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App

from bot.blockkit import ids
from bot.blockkit.message import vote_recorded_text
from bot.blockkit.modals import render_notice_modal
from handlers.decisions import STORE_DOWN, Refusal, decide_as, deny, load_for
from handlers.deps import HandlerDeps, deps_of
from handlers.modal_inputs import (
    input_value,
    parse_answer,
    parse_corrected_draft,
    parse_edited_args,
    parse_typed_answer,
)
from handlers.modal_metadata import MAX_METADATA_CHARS, ModalOrigin, unseal
from store.exceptions import HandoffNotFound
from store.models import Handoff

VIA_MODAL = "slack_modal"

NOT_OPENED_FOR_YOU = (
    "This form was not opened for you by slack-handoff, so nothing was done. "
    "Close it and use the request's buttons again."
)


def register(app: App) -> None:
    """Attach the view-submission listeners to ``app``."""
    app.view(ids.REJECT_MODAL)(submit_reject)
    app.view(ids.EDIT_MODAL)(submit_edit)
    app.view(ids.ANSWER_MODAL)(submit_answer)
    app.view(ids.CORRECT_MODAL)(submit_correction)
    app.view(ids.RESOLVE_MODAL)(submit_resolution)


def submit_reject(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Reject, with the optional reason."""
    reason = input_value(_values(view), ids.REASON_BLOCK)
    _decide(ack, body, view, context, "rejected", comment=reason)


def submit_edit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Approve with edited arguments, after checking their types and schema."""
    loaded = _load(body, view, context)
    if isinstance(loaded, Refusal):
        _finish(ack, view, loaded)
        return
    parsed = parse_edited_args(loaded, _values(view))
    if parsed.errors:
        ack(response_action="errors", errors=parsed.errors)
        return
    if loaded.quorum is not None and parsed.args == loaded.current_args:
        # Nothing changed: a plain approval, which clears nobody's vote.
        _decide(ack, body, view, context, "approved")
        return
    _decide(ack, body, view, context, "approved", edited_args=parsed.args)


def submit_answer(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Answer a question with the typed text or the picked choice; a typed answer with its
    fields, each checked on its own input (nothing is decided while one is wrong)."""
    loaded = _load(body, view, context)
    if isinstance(loaded, Refusal):
        _finish(ack, view, loaded)
        return
    schema = getattr(loaded.payload, "answer_schema", None)
    if schema is not None:
        typed = parse_typed_answer(schema, _values(view))
        if typed.errors:
            ack(response_action="errors", errors=typed.errors)
            return
        # The store checks it once more and writes its text (resume_data.answer).
        _decide(ack, body, view, context, "answered", answer_data=typed.data)
        return
    answer = parse_answer(_values(view), getattr(loaded.payload, "choices", None))
    if not answer:
        ack(
            response_action="errors",
            errors={ids.ANSWER_BLOCK: "Pick a choice or type an answer."},
        )
        return
    _decide(ack, body, view, context, "answered", answer=answer)


def submit_correction(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Send the corrected draft back to the agent."""
    draft = parse_corrected_draft(_values(view))
    if not draft.strip():
        first_part = f"{ids.DRAFT_BLOCK_PREFIX}0"
        ack(response_action="errors", errors={first_part: "The draft is empty."})
        return
    _decide(ack, body, view, context, "approved", corrected_draft=draft)


def submit_resolution(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Resolve a claimed escalation with notes for the agent."""
    notes = input_value(_values(view), ids.RESOLUTION_BLOCK)
    _decide(ack, body, view, context, "answered", answer=notes)


def _load(body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]) -> Handoff | Refusal:
    deps = deps_of(context)
    opened = _opened(deps, body, view)
    if isinstance(opened, Refusal):
        return opened
    return load_for(deps, opened.handoff_id, _user(body), via=VIA_MODAL, channel=opened.channel)


def _opened(deps: HandlerDeps, body: dict[str, Any], view: dict[str, Any]) -> ModalOrigin | Refusal:
    """Where the submitted modal was opened, or a refusal (audited on the handoff it names,
    if there is one) when its metadata was not sealed by us for the submitter."""
    user = _user(body)
    opened = unseal(deps.modal_key, view.get("private_metadata"), user=user)
    if opened is not None:
        return opened
    metadata = view.get("private_metadata") or ""
    named = ids.handoff_id_from_view(view) if len(metadata) <= MAX_METADATA_CHARS else None
    if named:
        try:
            deny(deps, named, user, via=VIA_MODAL, reason="unsealed_modal")
        except (HandoffNotFound, *STORE_DOWN):
            pass
    return Refusal(NOT_OPENED_FOR_YOU)


def _decide(
    ack: Ack,
    body: dict[str, Any],
    view: dict[str, Any],
    context: dict[str, Any],
    outcome: str,
    **decision: Any,
) -> None:
    deps = deps_of(context)
    opened = _opened(deps, body, view)
    if isinstance(opened, Refusal):
        _finish(ack, view, opened)
        return
    if outcome == "approved" and opened.digest is not None:
        decision["seen_digest"] = opened.digest
    result = decide_as(
        deps,
        _user(body),
        opened.handoff_id,
        outcome,
        via=VIA_MODAL,
        channel=opened.channel,
        **decision,
    )
    _finish(ack, view, result)


def _finish(ack: Ack, view: dict[str, Any], result: object) -> None:
    if isinstance(result, Refusal):
        ack(response_action="errors", errors={_first_input_block(view): _plain(result.message)})
    elif isinstance(result, Handoff) and result.is_pending:
        # A vote that did not decide yet: the voter sees it counted, in the modal itself.
        ack(
            response_action="update",
            view=render_notice_modal("Vote recorded", vote_recorded_text(result)),
        )
    else:
        ack()


def _first_input_block(view: dict[str, Any]) -> str:
    for block in view.get("blocks") or []:  # Slack may send null for an empty list
        if block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return "none"


def _plain(message: str) -> str:
    # Errors under an input are plain text: show mentions as ids rather than markup.
    return message.replace("<@", "@").replace("<!subteam^", "@").replace(">", "")


def _values(view: dict[str, Any]) -> dict[str, Any]:
    return dict((view.get("state") or {}).get("values") or {})


def _user(body: dict[str, Any]) -> str:
    return str(body["user"]["id"])
