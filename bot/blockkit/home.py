"""Block Kit of the App Home: what waits for the viewer, with the channel message's buttons,
and what they decided recently (a view of at most 100 blocks).

A handoff's buttons on the Home are its channel message's own (same action ids and values),
so a click there goes through the same listeners and the same exactly-once decision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.blockkit.ids import HOME, home_actions_block_id
from bot.blockkit.limits import MODAL_BLOCK_LIMIT, SECTION_TEXT_LIMIT
from bot.blockkit.message import (
    decision_buttons,
    handoff_title,
    outcome_text,
    voted_text,
    votes_progress_text,
)
from bot.blockkit.replies import facts, gist
from bot.mrkdwn import agent_text, clip, slack_date
from bot.queries.listings import Listing
from store.models import Handoff

HOME_QUEUE_SHOWN = 20
"""Handoffs listed on the Home; three blocks each."""
HOME_RECENT_SHOWN = 10
"""Recent decisions listed on the Home; one block each."""

_HOME_TEXT = 400


def render_home(
    queue: Listing,
    recent: list[Handoff],
    *,
    command: str,
    viewer: str | None = None,
    notice: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The viewer's Home tab: what waits for them (oldest first, with the channel message's
    buttons), the approvals they voted on that wait for others' votes, and what they
    decided recently. ``notice`` is shown on top (e.g. why a click from the Home changed
    nothing)."""
    now = now or datetime.now(UTC)
    blocks: list[Block] = [HeaderBlock(text="Waiting for you")]
    if notice:
        blocks.append(
            SectionBlock(
                block_id="notice", text=MarkdownTextObject(text=clip(notice, SECTION_TEXT_LIMIT))
            )
        )
    items = queue.items[:HOME_QUEUE_SHOWN]
    voted = [h for h in items if viewer and h.vote_of(viewer)]
    waiting = [h for h in items if h not in voted]
    if not waiting:
        blocks.append(
            SectionBlock(text=MarkdownTextObject(text="Nothing is waiting for you. :tada:"))
        )
    for handoff in waiting:
        blocks.extend(_home_card(handoff, now))
    if voted and viewer:
        blocks.append(HeaderBlock(text="Voted, waiting for others"))
        blocks.extend(_voted_card(handoff, viewer) for handoff in voted)
    if queue.next_cursor or len(queue.items) > len(items):
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=f"More are waiting: `{command} list mine` pages through them all."
                    )
                ]
            )
        )
    blocks.append(DividerBlock())
    blocks.append(HeaderBlock(text="Recently decided by you"))
    if not recent:
        blocks.append(
            ContextBlock(elements=[MarkdownTextObject(text="No decisions in the last days.")])
        )
    for handoff in recent[:HOME_RECENT_SHOWN]:
        heading = agent_text(handoff_title(handoff), 150)[0]
        text = f"*{heading}*  `{handoff.id}`\n{outcome_text(handoff)}"
        blocks.append(SectionBlock(text=MarkdownTextObject(text=clip(text, SECTION_TEXT_LIMIT))))
    blocks.append(
        ContextBlock(
            elements=[MarkdownTextObject(text=f"Updated {slack_date(now)} · `{command} help`")]
        )
    )
    if len(blocks) > MODAL_BLOCK_LIMIT:
        raise ValueError(f"Home has {len(blocks)} blocks, over Slack's {MODAL_BLOCK_LIMIT}")
    view = View(type="home", callback_id=HOME, blocks=blocks)
    return view.to_dict()


def render_home_unavailable(notice: str, *, command: str) -> dict[str, Any]:
    """The Home tab when it cannot be built (the database is unreachable): ``notice`` only,
    rather than an empty queue that would read as "nothing waits for you"."""
    blocks: list[Block] = [
        HeaderBlock(text="Waiting for you"),
        SectionBlock(
            block_id="notice", text=MarkdownTextObject(text=clip(notice, SECTION_TEXT_LIMIT))
        ),
        ContextBlock(elements=[MarkdownTextObject(text=f"`{command} help`")]),
    ]
    return View(type="home", callback_id=HOME, blocks=blocks).to_dict()


def _voted_card(handoff: Handoff, viewer: str) -> Block:
    """An approval ``viewer`` voted on: where its votes stand, no buttons (one vote each)."""
    title = agent_text(handoff_title(handoff), 150)[0]
    text = (
        f"*{title}*  `{handoff.id}`\n{voted_text(handoff, viewer)}\n{votes_progress_text(handoff)}"
    )
    return SectionBlock(
        block_id=f"home_voted_{handoff.id}",
        text=MarkdownTextObject(text=clip(text, SECTION_TEXT_LIMIT)),
    )


def _home_card(handoff: Handoff, now: datetime) -> list[Block]:
    lines = [f"*{agent_text(handoff_title(handoff), 150)[0]}*"]
    truncated = False
    if handoff.context:
        context, cut = agent_text(handoff.context, 200, quoted=True)
        lines.append(context)
        truncated |= cut
    request, cut = agent_text(gist(handoff), _HOME_TEXT)
    lines.append(request)
    truncated |= cut
    # The channel message's own buttons (same action ids and values, so the same listeners
    # and the same exactly-once decision), with View full when the card shortened something.
    buttons = decision_buttons(handoff, truncated=truncated)
    buttons.block_id = home_actions_block_id(handoff.id)
    return [
        SectionBlock(
            block_id=f"home_item_{handoff.id}",
            text=MarkdownTextObject(text=clip("\n".join(lines), SECTION_TEXT_LIMIT)),
        ),
        ContextBlock(elements=[MarkdownTextObject(text=f"{facts(handoff, now)} · `{handoff.id}`")]),
        buttons,
    ]
