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
from store.answer_schemas import AnswerField, answer_fields, decimal_text, single_text_field
from store.ids import decision_value
from store.models import Handoff, RequestType, Status, Vote

_CONTEXT_SHOWN = 1500
_MAIN_TEXT_SHOWN = 2500
_FIELD_SHOWN = 300
_ANSWER_FIELDS_SHOWN = 1500
"""Characters the list of a typed answer's fields takes in a message; the rest is in
View full (and in the form)."""

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
    if handoff.is_pending and handoff.quorum is not None:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=votes_progress_text(handoff))))
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
        if decision.approvers and len(decision.approvers) > 1:
            who = ", ".join(mention(approver) for approver in decision.approvers)
        lines = [f"{icon} *{verb}* by {who} {when}".rstrip()]
    if decision.votes:
        lines.append(f"*Votes:* {_votes_list(decision.votes)}")
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


def votes_progress_text(handoff: Handoff) -> str:
    """Where the votes of an approval that needs several people stand, e.g. "Approvals 1 of
    2 · @alice ✓ · waiting for 1 more from @finance"."""
    approvals, rejections = handoff.quorum or (1, 1)
    approved = handoff.live_votes("approved")
    rejected = handoff.live_votes("rejected")
    parts = [f":ballot_box_with_ballot: *Approvals {len(approved)} of {approvals}*"]
    parts.extend(f"{mention(v.by)} :white_check_mark:" for v in approved)
    if rejections > 1:
        parts.append(f"*Rejections {len(rejected)} of {rejections}*")
        parts.extend(f"{mention(v.by)} :no_entry_sign:" for v in rejected)
    missing = approvals - len(approved)
    if missing > 0:
        source = ", ".join(reviewer_mention(r) for r in handoff.reviewers[:5])
        parts.append(f"waiting for {missing} more" + (f" from {source}" if source else ""))
    text = " · ".join(parts)
    if handoff.proposed_args is not None:
        text += (
            "\n:pencil2: The arguments were edited: approvals given before the edit were "
            "cleared, and the count started again."
        )
    return clip(text, SECTION_TEXT_LIMIT)


def votes_count_text(handoff: Handoff) -> str:
    """The count of a pending quorum in a few words, e.g. "approvals 1 of 2", for listings
    ('' for a handoff one decision decides)."""
    if handoff.quorum is None or not handoff.is_pending:
        return ""
    approvals, rejections = handoff.quorum
    text = f"approvals {len(handoff.live_votes('approved'))} of {approvals}"
    if rejections > 1:
        text += f", rejections {len(handoff.live_votes('rejected'))} of {rejections}"
    return text


def voted_text(handoff: Handoff, viewer: str) -> str:
    """What ``viewer``, who voted on a pending quorum, is shown of it ('' if they have not)."""
    vote = handoff.vote_of(viewer)
    if vote is None:
        return ""
    mark = ":white_check_mark:" if vote.outcome == "approved" else ":no_entry_sign:"
    return f"{mark} You voted _{vote.outcome}_ {slack_date(vote.at)}; waiting for others."


def vote_recorded_text(handoff: Handoff) -> str:
    """What a voter is told when their vote counted but did not decide the handoff yet."""
    approvals, _ = handoff.quorum or (1, 1)
    got = len(handoff.live_votes("approved"))
    return (
        f":ballot_box_with_ballot: Your vote on *{agent_text(handoff_title(handoff), 150)[0]}* "
        f"is recorded: {got} of {approvals} approvals so far. The request is decided once "
        f"{approvals} people approve it."
    )


def _votes_list(votes: list[Vote]) -> str:
    marks = {"approved": ":white_check_mark:", "rejected": ":no_entry_sign:"}
    shown = [
        f"{mention(v.by)} {marks[v.outcome]}" + (" (cleared by an edit)" if v.cleared else "")
        for v in votes[:20]
    ]
    more = f" and {len(votes) - 20} more" if len(votes) > 20 else ""
    return " · ".join(shown) + more


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


