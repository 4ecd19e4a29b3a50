"""Block Kit as Slack treats it: the limits it enforces, the ids it fills in, what people use.

The checks are deliberately independent of ``slack_sdk.models`` (which the bot itself renders with),
so a limit the renderer forgets still fails in a test. They cover the limits listed in DESIGN.md,
not the whole Block Kit schema.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Iterator
from typing import Any

MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_MESSAGE_TEXT = 40_000
MAX_MESSAGE_BLOCKS_CHARS = 13_000
MAX_VIEW_BYTES = 250_000
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ID = 255
MAX_HEADER_TEXT = 150
MAX_VIEW_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_INPUT_LENGTH = 3000
MAX_ACTIONS_ELEMENTS = 25
MAX_CONFIRM_TITLE = 100
MAX_CONFIRM_TEXT = 300
MAX_CONFIRM_BUTTON = 30

INTERACTIVE_TYPES = frozenset(
    {
        "button",
        "static_select",
        "external_select",
        "users_select",
        "conversations_select",
        "channels_select",
        "multi_static_select",
        "multi_users_select",
        "multi_conversations_select",
        "multi_channels_select",
        "multi_external_select",
        "overflow",
        "radio_buttons",
        "checkboxes",
        "datepicker",
        "timepicker",
        "datetimepicker",
        "plain_text_input",
        "number_input",
        "email_text_input",
        "url_text_input",
        "rich_text_input",
    }
)

_ID_ALPHABET = string.ascii_letters + string.digits


class BlockKitError(ValueError):
    """Blocks Slack would reject with ``invalid_blocks``; ``errors`` lists why, like Slack does."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def generated_id() -> str:
    """A short random id, the kind Slack fills in for blocks and elements sent without one."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(5))


def elements_of(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The interactive elements of a block (actions elements, section accessory, input element)."""
    candidates: list[Any] = []
    if block.get("type") == "actions":
        candidates = list(block.get("elements") or [])
    elif block.get("type") == "section" and block.get("accessory"):
        candidates = [block["accessory"]]
    elif block.get("type") == "input" and block.get("element"):
        candidates = [block["element"]]
    for element in candidates:
        if isinstance(element, dict) and element.get("type") in INTERACTIVE_TYPES:
            yield element


def fill_ids(blocks: list[dict[str, Any]]) -> None:
    """Give every block a block_id and every interactive element an action_id, as Slack does."""
    for block in blocks:
        block.setdefault("block_id", generated_id())
        for element in elements_of(block):
            element.setdefault("action_id", generated_id())


def _text_of(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("text", ""))
    return ""


def _check_text_object(errors: list[str], pointer: str, obj: Any, limit: int | None) -> None:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        errors.append(f"must be a text object [json-pointer:{pointer}]")
        return
    if limit is not None and len(_text_of(obj)) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{pointer}/text]")


def _check_plain_text(errors: list[str], pointer: str, obj: Any, limit: int) -> None:
    if not isinstance(obj, dict) or obj.get("type") != "plain_text":
        errors.append(f"must be a plain_text object [json-pointer:{pointer}]")
        return
    if len(_text_of(obj)) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{pointer}/text]")


def _check_element(errors: list[str], pointer: str, element: dict[str, Any]) -> None:
    action_id = element.get("action_id")
    if action_id is not None and len(str(action_id)) > MAX_ID:
        errors.append(
            f"must be less than {MAX_ID + 1} characters [json-pointer:{pointer}/action_id]"
        )
    kind = element.get("type")
    if kind == "button":
        _check_plain_text(errors, f"{pointer}/text", element.get("text"), MAX_BUTTON_TEXT)
        value = element.get("value")
        if value is not None and len(str(value)) > MAX_BUTTON_VALUE:
            errors.append(
                f"must be less than {MAX_BUTTON_VALUE + 1} characters "
                f"[json-pointer:{pointer}/value]"
            )
    elif kind == "plain_text_input":
        max_length = element.get("max_length")
        if isinstance(max_length, int) and max_length > MAX_INPUT_LENGTH:
            errors.append(f"must be at most {MAX_INPUT_LENGTH} [json-pointer:{pointer}/max_length]")
    if "confirm" in element:
        _check_confirm(errors, f"{pointer}/confirm", element["confirm"])


