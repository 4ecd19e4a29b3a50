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
    _finish(
        ack,
        view,
        decide_as(
            deps_of(context),
            _user(body),
            views.handoff_id_from_view(view),
            "rejected",
            via=VIA_MODAL,
            channel=views.channel_from_view(view),
            comment=reason,
        ),
    )


def submit_edit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Approve with edited arguments, after checking their types and schema."""
    deps = deps_of(context)
    user = _user(body)
    loaded = load_for(
        deps,
        views.handoff_id_from_view(view),
        user,
        via=VIA_MODAL,
        channel=views.channel_from_view(view),
    )
    if isinstance(loaded, Refusal):
        _finish(ack, view, loaded)
        return
    parsed = parse_edited_args(loaded, _values(view))
    if parsed.errors:
        ack(response_action="errors", errors=parsed.errors)
        return
    _finish(
        ack,
        view,
        decide_as(
            deps,
            user,
            loaded.id,
            "approved",
            via=VIA_MODAL,
            channel=views.channel_from_view(view),
            edited_args=parsed.args,
        ),
    )


def submit_answer(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Answer a question with the typed text or the picked choice."""
    deps = deps_of(context)
    user = _user(body)
    loaded = load_for(
        deps,
        views.handoff_id_from_view(view),
        user,
        via=VIA_MODAL,
        channel=views.channel_from_view(view),
    )
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
    _finish(
        ack,
        view,
        decide_as(
            deps,
            user,
            loaded.id,
            "answered",
            via=VIA_MODAL,
            channel=views.channel_from_view(view),
            answer=answer,
        ),
    )


def submit_correction(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Send the corrected draft back to the agent."""
    draft = parse_corrected_draft(_values(view))
    if not draft.strip():
        ack(
            response_action="errors", errors={f"{views.DRAFT_BLOCK_PREFIX}0": "The draft is empty."}
        )
        return
    _finish(
        ack,
        view,
        decide_as(
            deps_of(context),
            _user(body),
            views.handoff_id_from_view(view),
            "approved",
            via=VIA_MODAL,
            channel=views.channel_from_view(view),
            corrected_draft=draft,
        ),
    )


def submit_resolution(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    """Resolve a claimed escalation with notes for the agent."""
    notes = input_value(_values(view), views.RESOLUTION_BLOCK)
    _finish(
        ack,
        view,
        decide_as(
            deps_of(context),
            _user(body),
            views.handoff_id_from_view(view),
            "answered",
            via=VIA_MODAL,
            channel=views.channel_from_view(view),
            answer=notes,
        ),
    )


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
