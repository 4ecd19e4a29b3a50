"""Block Kit rendering of handoffs: channel messages, modals and the "View full" modal.

All Block Kit of the bot is built here, with ``slack_sdk.models`` so that Slack's limits are
checked by ``to_dict()`` in our tests rather than by Slack in production. Handlers only
call these functions; they never assemble blocks themselves.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from store.models import Handoff, RequestType, Status

# Action ids of the buttons on a handoff message (and on the App Home).
APPROVE = "handoff_approve"
REJECT = "handoff_reject"
EDIT = "handoff_edit"
ANSWER = "handoff_answer"
CORRECT = "handoff_correct"
CLAIM = "handoff_claim"
RESOLVE = "handoff_resolve"
VIEW_FULL = "handoff_view_full"

# Callback ids of the modals.
REJECT_MODAL = "handoff_reject_modal"
EDIT_MODAL = "handoff_edit_modal"
ANSWER_MODAL = "handoff_answer_modal"
CORRECT_MODAL = "handoff_correct_modal"
RESOLVE_MODAL = "handoff_resolve_modal"
FULL_CONTENT_MODAL = "handoff_full_content"

# Input blocks of the modals; each has one element with action id VALUE.
REASON_BLOCK = "reason"
ANSWER_BLOCK = "answer"
CHOICE_BLOCK = "choice"
DRAFT_BLOCK_PREFIX = "draft_part_"
RESOLUTION_BLOCK = "resolution"
ARG_BLOCK_PREFIX = "arg_"
VALUE = "value"

# Slack's limits, and the share of them one message may spend on agent text. A message
# whose blocks total about 12-13k characters is rejected, so the budget stays well below.
SECTION_TEXT_LIMIT = 3000
FIELD_TEXT_LIMIT = 2000
INPUT_MAX_LENGTH = 3000
MODAL_BLOCK_LIMIT = 100
MESSAGE_BLOCK_LIMIT = 50
MESSAGE_TEXT_BUDGET = 11000
MODAL_TEXT_BUDGET = 200_000
_CONTEXT_SHOWN = 1500
_MAIN_TEXT_SHOWN = 2500
_FIELD_SHOWN = 300
_FIELDS_SHOWN = 10
_FULL_CHUNK = 2900

_OUTCOME_ICONS = {
    Status.APPROVED: ":white_check_mark:",
    Status.REJECTED: ":no_entry_sign:",
    Status.ANSWERED: ":speech_balloon:",
    Status.EXPIRED: ":hourglass:",
    Status.CANCELLED: ":wastebasket:",
}


@dataclass(frozen=True)
class RenderedMessage:
    """A message ready for ``chat.postMessage`` / ``chat.update``."""

    text: str
    blocks: list[dict[str, Any]]


@dataclass(frozen=True)
class FullContent:
    """Which part of a handoff the "View full" modal shows."""

    handoff_id: str
    part: str


def render_message(
    handoff: Handoff, *, now: datetime | None = None, note: str | None = None
) -> RenderedMessage:
    """The channel message of a handoff in its current state.

    A pending handoff shows its buttons; a decided one shows who decided what, instead.
    Long agent text is shortened with a **View full** button. ``note`` (mrkdwn written by
    the bot, e.g. "Escalated here") is shown under the header.
    """
    blocks: list[Block] = [HeaderBlock(text=_clip(_title(handoff), 150))]
    if note:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_clip(note, 500))]))
    truncated = False
    if handoff.context:
        text, cut = _agent_text(handoff.context, _CONTEXT_SHOWN, quote=True)
        truncated |= cut
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Why*\n{text}")))
    body, cut = _body_blocks(handoff)
    truncated |= cut
    blocks.extend(body)
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_details_line(handoff, now))]))
    if handoff.is_pending:
        blocks.append(_actions(handoff, truncated=truncated))
    else:
        blocks.append(DividerBlock())
        blocks.append(SectionBlock(text=MarkdownTextObject(text=outcome_text(handoff))))
        if truncated:
            blocks.append(
                ActionsBlock(block_id="handoff_more", elements=[_view_full_button(handoff)])
            )
    return RenderedMessage(text=_fallback_text(handoff), blocks=_to_dicts(blocks))


def outcome_text(handoff: Handoff) -> str:
    """One mrkdwn paragraph: what was decided, by whom, when, and with what."""
    decision = handoff.resume_data
    icon = _OUTCOME_ICONS.get(handoff.status, "")
    if decision is None:
        return f"{icon} {handoff.status.value.capitalize()}"
    who = "expiry" if decision.decided_by == "system" else _mention(decision.decided_by)
    when = _slack_date(handoff.decided_at) if handoff.decided_at else ""
    verb = {
        Status.APPROVED: "Approved",
        Status.REJECTED: "Rejected",
        Status.ANSWERED: "Resolved"
        if handoff.request_type is RequestType.ESCALATION
        else "Answered",
        Status.EXPIRED: "Expired",
        Status.CANCELLED: "Cancelled",
    }[handoff.status]
    if handoff.status is Status.EXPIRED:
        lines = [f"{icon} *Expired* {when} with no decision; the agent was told it expired."]
    else:
        lines = [f"{icon} *{verb}* by {who} {when}".rstrip()]
    if decision.comment:
        lines.append(f"*Reason:* {_agent_text(decision.comment, 800)[0]}")
    if decision.answer:
        lines.append(f"*Answer:* {_agent_text(decision.answer, 1200)[0]}")
    if decision.edited_args is not None:
        edited = _agent_text(_compact_json(decision.edited_args), 800)[0]
        lines.append(f"*With edited arguments:* `{edited}`")
    if decision.corrected_draft is not None:
        lines.append(
            f"*Corrected draft:*\n{_agent_text(decision.corrected_draft, 1200, quote=True)[0]}"
        )
    return _clip("\n".join(lines), SECTION_TEXT_LIMIT)


def render_moved(handoff: Handoff, *, channel: str) -> RenderedMessage:
    """What an old message shows once its handoff was reassigned elsewhere."""
    text = f":arrow_right: This request moved to <#{channel}>; decide it there."
    blocks: list[Block] = [
        HeaderBlock(text=_clip(_title(handoff), 150)),
        SectionBlock(text=MarkdownTextObject(text=text)),
        ContextBlock(elements=[MarkdownTextObject(text=_details_line(handoff, None))]),
    ]
    return RenderedMessage(
        text=_agent_text(_title(handoff) + " [moved]", 300)[0], blocks=_to_dicts(blocks)
    )


def render_duplicate(handoff: Handoff, *, link: str | None) -> RenderedMessage:
    """What an extra copy of a handoff's message shows (two tries at posting it both
    landed): no buttons, and a pointer to the message that is kept."""
    where = f"<{link}|this message>" if link else "the other message for it in this channel"
    text = f":link: Duplicate post of this request; decide it in {where}."
    blocks: list[Block] = [
        HeaderBlock(text=_clip(_title(handoff), 150)),
        ContextBlock(elements=[MarkdownTextObject(text=text)]),
    ]
    return RenderedMessage(
        text=_agent_text(_title(handoff) + " [duplicate]", 300)[0], blocks=_to_dicts(blocks)
    )


def reminder_text(handoff: Handoff, *, now: datetime | None = None) -> str:
    """The thread reply that reminds reviewers of a pending handoff."""
    who = " ".join(_reviewer_mention(r) for r in handoff.reviewers[:20]) or "Reviewers"
    waiting = _ago(handoff.created_at, now).removesuffix(" ago")
    return f":bell: {who}: this request has been waiting for {waiting}. Please decide it."


def escalation_note(handoff: Handoff) -> str:
    """The note on the copy posted to the escalation channel."""
    return ":rotating_light: Escalated here: nobody decided this request in time."


def thread_record_text(handoff: Handoff) -> str:
    """The short record posted in the message's thread after a decision."""
    return outcome_text(handoff)


