"""Block Kit of the slash command's replies: help, listings, one handoff's detail, stats.

Replies are ephemeral messages (50 blocks, about 12k characters). A handoff's decision
buttons in ``show`` are its channel message's own (``bot.blockkit.message``): same action
ids, same values, handled by the same listeners.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)

from bot.blockkit.ids import LIST_NEXT, LIST_PREV, LIST_SHOW, MORE_BLOCK, VIEW_FULL
from bot.blockkit.limits import (
    FIELD_TEXT_LIMIT,
    HEADER_TEXT_LIMIT,
    MESSAGE_BLOCK_LIMIT,
    MESSAGE_TEXT_BUDGET,
    SECTION_TEXT_LIMIT,
)
from bot.blockkit.message import (
    RenderedMessage,
    decision_buttons,
    handoff_title,
    outcome_text,
    voted_text,
    votes_count_text,
    votes_progress_text,
)
from bot.mrkdwn import (
    agent_text,
    ago,
    channel_mention,
    clip,
    duration,
    mention,
    reviewer_mention,
    slack_date,
)
from bot.queries.listings import ListFilter, Listing, ListKind
from bot.queries.stats import Stats
from store.models import AuditEvent, Handoff, TaskKind, TaskState

AUDIT_SHOWN = 60
"""Most audit events ``show`` lists (the latest ones)."""

_ITEM_TEXT = 220


@dataclass(frozen=True)
class PageRequest:
    """What a Previous/Next button asks for: a listing and a cursor (at most one of
    ``after``/``before``)."""

    filter: ListFilter
    after: str | None = None
    before: str | None = None


def encode_page(request: PageRequest) -> str:
    """A button value for ``request`` (well under Slack's 2000 characters: ids are 29,
    run ids at most 256)."""
    data = {"k": request.filter.kind.value, "v": request.filter.value}
    if request.after:
        data["a"] = request.after
    if request.before:
        data["b"] = request.before
    return json.dumps(data, separators=(",", ":"))


def decode_page(value: str) -> PageRequest:
    """The ``PageRequest`` in a button value; raises ``ValueError`` for a tampered one."""
    try:
        data = json.loads(value)
        listing = ListFilter(ListKind(data["k"]), str(data.get("v") or ""))
        after, before = data.get("a"), data.get("b")
        # Cursors are handoff ids: anything else is a tampered value, refused here rather
        # than compared with ids further down.
        if not all(cursor is None or isinstance(cursor, str) for cursor in (after, before)):
            raise TypeError("a cursor is not a string")
        return PageRequest(listing, after=after, before=before)
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a page request: {value!r}") from exc


# -- simple replies ------------------------------------------------------------------------


def render_notice(text: str) -> RenderedMessage:
    """A one-paragraph reply (mrkdwn written by the bot)."""
    return _message(
        text, [SectionBlock(text=MarkdownTextObject(text=clip(text, SECTION_TEXT_LIMIT)))]
    )


TASK_NAMES = {
    TaskKind.DELIVER: "delivery",
    TaskKind.RESUME: "resume",
    TaskKind.NOTIFY: "message update",
}
"""A handoff's tasks as replies name them."""


def render_help(command: str, *, problem: str | None = None) -> RenderedMessage:
    """The list of subcommands; with ``problem``, what was wrong with the input first."""
    lines = [
        f"• `{command} list [pending|mine|#channel|run <run_id>|type <type>]`: pending "
        "handoffs, oldest first",
        f"• `{command} list failed`: handoffs whose delivery, resume or message update gave "
        "up (_undeliverable_ ones among them), with Slack's error",
        f"• `{command} show <id>`: the full record, decision and audit trail",
        f"• `{command} cancel <id> [reason]`: cancel it; the run resumes with _cancelled_",
        f"• `{command} expire <id>`: expire it now; the run resumes with _expired_",
        f"• `{command} reassign <id> <#channel|@user|@group>`: post it there instead; the "
        "old message points to the new one",
        f"• `{command} retry <id>`: retry a delivery, resume or message update that failed "
        "after its retries (an _undeliverable_ handoff is not posted again: redeliver it)",
        f"• `{command} redeliver <id> [#channel|@user]`: ask again what an _undeliverable_ "
        "handoff asked, as a new handoff for the same run, posted there (or where it was "
        "sent); its decision resumes the run again",
        f"• `{command} stats [7d]`: pending by type and channel, time to decision, expiry "
        "rate, failed resumes",
        f"• `{command} help`: this list",
    ]
    blocks: list[Block] = []
    if problem:
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(text=clip(f":warning: {problem}", SECTION_TEXT_LIMIT))
            )
        )
    blocks.append(SectionBlock(text=MarkdownTextObject(text="\n".join(lines))))
    blocks.append(
        ContextBlock(
            elements=[
                MarkdownTextObject(
                    text="`list mine`, `show` (of a handoff you may decide) and `help` are open "
                    "to everyone; the other subcommands are for handoff admins."
                )
            ]
        )
    )
    fallback = problem or f"{command} help"
    return _message(fallback, blocks)