def _check_confirm(errors: list[str], pointer: str, confirm: Any) -> None:
    """A confirmation dialog: every text ``plain_text`` (its ``text`` too, per the current
    Block Kit reference) within Slack's limits."""
    if not isinstance(confirm, dict):
        errors.append(f"must be an object [json-pointer:{pointer}]")
        return
    for key, limit in (
        ("title", MAX_CONFIRM_TITLE),
        ("text", MAX_CONFIRM_TEXT),
        ("confirm", MAX_CONFIRM_BUTTON),
        ("deny", MAX_CONFIRM_BUTTON),
    ):
        _check_plain_text(errors, f"{pointer}/{key}", confirm.get(key), limit)
    if confirm.get("style") not in (None, "primary", "danger"):
        errors.append(f"must be primary or danger [json-pointer:{pointer}/style]")


def _check_block(errors: list[str], pointer: str, block: Any) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        errors.append(f"missing required field: type [json-pointer:{pointer}]")
        return
    block_id = block.get("block_id")
    if block_id is not None and len(str(block_id)) > MAX_ID:
        errors.append(
            f"must be less than {MAX_ID + 1} characters [json-pointer:{pointer}/block_id]"
        )
    kind = block["type"]
    if kind == "section":
        if block.get("text") is None and not block.get("fields"):
            errors.append(f"must provide text or fields [json-pointer:{pointer}]")
        if block.get("text") is not None:
            _check_text_object(errors, f"{pointer}/text", block["text"], MAX_SECTION_TEXT)
        fields = block.get("fields") or []
        if len(fields) > MAX_SECTION_FIELDS:
            errors.append(
                f"must be less than {MAX_SECTION_FIELDS + 1} items [json-pointer:{pointer}/fields]"
            )
        for index, item in enumerate(fields):
            _check_text_object(errors, f"{pointer}/fields/{index}", item, MAX_FIELD_TEXT)
    elif kind == "header":
        _check_plain_text(errors, f"{pointer}/text", block.get("text"), MAX_HEADER_TEXT)
    elif kind == "actions":
        elements = block.get("elements") or []
        if not elements:
            errors.append(f"must provide at least one element [json-pointer:{pointer}/elements]")
        elif len(elements) > MAX_ACTIONS_ELEMENTS:
            errors.append(
                f"must be less than {MAX_ACTIONS_ELEMENTS + 1} items "
                f"[json-pointer:{pointer}/elements]"
            )
    elif kind == "input":
        if block.get("element") is None:
            errors.append(f"missing required field: element [json-pointer:{pointer}]")
        _check_plain_text(errors, f"{pointer}/label", block.get("label"), 2000)
    seen_actions: set[str] = set()
    for element in elements_of(block):
        if kind == "actions":
            index = block["elements"].index(element)
            element_pointer = f"{pointer}/elements/{index}"
        else:
            element_pointer = f"{pointer}/{'accessory' if kind == 'section' else 'element'}"
        _check_element(errors, element_pointer, element)
        action_id = element.get("action_id")
        if action_id is not None:
            if action_id in seen_actions:
                errors.append(f"duplicate action_id {action_id!r} [json-pointer:{element_pointer}]")
            seen_actions.add(action_id)


def check_blocks(blocks: Any, *, limit: int, pointer: str = "/blocks") -> None:
    """Raise ``BlockKitError`` if Slack would refuse these blocks.

    Checks the count, each block's type, the text limits from DESIGN.md, confirmation
    dialogs, the elements of an actions block (at most 25), and that block_ids are unique.
    """
    if not isinstance(blocks, list):
        raise BlockKitError([f"must be an array [json-pointer:{pointer}]"])
    errors: list[str] = []
    if len(blocks) > limit:
        errors.append(f"must be less than {limit + 1} items [json-pointer:{pointer}]")
    seen_blocks: set[str] = set()
    for index, block in enumerate(blocks):
        _check_block(errors, f"{pointer}/{index}", block)
        block_id = block.get("block_id") if isinstance(block, dict) else None
        if block_id is not None:
            if block_id in seen_blocks:
                errors.append(f"duplicate block_id {block_id!r} [json-pointer:{pointer}/{index}]")
            seen_blocks.add(block_id)
    if errors:
        raise BlockKitError(errors)