def already_decided_text(handoff: Handoff, *, now: datetime | None = None) -> str:
    """What a late or losing reviewer is told, e.g. "Already approved by @alice 2 minutes ago"."""
    decision = handoff.resume_data
    if decision is None or handoff.decided_at is None:
        return f"This request is already {handoff.status.value}."
    ago = _ago(handoff.decided_at, now)
    if handoff.status is Status.EXPIRED:
        return f"This request expired {ago}; nothing was changed."
    return f"Already {handoff.status.value} by {_mention(decision.decided_by)} {ago}."


def render_reject_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal asking for an optional reason before rejecting."""
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(text=f"Reject *{_agent_text(_title(handoff), 200)[0]}*?")
        ),
        InputBlock(
            block_id=REASON_BLOCK,
            label="Reason (shared with the agent)",
            optional=True,
            element=PlainTextInputElement(
                action_id=VALUE, multiline=True, max_length=INPUT_MAX_LENGTH
            ),
        ),
    ]
    return _modal(REJECT_MODAL, handoff, "Reject request", "Reject", blocks)


def render_edit_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal with one prefilled input per argument of the proposed action."""
    action = handoff.payload.action  # type: ignore[union-attr]
    properties = (action.args_schema or {}).get("properties", {})
    required = set((action.args_schema or {}).get("required", []))
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(
                text=f"Edit the arguments of `{_agent_text(action.name, 200)[0]}`, then approve."
            )
        ),
    ]
    for name, value in list(action.args.items())[: MODAL_BLOCK_LIMIT - 2]:
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > INPUT_MAX_LENGTH:
            blocks.append(
                SectionBlock(
                    text=MarkdownTextObject(
                        text=f"*{_agent_text(name, 200)[0]}* is too long to edit here "
                        "and is kept as sent."
                    )
                )
            )
            continue
        hint = _type_hint(properties.get(name, {}), value)
        blocks.append(
            InputBlock(
                block_id=arg_block_id(name),
                label=_clip(name, 2000),
                hint=hint,
                optional=name not in required,
                element=PlainTextInputElement(
                    action_id=VALUE,
                    initial_value=shown or None,
                    multiline=len(shown) > 80,
                    max_length=INPUT_MAX_LENGTH,
                ),
            )
        )
    return _modal(EDIT_MODAL, handoff, "Edit arguments", "Approve edited", blocks)


