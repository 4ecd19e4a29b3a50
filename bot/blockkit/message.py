"""A handoff's channel message, and the texts posted about it (reminders, thread records,
"already decided" answers).

Built with ``slack_sdk.models`` so that Slack's limits are checked by ``to_dict()`` in our
tests rather than by Slack in production. The App Home and ``/handoff show`` reuse the
message's decision buttons (``decision_buttons``), so every surface offers the same actions
with the same ids and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.blockkit.ids import (
    ACTIONS_BLOCK,
    ANSWER,
    APPROVE,
    CLAIM,
    CORRECT,
    EDIT,
    MORE_BLOCK,
    REJECT,
    RESOLVE,
    VIEW_FULL,
)
from bot.blockkit.limits import (
    FIELDS_LIMIT,
    HEADER_TEXT_LIMIT,
    MESSAGE_BLOCK_LIMIT,
    SECTION_TEXT_LIMIT,
)
from bot.mrkdwn import (
    agent_text,
    ago,
    channel_mention,
    clip,
    compact_json,
    mention,
    reviewer_mention,
    slack_date,
)
from store.models import Handoff, RequestType, Status

_CONTEXT_SHOWN = 1500
_MAIN_TEXT_SHOWN = 2500
_FIELD_SHOWN = 300

_OUTCOME_ICONS = {
    Status.APPROVED: ":white_check_mark:",
    Status.REJECTED: ":no_entry_sign:",
    Status.ANSWERED: ":speech_balloon:",
    Status.EXPIRED: ":hourglass:",
    Status.CANCELLED: ":wastebasket:",
    Status.UNDELIVERABLE: ":warning:",
}


@dataclass(frozen=True)
class RenderedMessage:
    """A message ready for ``chat.postMessage`` / ``chat.update``."""

    text: str
    blocks: list[dict[str, Any]]


def render_message(
    handoff: Handoff, *, now: datetime | None = None, note: str | None = None
) -> RenderedMessage:
    """The channel message of a handoff in its current state.

    A pending handoff shows its buttons; a decided one shows who decided what, instead.
    Long agent text is shortened with a **View full** button. ``note`` (mrkdwn written by
    the bot, e.g. "Escalated here") is shown under the header.
    """
    blocks: list[Block] = [HeaderBlock(text=clip(handoff_title(handoff), HEADER_TEXT_LIMIT))]
    if note:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=clip(note, 500))]))
    truncated = False
    if handoff.context:
        text, cut = agent_text(handoff.context, _CONTEXT_SHOWN, quoted=True)
        truncated |= cut
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Why*\n{text}")))
    body, cut = _body_blocks(handoff)
    truncated |= cut
    blocks.extend(body)
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_details_line(handoff, now))]))
    if handoff.is_pending:
        blocks.append(decision_buttons(handoff, truncated=truncated))
    else:
        blocks.append(DividerBlock())
        blocks.append(SectionBlock(text=MarkdownTextObject(text=outcome_text(handoff))))
        if truncated:
            blocks.append(ActionsBlock(block_id=MORE_BLOCK, elements=[view_full_button(handoff)]))
    return RenderedMessage(text=_fallback_text(handoff), blocks=_to_dicts(blocks))


def outcome_text(handoff: Handoff) -> str:
    """One mrkdwn paragraph: what was decided, by whom, when, and with what."""
    decision = handoff.resume_data
    icon = _OUTCOME_ICONS.get(handoff.status, "")
    if decision is None:
        return f"{icon} {handoff.status.value.capitalize()}"
    who = "expiry" if decision.decided_by == "system" else mention(decision.decided_by)
    when = slack_date(handoff.decided_at) if handoff.decided_at else ""
    verb = {
        Status.APPROVED: "Approved",
        Status.REJECTED: "Rejected",
        Status.ANSWERED: "Resolved"
        if handoff.request_type is RequestType.ESCALATION
        else "Answered",
        Status.EXPIRED: "Expired",
        Status.CANCELLED: "Cancelled",
        Status.UNDELIVERABLE: "Undeliverable",
    }[handoff.status]
    if handoff.status is Status.EXPIRED:
        lines = [f"{icon} *Expired* {when} with no decision; the agent was told it expired."]
    elif handoff.status is Status.UNDELIVERABLE:
        lines = [
            f"{icon} *Undeliverable* {when}: Slack refused its message, so nobody could "
            "decide it; the agent was told it was undeliverable."
        ]
    else:
        lines = [f"{icon} *{verb}* by {who} {when}".rstrip()]
    if decision.comment:
        lines.append(f"*Reason:* {agent_text(decision.comment, 800)[0]}")
    if decision.answer:
        lines.append(f"*Answer:* {agent_text(decision.answer, 1200)[0]}")
    if decision.edited_args is not None:
        edited = agent_text(compact_json(decision.edited_args), 800)[0]
        lines.append(f"*With edited arguments:* `{edited}`")
    if decision.corrected_draft is not None:
        lines.append(
            f"*Corrected draft:*\n{agent_text(decision.corrected_draft, 1200, quoted=True)[0]}"
        )
    return clip("\n".join(lines), SECTION_TEXT_LIMIT)


def render_moved(handoff: Handoff, *, channel: str) -> RenderedMessage:
    """What an old message shows once its handoff was reassigned elsewhere."""
    text = f":arrow_right: This request moved to {channel_mention(channel)}; decide it there."
    blocks: list[Block] = [
        HeaderBlock(text=clip(handoff_title(handoff), HEADER_TEXT_LIMIT)),
        SectionBlock(text=MarkdownTextObject(text=text)),
        ContextBlock(elements=[MarkdownTextObject(text=_details_line(handoff, None))]),
    ]
    return RenderedMessage(
        text=agent_text(handoff_title(handoff) + " [moved]", 300)[0], blocks=_to_dicts(blocks)
    )


def render_duplicate(handoff: Handoff, *, link: str | None) -> RenderedMessage:
    """What an extra copy of a handoff's message shows (two tries at posting it both
    landed): no buttons, and a pointer to the message that is kept."""
    where = f"<{link}|this message>" if link else "the other message for it in this channel"
    text = f":link: Duplicate post of this request; decide it in {where}."
    blocks: list[Block] = [
        HeaderBlock(text=clip(handoff_title(handoff), HEADER_TEXT_LIMIT)),
        ContextBlock(elements=[MarkdownTextObject(text=text)]),
    ]
    return RenderedMessage(
        text=agent_text(handoff_title(handoff) + " [duplicate]", 300)[0], blocks=_to_dicts(blocks)
    )


def reminder_text(handoff: Handoff, *, now: datetime | None = None) -> str:
    """The thread reply that reminds reviewers of a pending handoff."""
    who = " ".join(reviewer_mention(r) for r in handoff.reviewers[:20]) or "Reviewers"
    waiting = ago(handoff.created_at, now).removesuffix(" ago")
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
    when = ago(handoff.decided_at, now)
    if handoff.status is Status.EXPIRED:
        return f"This request expired {when}; nothing was changed."
    if handoff.status is Status.UNDELIVERABLE:
        return (
            f"This request could not be delivered and was closed {when}; nothing was changed. "
            "Its agent was told it was undeliverable, and must ask again."
        )
    return f"Already {handoff.status.value} by {mention(decision.decided_by)} {when}."


def handoff_title(handoff: Handoff) -> str:
    """The message's header: what kind of request, from which agent."""
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
    return agent_text(handoff_title(handoff) + state, 300)[0]


