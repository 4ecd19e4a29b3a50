"""The ids that tie Block Kit to the listeners: action ids, callback ids, block ids.

Slack sends these back with every click and submission; ``handlers`` registers its
listeners on them. They are a contract with messages already posted (a message posted weeks
ago still carries the ids it was posted with): change one only with a listener for the old.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Action ids of the buttons on a handoff message (and on the App Home).
APPROVE = "handoff_approve"
REJECT = "handoff_reject"
EDIT = "handoff_edit"
ANSWER = "handoff_answer"
CORRECT = "handoff_correct"
CLAIM = "handoff_claim"
RESOLVE = "handoff_resolve"
VIEW_FULL = "handoff_view_full"

# Action ids of the buttons on command replies.
LIST_PREV = "handoff_list_prev"
LIST_NEXT = "handoff_list_next"
LIST_SHOW = "handoff_list_show"

# Callback ids of the modals and the Home.
REJECT_MODAL = "handoff_reject_modal"
EDIT_MODAL = "handoff_edit_modal"
ANSWER_MODAL = "handoff_answer_modal"
CORRECT_MODAL = "handoff_correct_modal"
RESOLVE_MODAL = "handoff_resolve_modal"
FULL_CONTENT_MODAL = "handoff_full_content"
HOME = "handoff_home"

# Block ids of a message's buttons.
ACTIONS_BLOCK = "handoff_actions"
MORE_BLOCK = "handoff_more"

# Input blocks of the modals; each has one element with action id VALUE.
REASON_BLOCK = "reason"
ANSWER_BLOCK = "answer"
CHOICE_BLOCK = "choice"
DRAFT_BLOCK_PREFIX = "draft_part_"
RESOLUTION_BLOCK = "resolution"
ARG_BLOCK_PREFIX = "arg_"
ANSWER_FIELD_PREFIX = "answer_field_"
VALUE = "value"


def arg_block_id(name: str) -> str:
    """Block id of an argument's input (names can be long; block ids are limited to 255)."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return f"{ARG_BLOCK_PREFIX}{digest}"


def answer_field_block_id(index: int) -> str:
    """Block id of the input of a typed answer's field, by its place in the schema (field
    names may be long or odd; block ids are limited to 255 characters)."""
    return f"{ANSWER_FIELD_PREFIX}{index}"


def home_actions_block_id(handoff_id: str) -> str:
    """The block id of a handoff's buttons on the Home (block ids are unique per view)."""
    return f"home_actions_{handoff_id}"


def handoff_id_from_view(view: dict[str, Any]) -> str | None:
    """The handoff id a modal was opened for (kept in ``private_metadata``)."""
    try:
        return str(json.loads(view.get("private_metadata") or "{}")["handoff_id"])
    except (ValueError, KeyError, TypeError):
        return None