def render_answer_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal to answer a question: pick a suggested choice or type an answer."""
    payload = handoff.payload
    question = getattr(payload, "question", "")
    choices = getattr(payload, "choices", None) or []
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=_agent_text(question, _MAIN_TEXT_SHOWN)[0])),
    ]
    if choices:
        options = [
            Option(text=_clip(choice, 75), value=str(index))
            for index, choice in enumerate(choices[:100])
        ]
        blocks.append(
            InputBlock(
                block_id=CHOICE_BLOCK,
                label="Pick an answer",
                optional=True,
                element=StaticSelectElement(action_id=VALUE, options=options),
            )
        )
    blocks.append(
        InputBlock(
            block_id=ANSWER_BLOCK,
            label="Or type your answer" if choices else "Your answer",
            optional=bool(choices),
            element=PlainTextInputElement(
                action_id=VALUE, multiline=True, max_length=INPUT_MAX_LENGTH
            ),
        )
    )
    return _modal(ANSWER_MODAL, handoff, "Answer question", "Send answer", blocks)


def render_correction_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal with the draft prefilled (in parts of 3000 characters when longer)."""
    draft = getattr(handoff.payload, "draft", "")
    instructions = getattr(handoff.payload, "instructions", None)
    blocks: list[Block] = []
    if instructions:
        shown = _agent_text(instructions, 2800)[0]
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Instructions*\n{shown}")))
    parts = split_text(draft, INPUT_MAX_LENGTH) or [""]
    for index, part in enumerate(parts[: MODAL_BLOCK_LIMIT - 2]):
        label = "Draft" if len(parts) == 1 else f"Draft, part {index + 1} of {len(parts)}"
        blocks.append(
            InputBlock(
                block_id=f"{DRAFT_BLOCK_PREFIX}{index}",
                label=label,
                optional=len(parts) > 1,
                element=PlainTextInputElement(
                    action_id=VALUE,
                    initial_value=part or None,
                    multiline=True,
                    max_length=INPUT_MAX_LENGTH,
                ),
            )
        )
    return _modal(CORRECT_MODAL, handoff, "Edit & send", "Send", blocks)