def _body_blocks(handoff: Handoff) -> tuple[list[Block], bool]:
    payload = handoff.payload
    if payload.kind == "approval":
        return _approval_body(handoff)
    if payload.kind == "question":
        text, cut = agent_text(payload.question, _MAIN_TEXT_SHOWN)
        blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=f"*Question*\n{text}"))]
        if payload.choices:
            shown_choices = [agent_text(c, 150) for c in payload.choices[:10]]
            cut |= len(payload.choices) > 10 or any(c_cut for _, c_cut in shown_choices)
            listed = "\n".join(f"• {text}" for text, _ in shown_choices)
            more = f"\n…and {len(payload.choices) - 10} more" if len(payload.choices) > 10 else ""
            blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Choices*\n{listed}{more}")))
        return blocks, cut
    if payload.kind == "correction":
        blocks = []
        cut = False
        if payload.instructions:
            text, cut = agent_text(payload.instructions, 1000)
            blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Instructions*\n{text}")))
        draft, draft_cut = agent_text(payload.draft, _MAIN_TEXT_SHOWN, quoted=True)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Draft*\n{draft}")))
        return blocks, cut or draft_cut
    text, cut = agent_text(payload.summary, _MAIN_TEXT_SHOWN)
    blocks = [SectionBlock(text=MarkdownTextObject(text=f"*Summary*\n{text}"))]
    if handoff.claimed_by and handoff.is_pending:
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(
                    text=f":raising_hand: Claimed by {mention(handoff.claimed_by)}"
                )
            )
        )
    return blocks, cut


