"""Block Kit as Slack treats it: the limits it enforces, the ids it fills in, what people use.

The checks are deliberately independent of ``slack_sdk.models`` (which the bot itself renders with),
so a limit the renderer forgets still fails in a test. They cover the limits listed in DESIGN.md,
not the whole Block Kit schema.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import string
from collections.abc import Iterator
from datetime import date
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
MAX_LABEL = 2000
MAX_HINT = 2000
MAX_PLACEHOLDER = 150
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_SELECT_OPTIONS = 100
MAX_CHOICE_OPTIONS = 10
"""Options of a checkboxes or radio_buttons element."""

_SELECTS = frozenset({"static_select", "multi_static_select"})
_CHOICES = frozenset({"checkboxes", "radio_buttons"})
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

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
        if isinstance(max_length, int) and not 1 <= max_length <= MAX_INPUT_LENGTH:
            errors.append(
                f"must be between 1 and {MAX_INPUT_LENGTH} [json-pointer:{pointer}/max_length]"
            )
        min_length = element.get("min_length")
        if isinstance(min_length, int) and not 0 <= min_length <= (
            max_length if isinstance(max_length, int) else MAX_INPUT_LENGTH
        ):
            errors.append(f"must be between 0 and max_length [json-pointer:{pointer}/min_length]")
    elif kind == "number_input":
        _check_number_input(errors, pointer, element)
    elif (
        kind == "datepicker" and "initial_date" in element and not is_date(element["initial_date"])
    ):
        errors.append(f"must be a date YYYY-MM-DD [json-pointer:{pointer}/initial_date]")
    if "placeholder" in element:
        _check_plain_text(errors, f"{pointer}/placeholder", element["placeholder"], MAX_PLACEHOLDER)
    if kind in _SELECTS or kind in _CHOICES:
        _check_options(errors, pointer, element)
    if "confirm" in element:
        _check_confirm(errors, f"{pointer}/confirm", element["confirm"])


def _check_options(errors: list[str], pointer: str, element: dict[str, Any]) -> None:
    """The options of a select (100 at most) or of checkboxes and radio buttons (10): each
    with text of at most 75 characters (``plain_text`` in a select) and a value of 150."""
    kind = element["type"]
    options = element.get("options")
    if kind in _SELECTS and element.get("option_groups") is not None:
        return  # option groups: not rendered by the bot, not checked here
    limit = MAX_SELECT_OPTIONS if kind in _SELECTS else MAX_CHOICE_OPTIONS
    if not isinstance(options, list) or not options:
        errors.append(f"must provide at least one option [json-pointer:{pointer}/options]")
        return
    if len(options) > limit:
        errors.append(f"must be less than {limit + 1} items [json-pointer:{pointer}/options]")
    for index, option in enumerate(options):
        where = f"{pointer}/options/{index}"
        if not isinstance(option, dict):
            errors.append(f"must be an option object [json-pointer:{where}]")
            continue
        if kind in _SELECTS:
            _check_plain_text(errors, f"{where}/text", option.get("text"), MAX_OPTION_TEXT)
        else:
            _check_text_object(errors, f"{where}/text", option.get("text"), MAX_OPTION_TEXT)
        value = option.get("value")
        if not isinstance(value, str) or not 0 < len(value) <= MAX_OPTION_VALUE:
            errors.append(
                f"must be 1 to {MAX_OPTION_VALUE} characters [json-pointer:{where}/value]"
            )


def _check_number_input(errors: list[str], pointer: str, element: dict[str, Any]) -> None:
    """A number input: ``is_decimal_allowed`` given; bounds and initial value numbers (whole
    ones unless decimals are allowed), the minimum not above the maximum."""
    decimals = element.get("is_decimal_allowed")
    if not isinstance(decimals, bool):
        errors.append(f"missing required field: is_decimal_allowed [json-pointer:{pointer}]")
    bounds: dict[str, float] = {}
    for key in ("min_value", "max_value", "initial_value"):
        if key not in element:
            continue
        # Only the value typed in must be whole without decimals; bounds are any number.
        number = number_in(element[key], decimals=decimals is True or key != "initial_value")
        if number is None:
            errors.append(f"must be a number in a string [json-pointer:{pointer}/{key}]")
        else:
            bounds[key] = number
    low, high = bounds.get("min_value"), bounds.get("max_value")
    if low is not None and high is not None and low > high:
        errors.append(f"min_value must not exceed max_value [json-pointer:{pointer}/min_value]")


def number_in(value: Any, *, decimals: bool) -> float | None:
    """The number a number input's string holds (a whole one unless ``decimals``), or None."""
    if not isinstance(value, str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or (not decimals and not number.is_integer()):
        return None
    return number


def is_date(value: Any) -> bool:
    """Is ``value`` a date as a date picker holds it, ``YYYY-MM-DD``?"""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        return False
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


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
        _check_plain_text(errors, f"{pointer}/label", block.get("label"), MAX_LABEL)
        if "hint" in block:
            _check_plain_text(errors, f"{pointer}/hint", block["hint"], MAX_HINT)
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
