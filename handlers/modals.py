"""Modal submissions: reject with a reason, approve with edits, answer, correct, resolve.

A refused submission keeps the modal open with the reason shown under its first input
(``response_action: errors``), so the reviewer sees it where they were typing.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App

from bot import views
from bot.edits import input_value, parse_answer, parse_corrected_draft, parse_edited_args
from handlers.decisions import Refusal, decide_as, load_for
from handlers.deps import deps_of
from store.models import Handoff

VIA_MODAL = "slack_modal"


def register(app: App) -> None:
    """Attach the view-submission listeners to ``app``."""
    app.view(views.REJECT_MODAL)(submit_reject)
    app.view(views.EDIT_MODAL)(submit_edit)
    app.view(views.ANSWER_MODAL)(submit_answer)
    app.view(views.CORRECT_MODAL)(submit_correction)
    app.view(views.RESOLVE_MODAL)(submit_resolution)


def submit_reject(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Reject, with the optional reason."""
    reason = input_value(_values(view), views.REASON_BLOCK)
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
    _decide(ack, body, view, context, "approved", edited_args=parsed.args)


def submit_answer(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Answer a question with the typed text or the picked choice."""
    loaded = _load(body, view, context)
    if isinstance(loaded, Refusal):
        _finish(ack, view, loaded)
        return
    answer = parse_answer(_values(view), getattr(loaded.payload, "choices", None))
    if not answer:
        ack(
            response_action="errors",
            errors={views.ANSWER_BLOCK: "Pick a choice or type an answer."},
        )
        return
    _decide(ack, body, view, context, "answered", answer=answer)


def submit_correction(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Send the corrected draft back to the agent."""
    draft = parse_corrected_draft(_values(view))
    if not draft.strip():
        first_part = f"{views.DRAFT_BLOCK_PREFIX}0"
        ack(response_action="errors", errors={first_part: "The draft is empty."})
        return
    _decide(ack, body, view, context, "approved", corrected_draft=draft)


def submit_resolution(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Resolve a claimed escalation with notes for the agent."""
    notes = input_value(_values(view), views.RESOLUTION_BLOCK)
    _decide(ack, body, view, context, "answered", answer=notes)


def _load(body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]) -> Handoff | Refusal:
    return load_for(
        deps_of(context),
        views.handoff_id_from_view(view),
        _user(body),
        via=VIA_MODAL,
        channel=views.channel_from_view(view),
    )


def _decide(
    ack: Ack,
    body: dict[str, Any],
    view: dict[str, Any],
    context: dict[str, Any],
    outcome: str,
    **decision: Any,
) -> None:
    result = decide_as(
        deps_of(context),
        _user(body),
        views.handoff_id_from_view(view),
        outcome,
        via=VIA_MODAL,
        channel=views.channel_from_view(view),
        **decision,
    )
    _finish(ack, view, result)


def _finish(ack: Ack, view: dict[str, Any], result: object) -> None:
    if isinstance(result, Refusal):
        ack(response_action="errors", errors={_first_input_block(view): _plain(result.message)})
    else:
        ack()


def _first_input_block(view: dict[str, Any]) -> str:
    for block in view.get("blocks", []):
        if block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return "none"


def _plain(message: str) -> str:
    # Errors under an input are plain text: show mentions as ids rather than markup.
    return message.replace("<@", "@").replace("<!subteam^", "@").replace(">", "")


def _values(view: dict[str, Any]) -> dict[str, Any]:
    return dict(view.get("state", {}).get("values", {}))


def _user(body: dict[str, Any]) -> str:
    return str(body["user"]["id"])