def _approval_body(handoff: Handoff) -> tuple[list[Block], bool]:
    action = handoff.payload.action  # type: ignore[union-attr]
    blocks: list[Block] = []
    cut = False
    if action.description:
        text, cut = agent_text(action.description, 500)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=text)))
    items = list(action.args.items())
    if not items:
        name = agent_text(action.name, 200)[0]
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"`{name}` with no arguments")))
        return blocks, cut
    shown = items[:FIELDS_LIMIT] if len(items) <= FIELDS_LIMIT else items[: FIELDS_LIMIT - 1]
    fields = []
    for name, value in shown:
        rendered = value if isinstance(value, str) else compact_json(value)
        text, field_cut = agent_text(rendered, _FIELD_SHOWN)
        cut |= field_cut
        fields.append(MarkdownTextObject(text=f"*{agent_text(name, 100)[0]}*\n{text}"))
    if len(items) > len(shown):
        cut = True
        fields.append(
            MarkdownTextObject(text=f"*…and {len(items) - len(shown)} more*\nuse View full")
        )
    heading = f"*Arguments of* `{agent_text(action.name, 200)[0]}`"
    blocks.append(SectionBlock(text=MarkdownTextObject(text=heading), fields=fields))
    return blocks, cut


def _details_line(handoff: Handoff, now: datetime | None) -> str:
    parts = [
        f"Run `{agent_text(handoff.run_id, 80)[0]}`",
        f"thread `{agent_text(handoff.thread_id, 80)[0]}`",
    ]
    if handoff.requester:
        parts.append(f"requested by {mention(handoff.requester)}")
    if handoff.expires_at and handoff.is_pending:
        parts.append(f"expires {slack_date(handoff.expires_at)}")
    parts.append(f"id `{handoff.id}`")
    return " · ".join(parts)


def decision_buttons(handoff: Handoff, *, truncated: bool) -> ActionsBlock:
    """The buttons a pending handoff offers (the message's, the Home's and ``show``'s), with
    **View full** when something was shortened."""
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
                confirm=confirm_dialog(
                    title="Approve this action?",
                    text=f"The agent will run {payload.action.name} with the arguments shown.",
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
        buttons.append(view_full_button(handoff))
    return ActionsBlock(block_id=ACTIONS_BLOCK, elements=buttons)


def confirm_dialog(*, title: str, text: str, confirm: str, deny: str) -> ConfirmObject:
    """A confirmation dialog with every text ``plain_text``, cut to Slack's limits.

    The Block Kit reference takes only ``plain_text`` for the dialog's ``text``, while
    slack_sdk's ``ConfirmObject`` renders a plain string as ``mrkdwn``; and plain text shows
    ``&`` and ``<`` as they are, so agent text is cut here, not mrkdwn-escaped.
    """
    return ConfirmObject(
        title=PlainTextObject(text=clip(title, ConfirmObject.title_max_length)),
        text=PlainTextObject(text=clip(text, ConfirmObject.text_max_length)),
        confirm=PlainTextObject(text=clip(confirm, ConfirmObject.confirm_max_length)),
        deny=PlainTextObject(text=clip(deny, ConfirmObject.deny_max_length)),
    )


def view_full_button(handoff: Handoff) -> ButtonElement:
    """The button that opens everything the agent sent."""
    return ButtonElement(text="View full", action_id=VIEW_FULL, value=handoff.id)


def _to_dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    rendered = [block.to_dict() for block in blocks]
    if len(rendered) > MESSAGE_BLOCK_LIMIT:
        raise ValueError(f"message has {len(rendered)} blocks, over Slack's {MESSAGE_BLOCK_LIMIT}")
    return rendered