# -- list ----------------------------------------------------------------------------------


def describe_filter(listing: ListFilter) -> str:
    """A heading for a listing, e.g. "Pending in <#C0APPROVALS>"."""
    if listing.kind is ListKind.MINE:
        return "Pending handoffs you can decide"
    if listing.kind is ListKind.CHANNEL:
        return f"Pending in {channel_mention(listing.value)}"
    if listing.kind is ListKind.RUN:
        return f"Pending in run `{agent_text(listing.value, 200)[0]}`"
    if listing.kind is ListKind.TYPE:
        return f"Pending {listing.value}s"
    if listing.kind is ListKind.FAILED:
        return "Handoffs whose work failed"
    return "All pending handoffs"


def render_listing(
    listing: Listing, *, viewer: str | None = None, now: datetime | None = None
) -> RenderedMessage:
    """A page of handoffs, each with a Details button, and Previous/Next buttons; one
    ``viewer`` already voted on says so (it waits for others, not for them)."""
    heading = describe_filter(listing.filter)
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=f"*{heading}*"))]
    if not listing.items:
        empty = (
            "Nothing has failed."
            if listing.filter.kind is ListKind.FAILED
            else ("Nothing is waiting here. :tada:")
        )
        blocks.append(SectionBlock(text=MarkdownTextObject(text=empty)))
        return _message(f"{heading}: none", blocks)
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_position(listing))]))
    pages = _page_buttons(listing)
    failures = listing.filter.kind is ListKind.FAILED
    # A page of long requests would pass Slack's size limit: shorten their gist, then drop it.
    for gist_length in (_ITEM_TEXT, 80, 0):
        items: list[Block] = [
            SectionBlock(
                block_id=f"item_{handoff.id}",
                text=MarkdownTextObject(
                    text=_item_text(handoff, now, gist_length, failures=failures, viewer=viewer)
                ),
                accessory=ButtonElement(text="Details", action_id=LIST_SHOW, value=handoff.id),
            )
            for handoff in listing.items
        ]
        if pages:
            items.append(ActionsBlock(block_id="handoff_list_pages", elements=pages))
        if _size(items) <= _budget_left(blocks):
            break
    return _message(f"{heading}: {len(listing.items)} shown", blocks + items)


def _position(listing: Listing) -> str:
    shown = len(listing.items)
    if listing.total is not None and listing.offset is not None:
        first = listing.offset + 1
        return f"{first} to {listing.offset + shown} of {listing.total} · oldest first"
    return f"{shown} shown · oldest first"


def _item_text(
    handoff: Handoff,
    now: datetime | None,
    gist_length: int,
    *,
    failures: bool = False,
    viewer: str | None = None,
) -> str:
    lines = [f"*{agent_text(handoff_title(handoff), 100)[0]}*  `{handoff.id}`"]
    request = gist(handoff)
    if request and gist_length:
        lines.append(agent_text(request, gist_length)[0])
    lines.append(facts(handoff, now))
    if viewer and (voted := voted_text(handoff, viewer)):
        lines.append(voted)
    if failures:
        lines.append(failure_text(handoff))
    return "\n".join(lines)


def failure_text(handoff: Handoff) -> str:
    """What gave up in a handoff and why, e.g. ":x: _undeliverable_ · delivery failed
    after 1 attempt: the channel is archived (is_archived)"."""
    parts = [f"_{handoff.status.value}_"]
    for kind, task in handoff.failed_tasks():
        attempts = f"{task.attempt} attempt{'' if task.attempt == 1 else 's'}"
        error = agent_text(task.last_error or "no error recorded", 200)[0]
        parts.append(f"{TASK_NAMES[kind]} failed after {attempts}: {error}")
    return ":x: " + " · ".join(parts)


def facts(handoff: Handoff, now: datetime | None) -> str:
    facts = [handoff.request_type.value, f"run `{agent_text(handoff.run_id, 60)[0]}`"]
    if handoff.channel:
        facts.append(channel_mention(handoff.channel))
    if handoff.reviewers:
        facts.append("for " + ", ".join(reviewer_mention(r) for r in handoff.reviewers[:3]))
    if count := votes_count_text(handoff):
        facts.append(count)
    facts.append(f"created {ago(handoff.created_at, now)}")
    return " · ".join(facts)


