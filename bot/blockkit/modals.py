"""The modals of a handoff: reject with a reason, edit arguments, answer, correct, resolve,
and "View full" (everything the agent sent).

Each modal remembers its handoff in ``private_metadata``; the listeners seal it there with
where it was opened (``handlers.modal_metadata``). Inputs are read back by
``handlers.modal_inputs`` by the block ids of ``bot.blockkit.ids``.
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.blockkit.ids import (
    ANSWER_BLOCK,
    ANSWER_MODAL,
    CHOICE_BLOCK,
    CORRECT_MODAL,
    DRAFT_BLOCK_PREFIX,
    EDIT_MODAL,
    FULL_CONTENT_MODAL,
    REASON_BLOCK,
    REJECT_MODAL,
    RESOLUTION_BLOCK,
    RESOLVE_MODAL,
    VALUE,
    arg_block_id,
)
from bot.blockkit.limits import (
    BUTTON_TEXT_LIMIT,
    FIELD_TEXT_LIMIT,
    INPUT_MAX_LENGTH,
    MODAL_BLOCK_LIMIT,
    MODAL_TEXT_BUDGET,
    MODAL_TITLE_LIMIT,
)
from bot.blockkit.message import handoff_title
from bot.mrkdwn import agent_text, clip, split_text
from store.models import Handoff

_MAIN_TEXT_SHOWN = 2500
_FULL_CHUNK = 2900


def render_reject_modal(handoff: Handoff) -> dict[str, Any]:
    """Modal asking for an optional reason before rejecting."""
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(text=f"Reject *{agent_text(handoff_title(handoff), 200)[0]}*?")
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
                text=f"Edit the arguments of `{agent_text(action.name, 200)[0]}`, then approve."
            )
        ),
    ]
    for name, value in list(action.args.items())[: MODAL_BLOCK_LIMIT - 2]:
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > INPUT_MAX_LENGTH:
            blocks.append(
                SectionBlock(
                    text=MarkdownTextObject(
                        text=f"*{agent_text(name, 200)[0]}* is too long to edit here "
                        "and is kept as sent."
                    )
                )
            )
            continue
        hint = _type_hint(properties.get(name, {}), value)
        blocks.append(
            InputBlock(
                block_id=arg_block_id(name),
                label=clip(name, FIELD_TEXT_LIMIT),
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
        SectionBlock(text=MarkdownTextObject(text=agent_text(question, _MAIN_TEXT_SHOWN)[0])),
    ]
    if choices:
        options = [
            Option(text=clip(choice, BUTTON_TEXT_LIMIT), value=str(index))
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
        shown = agent_text(instructions, 2800)[0]
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
                text=agent_text(getattr(handoff.payload, "summary", ""), 2800)[0]
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
        title=clip(f"Full {handoff.request_type.value}", MODAL_TITLE_LIMIT),
        close="Close",
        blocks=blocks,
        private_metadata=json.dumps({"handoff_id": handoff.id}),
    )
    return view.to_dict()


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
        title=clip(title, MODAL_TITLE_LIMIT),
        submit=clip(submit, MODAL_TITLE_LIMIT),
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
    return clip(hint, FIELD_TEXT_LIMIT)


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
