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
    CheckboxesElement,
    ContextBlock,
    DatePickerElement,
    InputBlock,
    InputInteractiveElement,
    MarkdownTextObject,
    NumberInputElement,
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
    answer_field_block_id,
    arg_block_id,
)
from bot.blockkit.limits import (
    BUTTON_TEXT_LIMIT,
    FIELD_TEXT_LIMIT,
    INPUT_MAX_LENGTH,
    MODAL_BLOCK_LIMIT,
    MODAL_TEXT_BUDGET,
    MODAL_TITLE_LIMIT,
    SECTION_TEXT_LIMIT,
)
from bot.blockkit.message import answer_fields_of, field_terms, fields_listing, handoff_title
from bot.mrkdwn import agent_text, clip, split_text
from store.answer_schemas import AnswerField, decimal_text
from store.models import Handoff

_MAIN_TEXT_SHOWN = 2500
_FULL_CHUNK = 2900
_SINGLE_LINE_UP_TO = 150
"""Longest text a field's input takes on one line; a longer (or unbounded) one is multiline."""
CHECKED = "true"
"""The value of a boolean field's one checkbox: ticked is true, left empty false."""


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
    for name, value in list(handoff.current_args.items())[: MODAL_BLOCK_LIMIT - 2]:
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
    """Modal to answer a question: pick a suggested choice or type an answer; for a typed
    answer (``answer_schema``), one input per field of the schema."""
    payload = handoff.payload
    question = getattr(payload, "question", "")
    choices = getattr(payload, "choices", None) or []
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=agent_text(question, _MAIN_TEXT_SHOWN)[0])),
    ]
    fields = answer_fields_of(handoff)
    if fields is not None:
        blocks.extend(typed_answer_input(index, field) for index, field in enumerate(fields))
        return _modal(ANSWER_MODAL, handoff, "Answer question", "Send answer", blocks)
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


def typed_answer_input(index: int, field: AnswerField) -> InputBlock:
    """The input of one field of a typed answer: a text input, a date picker, a select of the
    enum's values (by index), a number input or one checkbox. Its block id is the field's
    place in the schema (``answer_field_block_id``), read back by ``handlers.modal_inputs``.

    A boolean is always optional: its checkbox left empty is an answer (false), not a gap.
    """
    element: InputInteractiveElement
    if field.kind == "date":
        element = DatePickerElement(action_id=VALUE)
    elif field.kind == "enum":
        element = StaticSelectElement(
            action_id=VALUE,
            placeholder="Choose one",
            # The value's place, not the value: short, whatever the agent's text. No "emoji"
            # flag on each option: 100 of them in each of 25 fields must fit in 250 kB.
            options=[
                Option(text=PlainTextObject(text=clip(value, BUTTON_TEXT_LIMIT)), value=str(number))
                for number, value in enumerate(field.options)
            ],
        )
    elif field.kind in ("number", "integer"):
        element = NumberInputElement(
            action_id=VALUE,
            is_decimal_allowed=field.kind == "number",
            min_value=None if field.minimum is None else decimal_text(field.minimum),
            max_value=None if field.maximum is None else decimal_text(field.maximum),
        )
    elif field.kind == "boolean":
        element = CheckboxesElement(action_id=VALUE, options=[Option(text="Yes", value=CHECKED)])
    else:
        longest = INPUT_MAX_LENGTH if field.max_length is None else field.max_length
        element = PlainTextInputElement(
            action_id=VALUE,
            min_length=field.min_length or None,
            max_length=longest,
            multiline=longest > _SINGLE_LINE_UP_TO,
        )
    terms = "tick for yes, leave empty for no" if field.kind == "boolean" else field_terms(field)
    hint = f"{field.description} ({terms})" if field.description else terms[0].upper() + terms[1:]
    return InputBlock(
        block_id=answer_field_block_id(index),
        label=clip(field.label, FIELD_TEXT_LIMIT),
        hint=PlainTextObject(text=clip(hint, FIELD_TEXT_LIMIT), emoji=False),
        optional=field.kind == "boolean" or not field.required,
        element=element,
    )


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
        fields = answer_fields_of(handoff)
        if fields is not None:
            parts.append(("Answer fields", fields_listing(fields)))
        return parts
    if payload.kind == "correction":
        parts = [("Instructions", payload.instructions)] if payload.instructions else []
        return [*parts, ("Draft", payload.draft)]
    return [("Summary", payload.summary)]


def render_notice_modal(title: str, text: str) -> dict[str, Any]:
    """A modal that only tells (mrkdwn ``text``), closed with its one button."""
    view = View(
        type="modal",
        title=clip(title, MODAL_TITLE_LIMIT),
        close="Close",
        blocks=[SectionBlock(text=MarkdownTextObject(text=clip(text, SECTION_TEXT_LIMIT)))],
    )
    return view.to_dict()


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