def _page_buttons(listing: Listing) -> list[ButtonElement]:
    buttons = []
    if listing.prev_cursor:
        request = PageRequest(listing.filter, before=listing.prev_cursor)
        buttons.append(
            ButtonElement(text="Previous", action_id=LIST_PREV, value=encode_page(request))
        )
    if listing.next_cursor:
        request = PageRequest(listing.filter, after=listing.next_cursor)
        buttons.append(ButtonElement(text="Next", action_id=LIST_NEXT, value=encode_page(request)))
    return buttons


# -- show ----------------------------------------------------------------------------------


def render_detail(handoff: Handoff, audit: list[AuditEvent]) -> RenderedMessage:
    """The full record of a handoff: facts, request, decision, background tasks and its
    audit trail; a pending one keeps its decision buttons."""
    blocks: list[Block] = [
        HeaderBlock(text=clip(handoff_title(handoff), HEADER_TEXT_LIMIT)),
        SectionBlock(fields=[MarkdownTextObject(text=text) for text in _detail_fields(handoff)]),
    ]
    request = gist(handoff)
    if handoff.context:
        context = agent_text(handoff.context, 800, quoted=True)[0]
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Why*\n{context}")))
    if request:
        blocks.append(
            SectionBlock(text=MarkdownTextObject(text=f"*Request*\n{agent_text(request, 1500)[0]}"))
        )
    if not handoff.is_pending:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=outcome_text(handoff))))
    elif handoff.quorum is not None:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=votes_progress_text(handoff))))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_tasks_line(handoff))]))
    blocks.append(_detail_actions(handoff))
    blocks.append(DividerBlock())
    blocks.extend(_audit_blocks(handoff, audit, budget=_budget_left(blocks)))
    return _message(f"Handoff {handoff.id}: {handoff.status.value}", blocks)


def _detail_fields(handoff: Handoff) -> list[str]:
    fields = [
        f"*Status*\n{handoff.status.value}",
        f"*Type*\n{handoff.request_type.value}",
        f"*Run*\n`{agent_text(handoff.run_id, 300)[0]}`",
        f"*Thread*\n`{agent_text(handoff.thread_id, 300)[0]}`",
        f"*Created*\n{slack_date(handoff.created_at)}",
        f"*Channel*\n{channel_mention(handoff.channel) if handoff.channel else 'default'}",
        "*Reviewers*\n"
        + (", ".join(reviewer_mention(r) for r in handoff.reviewers[:20]) or "anyone who sees it"),
    ]
    if handoff.requester:
        fields.append(f"*Requested by*\n{mention(handoff.requester)}")
    if handoff.expires_at and handoff.is_pending:
        fields.append(f"*Expires*\n{slack_date(handoff.expires_at)}")
    if handoff.claimed_by and handoff.is_pending:
        fields.append(f"*Claimed by*\n{mention(handoff.claimed_by)}")
    return fields[:10]


def _tasks_line(handoff: Handoff) -> str:
    parts = [f"id `{handoff.id}`"]
    if handoff.api_key:
        parts.append(f"created by API key `{agent_text(handoff.api_key, 64)[0]}`")
    parts.append(f"delivery {handoff.delivery.state.value}")
    if handoff.delivery.state is TaskState.FAILED and handoff.delivery.last_error:
        parts.append(f"delivery error: {agent_text(handoff.delivery.last_error, 300)[0]}")
    if handoff.resume_target or handoff.callback:
        resume = handoff.resume
        how = " by webhook" if handoff.callback else ""
        parts.append(f"resume{how} {resume.state.value} (attempt {resume.attempt})")
        if resume.last_error:
            parts.append(f"last error: {agent_text(resume.last_error, 300)[0]}")
    return " · ".join(parts)


def _detail_actions(handoff: Handoff) -> Block:
    if handoff.is_pending:
        # The record is shortened too: the channel message's buttons plus View full.
        return decision_buttons(handoff, truncated=True)
    return ActionsBlock(
        block_id=MORE_BLOCK,
        elements=[ButtonElement(text="View full", action_id=VIEW_FULL, value=handoff.id)],
    )