def render_form_needed(handoff: Handoff) -> RenderedMessage:
    """What a reviewer who replied in the thread of a question with a typed answer (one the
    thread cannot fill in) is told, privately: nothing was recorded, and a button that opens
    the Answer form (the message's own button: same action id and value)."""
    fields = answer_fields_of(handoff) or []
    names = ", ".join(agent_text(f.label, 60)[0] for f in fields[:5])
    more = f" and {len(fields) - 5} more" if len(fields) > 5 else ""
    count = "a field" if len(fields) == 1 else f"{len(fields)} fields"
    text = (
        f"This question asks for {count} ({names}{more}), which a reply in the thread cannot "
        "fill in, so nothing was recorded. Answer it with the form."
    )
    button = ButtonElement(text="Answer", action_id=ANSWER, value=handoff.id, style="primary")
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=clip(text, SECTION_TEXT_LIMIT))),
        ActionsBlock(block_id=ACTIONS_BLOCK, elements=[button]),
    ]
    return RenderedMessage(text=clip(text, SECTION_TEXT_LIMIT), blocks=_to_dicts(blocks))


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
            "Its agent was told it was undeliverable; an admin may redeliver it as a new "
            "handoff, or the agent asks again."
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
        if payload.answer_schema is not None:
            text, fields_cut = _answer_fields_text(payload.answer_schema)
            cut |= fields_cut
            blocks.append(SectionBlock(text=MarkdownTextObject(text=text)))
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


def answer_fields_of(handoff: Handoff) -> list[AnswerField] | None:
    """The fields of a question's typed answer (``answer_schema``), or None when it takes
    free text."""
    schema = getattr(handoff.payload, "answer_schema", None)
    return None if schema is None else answer_fields(schema)


def field_terms(field: AnswerField) -> str:
    """What a typed answer's field takes, in a few words: "a number from 0 to 500", "text of
    up to 20 characters", "one of 3 choices", "a date", "yes or no"."""
    if field.kind == "string":
        shortest, longest = field.min_length or None, field.max_length
        if shortest and longest is not None:
            return f"text of {shortest} to {longest} characters"
        if shortest:
            return f"text of at least {shortest} characters"
        return "text" if longest is None else f"text of up to {longest} characters"
    if field.kind == "date":
        return "a date"
    if field.kind == "enum":
        count = len(field.options)
        return "the one choice" if count == 1 else f"one of {count} choices"
    if field.kind == "boolean":
        return "yes or no"
    what = "a number" if field.kind == "number" else "a whole number"
    low = None if field.minimum is None else decimal_text(field.minimum)
    high = None if field.maximum is None else decimal_text(field.maximum)
    if low is not None and high is not None:
        return f"{what} from {low} to {high}"
    if low is not None:
        return f"{what} of at least {low}"
    return what if high is None else f"{what} of at most {high}"


def fields_listing(fields: list[AnswerField]) -> str:
    """A typed answer's fields as plain text, one line each (for View full)."""
    return "\n".join(
        f"{field.label}: {field_terms(field)}"
        + (", required" if field.required and field.kind != "boolean" else "")
        for field in fields
    )


def _answer_fields_text(schema: dict[str, Any]) -> tuple[str, bool]:
    """The message's note of a typed answer: which fields the form asks for, and whether a
    reply in the thread answers too (only for a single text field)."""
    fields = answer_fields(schema)
    if single_text_field(schema) is not None:
        heading = "*Answer with the form or a reply in this thread*"
    else:
        count = "one field" if len(fields) == 1 else f"{len(fields)} fields"
        heading = f"*Answer with the form: {count}* (a reply in the thread cannot fill them in)"
    lines: list[str] = []
    budget = _ANSWER_FIELDS_SHOWN
    cut = False
    for field in fields:
        label, label_cut = agent_text(field.label, 100)
        required = " · required" if field.required and field.kind != "boolean" else ""
        line = f"• *{label}*: {field_terms(field)}{required}"
        if len(line) > budget:
            lines.append(f"…and {len(fields) - len(lines)} more")
            return "\n".join([heading, *lines]), True
        budget -= len(line)
        lines.append(line)
        cut |= label_cut
    return "\n".join([heading, *lines]), cut


def _approval_body(handoff: Handoff) -> tuple[list[Block], bool]:
    action = handoff.payload.action  # type: ignore[union-attr]
    blocks: list[Block] = []
    cut = False
    if action.description:
        text, cut = agent_text(action.description, 500)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=text)))
    items = list(handoff.current_args.items())
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
        # The arguments shown travel with the click (see ids.decision_value).
        value = decision_value(handoff.id, handoff.current_digest)
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