def render_resolve_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal for the claimer of an escalation to write how it was resolved."""
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(
                text=_agent_text(getattr(handoff.payload, "summary", ""), 2800)[0]
            )
        ),
        InputBlock(
            block_id=RESOLUTION_BLOCK,
            label="Resolution notes (sent to the agent)",
            element=PlainTextInputElement(
                action_id=VALUE, multiline=True, max_length=INPUT_MAX_LENGTH
            ),
        ),
    ]
    return _modal(RESOLVE_MODAL, handoff, "Resolve escalation", "Resolve", blocks)


def render_full_content_modal(handoff: Handoff) -> dict[str, Any]:
    """Everything the agent sent, in full (within modal limits), for the "View full" button."""
    sections: list[tuple[str, str]] = []
    if handoff.context:
        sections.append(("Why", handoff.context))
    for title, text in _full_parts(handoff):
        sections.append((title, text))
    blocks: list[Block] = []
    budget = MODAL_TEXT_BUDGET
    for title, text in sections:
        if len(blocks) >= MODAL_BLOCK_LIMIT - 2 or budget <= 0:
            break
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*{title}*")))
        for chunk in split_text(text, _FULL_CHUNK):
            if len(blocks) >= MODAL_BLOCK_LIMIT - 1 or budget <= 0:
                break
            blocks.append(SectionBlock(text=PlainTextObject(text=chunk, emoji=False)))
            # The 250 kB limit applies to the view's JSON, where escapes take more room.
            budget -= len(json.dumps(chunk))
    if len(blocks) >= MODAL_BLOCK_LIMIT - 1 or budget <= 0:
        blocks = blocks[: MODAL_BLOCK_LIMIT - 1]
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=f"Shortened to fit Slack. Full record: `handoff show {handoff.id}`"
                    )
                ]
            )
        )
    view = View(
        type="modal",
        callback_id=FULL_CONTENT_MODAL,
        title=_clip(f"Full {handoff.request_type.value}", 24),
        close="Close",
        blocks=blocks,
        private_metadata=json.dumps({"handoff_id": handoff.id}),
    )
    return view.to_dict()


def arg_block_id(name: str) -> str:
    """Block id of an argument's input (names can be long; block ids are limited to 255)."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"{ARG_BLOCK_PREFIX}{digest}"


def split_text(text: str, size: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``size`` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def handoff_id_from_view(view: dict[str, Any]) -> str | None:
    """The handoff id a modal was opened for (kept in ``private_metadata``)."""
    try:
        return str(json.loads(view.get("private_metadata") or "{}")["handoff_id"])
    except (ValueError, KeyError, TypeError):
        return None


def channel_from_view(view: dict[str, Any]) -> str | None:
    """The channel a modal was opened from (kept in ``private_metadata``), if known."""
    try:
        channel = json.loads(view.get("private_metadata") or "{}").get("channel")
    except (ValueError, AttributeError):
        return None
    return str(channel) if channel else None


# -- message parts -----------------------------------------------------------------------


def _title(handoff: Handoff) -> str:
    payload = handoff.payload
    agent = f" from {handoff.agent_name}" if handoff.agent_name else ""
    if payload.kind == "approval":
        return f"Approval needed{agent}: {payload.action.name}"
    if payload.kind == "question":
        return f"Question{agent}"
    if payload.kind == "correction":
        return f"Correction requested{agent}"
    return f"Escalation{agent}"


def _fallback_text(handoff: Handoff) -> str:
    state = "" if handoff.is_pending else f" [{handoff.status.value}]"
    return _agent_text(_title(handoff) + state, 300)[0]


def _body_blocks(handoff: Handoff) -> tuple[list[Block], bool]:
    payload = handoff.payload
    if payload.kind == "approval":
        return _approval_body(handoff)
    if payload.kind == "question":
        text, cut = _agent_text(payload.question, _MAIN_TEXT_SHOWN)
        blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=f"*Question*\n{text}"))]
        if payload.choices:
            shown_choices = [_agent_text(c, 150) for c in payload.choices[:10]]
            cut |= len(payload.choices) > 10 or any(c_cut for _, c_cut in shown_choices)
            listed = "\n".join(f"• {text}" for text, _ in shown_choices)
            more = f"\n…and {len(payload.choices) - 10} more" if len(payload.choices) > 10 else ""
            blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Choices*\n{listed}{more}")))
        return blocks, cut
    if payload.kind == "correction":
        blocks = []
        cut = False
        if payload.instructions:
            text, cut = _agent_text(payload.instructions, 1000)
            blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Instructions*\n{text}")))
        draft, draft_cut = _agent_text(payload.draft, _MAIN_TEXT_SHOWN, quote=True)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Draft*\n{draft}")))
        return blocks, cut or draft_cut
    text, cut = _agent_text(payload.summary, _MAIN_TEXT_SHOWN)
    blocks = [SectionBlock(text=MarkdownTextObject(text=f"*Summary*\n{text}"))]
    if handoff.claimed_by and handoff.is_pending:
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(
                    text=f":raising_hand: Claimed by {_mention(handoff.claimed_by)}"
                )
            )
        )
    return blocks, cut