def _audit_blocks(handoff: Handoff, audit: list[AuditEvent], *, budget: int) -> list[Block]:
    events = audit[-AUDIT_SHOWN:]
    lines = [_audit_line(event) for event in events]
    # Keep the latest events that fit the message's size budget.
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        used += len(line) + 60  # the JSON around each line, roughly
        if used > budget:
            break
        kept.append(line)
    kept.reverse()
    left_out = len(audit) - len(kept)
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=f"*Audit trail* ({len(audit)} events)"))
    ]
    chunk: list[str] = []
    for line in kept:
        if sum(len(x) + 1 for x in chunk) + len(line) > SECTION_TEXT_LIMIT - 100:
            blocks.append(SectionBlock(text=MarkdownTextObject(text="\n".join(chunk))))
            chunk = []
        chunk.append(line)
    if chunk:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="\n".join(chunk))))
    if left_out:
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=f"{left_out} earlier events not shown: "
                        f"`handoff show {handoff.id}` or `handoff audit export`"
                    )
                ]
            )
        )
    return blocks[: MESSAGE_BLOCK_LIMIT - 10]


def _audit_line(event: AuditEvent) -> str:
    detail = ""
    if event.detail:
        shown = json.dumps(event.detail, ensure_ascii=False, separators=(", ", ": "))
        detail = f" {agent_text(shown, 160)[0]}"
    actor = mention(event.actor) if event.actor else "-"
    return f"• {slack_date(event.at)} *{event.event}* by {actor}{detail}"


# -- stats ---------------------------------------------------------------------------------


def render_stats(stats: Stats) -> RenderedMessage:
    """Pending by type and channel, time to decision, expiry rate and failed resumes."""
    days = stats.window.total_seconds() / 86400
    if days >= 1:
        span = f"{days:g} day{'s' if days != 1 else ''}"
    else:
        span = duration(stats.window.total_seconds())
    by_type = ", ".join(f"{n} {t}" for t, n in stats.pending_by_type.items()) or "none"
    by_channel = (
        "\n".join(f"{channel_mention(c)}: {n}" for c, n in stats.pending_by_channel.items())
        or "none named"
    )
    rate = f"{stats.expiry_rate:.0%}" if stats.expiry_rate is not None else "n/a"
    fields = [
        f"*Pending now*\n{stats.pending} ({by_type})",
        f"*Pending by channel*\n{by_channel}",
        f"*Decided*\n{stats.decided} by people, {stats.expired} expired, "
        f"{stats.cancelled} cancelled, {stats.undeliverable} undeliverable",
        f"*Time to decision*\nmedian {_duration_or_na(stats.median_decision_seconds)}, "
        f"p90 {_duration_or_na(stats.p90_decision_seconds)}",
        f"*Expiry rate*\n{rate} of {stats.closed} closed",
        f"*Failed resumes*\n{stats.failed_resumes} in the window, "
        f"{stats.failing_resumes} failed now",
        f"*Failed deliveries*\n{stats.failed_deliveries_total} now"
        + (
            ": " + ", ".join(f"`{i}`" for i in stats.failed_deliveries)
            if stats.failed_deliveries
            else ""
        ),
    ]
    blocks: list[Block] = [
        HeaderBlock(text=f"Handoffs, last {span}"),
        SectionBlock(fields=[MarkdownTextObject(text=clip(f, FIELD_TEXT_LIMIT)) for f in fields]),
        ContextBlock(
            elements=[MarkdownTextObject(text=f"Since {slack_date(stats.since)} · from the audit")]
        ),
    ]
    return _message(f"Handoff stats, last {span}", blocks)


def _duration_or_na(seconds: float | None) -> str:
    return "n/a" if seconds is None else duration(seconds)


def gist(handoff: Handoff) -> str:
    """The request in one short plain line (not escaped)."""
    payload = handoff.payload
    if payload.kind == "approval":
        args = json.dumps(payload.action.args, ensure_ascii=False, separators=(", ", ": "))
        return f"{payload.action.name} {args}"
    if payload.kind == "question":
        return payload.question
    if payload.kind == "correction":
        return payload.instructions or payload.draft
    return payload.summary


def _size(blocks: list[Block]) -> int:
    return len(json.dumps([block.to_dict() for block in blocks], ensure_ascii=False))


def _budget_left(blocks: list[Block]) -> int:
    return max(0, MESSAGE_TEXT_BUDGET - _size(blocks))


def _message(text: str, blocks: list[Block]) -> RenderedMessage:
    rendered = [block.to_dict() for block in blocks]
    if len(rendered) > MESSAGE_BLOCK_LIMIT:
        raise ValueError(f"reply has {len(rendered)} blocks, over Slack's {MESSAGE_BLOCK_LIMIT}")
    size = len(json.dumps(rendered, ensure_ascii=False))
    if size > MESSAGE_TEXT_BUDGET + 1000:
        raise ValueError(f"reply blocks take {size} characters; Slack refuses about 12k")
    return RenderedMessage(text=clip(text, 300), blocks=rendered)