def message_blocks_too_long(blocks: list[dict[str, Any]]) -> bool:
    """Whether the blocks are past the total size at which Slack answers msg_blocks_too_long."""
    return len(json.dumps(blocks, ensure_ascii=False)) > MAX_MESSAGE_BLOCKS_CHARS


def check_view(view: Any, *, kind: str) -> None:
    """Raise ``BlockKitError`` if Slack would refuse this modal or Home tab.

    ``kind`` is "modal" (views.open/update/push, response_action) or "home" (views.publish).
    """
    if not isinstance(view, dict):
        raise BlockKitError(["must be an object [json-pointer:/view]"])
    errors: list[str] = []
    if view.get("type") != kind:
        errors.append(f"must be {kind!r} [json-pointer:/view/type]")
    if kind == "modal":
        if "title" not in view:
            errors.append("missing required field: title [json-pointer:/view]")
        for key in ("title", "submit", "close"):
            if key in view:
                _check_plain_text(errors, f"/view/{key}", view[key], MAX_VIEW_TITLE)
        has_input = any(
            isinstance(block, dict) and block.get("type") == "input"
            for block in view.get("blocks") or []
        )
        if has_input and "submit" not in view:
            errors.append("submit is required when an input block is present [json-pointer:/view]")
    if len(str(view.get("private_metadata", ""))) > MAX_PRIVATE_METADATA:
        errors.append(
            f"must be less than {MAX_PRIVATE_METADATA + 1} characters "
            "[json-pointer:/view/private_metadata]"
        )
    if len(str(view.get("callback_id", ""))) > MAX_ID:
        errors.append(f"must be less than {MAX_ID + 1} characters [json-pointer:/view/callback_id]")
    try:
        check_blocks(view.get("blocks"), limit=MAX_VIEW_BLOCKS, pointer="/view/blocks")
    except BlockKitError as exc:
        errors.extend(exc.errors)
    if len(json.dumps(view).encode()) > MAX_VIEW_BYTES:
        errors.append(f"view must be smaller than {MAX_VIEW_BYTES} bytes [json-pointer:/view]")
    if errors:
        raise BlockKitError(errors)


def find_element(
    blocks: list[dict[str, Any]], action_id: str, block_id: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (block, element) a person would click, or ``LookupError`` explaining what is there.

    Raises ``LookupError`` when no element has ``action_id`` (optionally in ``block_id``), or when
    several blocks have one and ``block_id`` was not given to pick.
    """
    matches = [
        (block, element)
        for block in blocks
        if block_id is None or block.get("block_id") == block_id
        for element in elements_of(block)
        if element.get("action_id") == action_id
    ]
    if len(matches) == 1:
        return matches[0]
    present = sorted(
        f"{block.get('block_id')}/{element.get('action_id')}"
        for block in blocks
        for element in elements_of(block)
    )
    if not matches:
        where = f" in block {block_id!r}" if block_id is not None else ""
        raise LookupError(
            f"no element with action_id {action_id!r}{where}; "
            f"the blocks have (block_id/action_id): {present or 'nothing interactive'}"
        )
    raise LookupError(
        f"{len(matches)} blocks have action_id {action_id!r}; pass block_id= to pick one of "
        f"{[block.get('block_id') for block, _ in matches]}"
    )


def options_of(element: dict[str, Any]) -> list[dict[str, Any]]:
    """All options of a select, overflow, radio or checkbox element (option groups flattened)."""
    options = list(element.get("options") or [])
    for group in element.get("option_groups") or []:
        options.extend(group.get("options") or [])
    return options


def find_option(element: dict[str, Any], value: str) -> dict[str, Any]:
    """The option of ``element`` whose value is ``value``, or ``LookupError`` listing the values."""
    options = options_of(element)
    for option in options:
        if option.get("value") == value:
            return option
    raise LookupError(
        f"{element.get('type')} {element.get('action_id')!r} has no option {value!r}; "
        f"its options are {[option.get('value') for option in options]}"
    )