def _approval_body(handoff: Handoff) -> tuple[list[Block], bool]:
    action = handoff.payload.action  # type: ignore[union-attr]
    blocks: list[Block] = []
    cut = False
    if action.description:
        text, cut = _agent_text(action.description, 500)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=text)))
    items = list(action.args.items())
    if not items:
        name = _agent_text(action.name, 200)[0]
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"`{name}` with no arguments")))
        return blocks, cut
    shown = items[:_FIELDS_SHOWN] if len(items) <= _FIELDS_SHOWN else items[: _FIELDS_SHOWN - 1]
    fields = []
    for name, value in shown:
        rendered = value if isinstance(value, str) else _compact_json(value)
        text, field_cut = _agent_text(rendered, _FIELD_SHOWN)
        cut |= field_cut
        fields.append(MarkdownTextObject(text=f"*{_agent_text(name, 100)[0]}*\n{text}"))
    if len(items) > len(shown):
        cut = True
        fields.append(
            MarkdownTextObject(text=f"*…and {len(items) - len(shown)} more*\nuse View full")
        )
    heading = f"*Arguments of* `{_agent_text(action.name, 200)[0]}`"
    blocks.append(SectionBlock(text=MarkdownTextObject(text=heading), fields=fields))
    return blocks, cut


def _details_line(handoff: Handoff, now: datetime | None) -> str:
    parts = [
        f"Run `{_agent_text(handoff.run_id, 80)[0]}`",
        f"thread `{_agent_text(handoff.thread_id, 80)[0]}`",
    ]
    if handoff.requester:
        parts.append(f"requested by {_mention(handoff.requester)}")
    if handoff.expires_at and handoff.is_pending:
        parts.append(f"expires {_slack_date(handoff.expires_at)}")
    parts.append(f"id `{handoff.id}`")
    return " · ".join(parts)


def _actions(handoff: Handoff, *, truncated: bool) -> ActionsBlock:
    value = handoff.id
    payload = handoff.payload
    buttons: list[ButtonElement] = []
    if payload.kind == "approval":
        buttons = [
            ButtonElement(
                text="Approve",
                action_id=APPROVE,
                value=value,
                style="primary",
                confirm=ConfirmObject(
                    title="Approve this action?",
                    text=_agent_text(
                        f"The agent will run {payload.action.name} with the arguments shown.", 300
                    )[0],
                    confirm="Approve",
                    deny="Cancel",
                ),
            ),
            ButtonElement(text="Reject", action_id=REJECT, value=value, style="danger"),
            ButtonElement(text="Edit", action_id=EDIT, value=value),
        ]
    elif payload.kind == "question":
        buttons = [ButtonElement(text="Answer", action_id=ANSWER, value=value, style="primary")]
    elif payload.kind == "correction":
        buttons = [
            ButtonElement(text="Edit & send", action_id=CORRECT, value=value, style="primary"),
            ButtonElement(text="Reject", action_id=REJECT, value=value, style="danger"),
        ]
    elif handoff.claimed_by:
        buttons = [
            ButtonElement(text="Resolve", action_id=RESOLVE, value=value, style="primary"),
            ButtonElement(text="Send back", action_id=REJECT, value=value),
        ]
    else:
        buttons = [ButtonElement(text="Claim", action_id=CLAIM, value=value, style="primary")]
    if truncated:
        buttons.append(_view_full_button(handoff))
    return ActionsBlock(block_id="handoff_actions", elements=buttons)


def _view_full_button(handoff: Handoff) -> ButtonElement:
    return ButtonElement(text="View full", action_id=VIEW_FULL, value=handoff.id)


def _full_parts(handoff: Handoff) -> list[tuple[str, str]]:
    payload = handoff.payload
    if payload.kind == "approval":
        parts = [("Action", payload.action.name)]
        if payload.action.description:
            parts.append(("Description", payload.action.description))
        parts.append(("Arguments", json.dumps(payload.action.args, indent=2, ensure_ascii=False)))
        return parts
    if payload.kind == "question":
        parts = [("Question", payload.question)]
        if payload.choices:
            parts.append(("Choices", "\n".join(f"- {c}" for c in payload.choices)))
        return parts
    if payload.kind == "correction":
        parts = [("Instructions", payload.instructions)] if payload.instructions else []
        return [*parts, ("Draft", payload.draft)]
    return [("Summary", payload.summary)]


def _modal(
    callback_id: str, handoff: Handoff, title: str, submit: str, blocks: list[Block]
) -> dict[str, Any]:
    view = View(
        type="modal",
        callback_id=callback_id,
        title=_clip(title, 24),
        submit=_clip(submit, 24),
        close="Cancel",
        blocks=blocks,
        private_metadata=json.dumps({"handoff_id": handoff.id}),
    )
    return view.to_dict()


def _type_hint(schema: dict[str, Any], value: Any) -> str:
    expected = schema.get("type")
    if isinstance(expected, list):
        expected = "/".join(str(t) for t in expected)
    if not expected:
        expected = json_type(value)
    description = schema.get("description")
    hint = f"{expected}" + (f": {description}" if description else "")
    if expected in ("object", "array", "null"):
        hint += " (as JSON)"
    return _clip(hint, 2000)


def json_type(value: Any) -> str:
    """The JSON schema type name of a Python value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def _to_dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    rendered = [block.to_dict() for block in blocks]
    if len(rendered) > MESSAGE_BLOCK_LIMIT:
        raise ValueError(f"message has {len(rendered)} blocks, over Slack's {MESSAGE_BLOCK_LIMIT}")
    return rendered


def _agent_text(text: str, limit: int, *, quote: bool = False) -> tuple[str, bool]:
    """Escape text from an agent or a person for mrkdwn (optionally as a quote), then
    shorten it to ``limit`` characters."""
    escaped = _escape(text)
    return _shorten(_quote(escaped) if quote else escaped, limit)


def _shorten(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: limit - 1] + "…", True


def _clip(text: str, limit: int) -> str:
    return _shorten(text, limit)[0]


def _quote(text: str) -> str:
    return "\n".join(f">{line}" for line in text.splitlines() or [""])


def _escape(text: str) -> str:
    # Agent text must not ping channels or users, or inject links.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _reviewer_mention(reviewer: str) -> str:
    if reviewer.startswith("S") and reviewer.isalnum():
        return f"<!subteam^{reviewer}>"
    return _mention(reviewer)


def _mention(user_id: str) -> str:
    if user_id.startswith(("U", "W")) and user_id.isalnum():
        return f"<@{user_id}>"
    return _escape(user_id)


def _slack_date(moment: datetime) -> str:
    epoch = int(moment.timestamp())
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{epoch}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _ago(moment: datetime, now: datetime | None) -> str:
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 60:
        return "just now" if seconds < 5 else f"{seconds} seconds ago"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"
