"""Handoffs, payloads and checks for the Block Kit tests: builders of handoffs in every
state, hypothesis strategies of agent payloads, and the Slack limits every rendering must keep."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bot.blockkit import message as message_view
from bot.blockkit.ids import (
    handoff_id_from_view,
)
from bot.blockkit.limits import MESSAGE_TEXT_BUDGET
from store import defaults
from store.models import ALLOWED_OUTCOMES, Handoff, RequestType, ResumeData, Status

HANDOFF_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"


CREATED = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


MODAL_MAX_BYTES = 250_000


INJECTIONS = ("<!channel>", "<@U123>", "<http://x|y>")


INJECTION_TEXT = "Ping <!channel> and <@U123>, then open <http://x|y> *now*"


# Generous but fast: a few hundred examples per renderer, no per-example deadline (large
# payloads take a few milliseconds), and no example database left in the work tree.
PROPERTY = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


def make_handoff(
    payload: dict[str, Any],
    *,
    status: Status = Status.PENDING,
    context: str = "",
    resume_data: ResumeData | None = None,
    **fields: Any,
) -> Handoff:
    """A handoff as the store would return it, without going through Redis."""
    decided = status is not Status.PENDING
    return Handoff(
        id=HANDOFF_ID,
        run_id="run-1",
        thread_id="t-1",
        request_type=RequestType(payload["kind"]),
        context=context,
        payload=payload,
        status=status,
        resume_data=resume_data,
        created_at=CREATED,
        decided_at=CREATED + timedelta(minutes=5) if decided else None,
        **fields,
    )


def approval(args: dict[str, Any] | None = None, **action: Any) -> dict[str, Any]:
    return {"kind": "approval", "action": {"name": "issue_refund", "args": args or {}, **action}}


def question(text: str = "Which plan?", choices: list[str] | None = None) -> dict[str, Any]:
    return {"kind": "question", "question": text, "choices": choices}


def correction(draft: str = "Dear customer,", instructions: str | None = None) -> dict[str, Any]:
    return {"kind": "correction", "draft": draft, "instructions": instructions}


def escalation(summary: str = "Customer threatens legal action") -> dict[str, Any]:
    return {"kind": "escalation", "summary": summary}


def decision(outcome: Status, by: str = "U01", **fields: Any) -> ResumeData:
    return ResumeData(decision_id="d-1", outcome=outcome, decided_by=by, **fields)


# Pieces agent text is made of: unicode, emoji (with joiners and flags), mrkdwn control
# characters, mentions and links, and every kind of line break.
PIECES = (
    "a",
    "Lorem ipsum dolor sit amet ",
    "Ünïcödé ",
    "日本語のテキスト",
    "🙂",
    "👩‍👩‍👧",
    "🇫🇷",
    "<",
    ">",
    "&",
    "&amp;",
    "<!channel>",
    "<!here>",
    "<@U123>",
    "<http://x|y>",
    "*bold*",
    "_it_",
    "`code`",
    "```",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    " ",
    "\u2028",
    '"',
    "\\",
)


# Sizes around the limits the renderers care about.
EDGE_SIZES = (1, 75, 80, 150, 299, 300, 301, 500, 1000, 1500, 1501, 2500, 2501, 2900, 3000, 3001)


piece = st.sampled_from(PIECES)


TEXT_UNITS = st.one_of(
    piece,
    st.tuples(piece, piece, st.text(max_size=2), piece).map("".join),
    # Logs, lists and CSV: many short lines, which quoting (">" per line) makes longer.
    st.sampled_from(["\n", "x\n", "\r\n", "1,2\n", "- item\n"]),
)


@st.composite
def agent_texts(draw: st.DrawFn, *, min_size: int = 0, max_size: int = 60_000) -> str:
    """Text of 0..60,000 characters: a short random pattern repeated to a chosen length
    (cheap to generate, and it reaches the long sizes plain ``st.text`` never does)."""
    unit = draw(TEXT_UNITS)
    edges = [size for size in EDGE_SIZES if min_size <= size <= max_size]
    size = draw(
        st.one_of(
            st.integers(min_size, min(max_size, 120)),
            st.sampled_from(edges or [min_size]),
            st.integers(min_size, max_size),
        )
    )
    return (unit * (size // len(unit) + 1))[:size]


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    agent_texts(max_size=4000),
)


json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.text(max_size=20), inner, max_size=6),
    ),
    max_leaves=6,
)


arg_names = st.one_of(st.text(min_size=1, max_size=30), agent_texts(min_size=1, max_size=400))


@st.composite
def arg_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """0..40 arguments, cycling through up to five drawn (name, value) pairs: as varied as
    drawing forty, at a fraction of the generation time."""
    pairs = draw(st.lists(st.tuples(arg_names, json_values), max_size=5))
    count = draw(st.integers(len(pairs), 40)) if pairs else 0
    args: dict[str, Any] = {}
    for index in range(count):
        name, value = pairs[index % len(pairs)]
        args[name if index < len(pairs) else f"{name}_{index}"] = value
    return args


@st.composite
def choice_lists(draw: st.DrawFn) -> list[str]:
    """0..150 choices, cycling through up to five drawn ones."""
    drawn = draw(st.lists(agent_texts(min_size=1, max_size=300), max_size=5))
    count = draw(st.integers(len(drawn), 150)) if drawn else 0
    return [f"{drawn[i % len(drawn)]} #{i}" if i >= len(drawn) else drawn[i] for i in range(count)]


user_ids = st.sampled_from(["U1", "W0REVIEW2", "U0LONGERUSERID", "api-user", "<!channel>"])


@st.composite
def payloads(draw: st.DrawFn, request_type: RequestType) -> dict[str, Any]:
    optional_text = st.none() | agent_texts()
    if request_type is RequestType.APPROVAL:
        args = draw(arg_dicts())
        schema = draw(
            st.none()
            | st.just({"type": "object", "properties": {n: {"type": "string"} for n in args}})
        )
        return approval(
            args,
            name=draw(agent_texts(min_size=1, max_size=200)),
            description=draw(optional_text),
            args_schema=schema,
        )
    if request_type is RequestType.QUESTION:
        choices = st.none() | choice_lists()
        return question(draw(agent_texts(min_size=1)), draw(choices))
    if request_type is RequestType.CORRECTION:
        return correction(draw(agent_texts(min_size=1)), draw(optional_text))
    return escalation(draw(agent_texts(min_size=1)))


@st.composite
def decisions(draw: st.DrawFn, request_type: RequestType, outcome: Status) -> ResumeData | None:
    """A decision the store would accept for this type and outcome (or none at all)."""
    if draw(st.integers(0, 9)) == 0:
        return None
    optional_text = st.none() | agent_texts()
    fields: dict[str, Any] = {"comment": draw(optional_text)}
    if outcome is Status.ANSWERED:
        fields["answer"] = draw(agent_texts(min_size=1))
    if outcome is Status.APPROVED and request_type is RequestType.APPROVAL:
        fields["edited_args"] = draw(st.none() | arg_dicts())
    if outcome is Status.APPROVED and request_type is RequestType.CORRECTION:
        fields["corrected_draft"] = draw(optional_text)
    by = "system" if outcome is Status.EXPIRED else draw(user_ids)
    return decision(outcome, by=by, **fields)


def states(request_type: RequestType) -> list[str]:
    """Every state a handoff of this type can be rendered in."""
    found = ["pending"]
    if request_type is RequestType.ESCALATION:
        found.append("claimed")
    outcomes = {*ALLOWED_OUTCOMES[request_type], Status.EXPIRED, Status.CANCELLED}
    return found + sorted(status.value for status in outcomes)


@st.composite
def handoffs_in_any_state(
    draw: st.DrawFn, request_types: tuple[RequestType, ...] = tuple(RequestType)
) -> Handoff:
    request_type = draw(st.sampled_from(request_types))
    state = draw(st.sampled_from(states(request_type)))
    status = Status.PENDING if state in ("pending", "claimed") else Status(state)
    # A decided escalation keeps whoever had claimed it.
    claimer = "U7" if state == "claimed" else None
    if request_type is RequestType.ESCALATION and status is not Status.PENDING:
        claimer = draw(st.none() | st.just("U7"))
    return make_handoff(
        draw(payloads(request_type)),
        status=status,
        context=draw(agent_texts()),
        resume_data=None if status is Status.PENDING else draw(decisions(request_type, status)),
        claimed_by=claimer,
        requester=draw(st.none() | user_ids),
        agent_name=draw(st.none() | agent_texts(min_size=1, max_size=300)),
        expires_at=draw(st.none() | st.just(CREATED + timedelta(hours=4))),
    )


@st.composite
def pending_handoffs(
    draw: st.DrawFn, request_types: tuple[RequestType, ...] = tuple(RequestType)
) -> Handoff:
    """What a reviewer opens a modal on: a pending handoff (claimed, for an escalation)."""
    request_type = draw(st.sampled_from(request_types))
    return make_handoff(
        draw(payloads(request_type)),
        context=draw(agent_texts()),
        agent_name=draw(st.none() | agent_texts(min_size=1, max_size=300)),
        claimed_by="U7" if request_type is RequestType.ESCALATION else None,
    )


def dicts_in(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object nested anywhere in ``node``."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from dicts_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from dicts_in(value)


def text_objects(node: Any, kind: str | None = None) -> list[str]:
    """The text of every text object in ``node`` (optionally only ``mrkdwn`` or ``plain_text``)."""
    return [
        obj["text"]
        for obj in dicts_in(node)
        if obj.get("type") in ("mrkdwn", "plain_text")
        and isinstance(obj.get("text"), str)
        and (kind is None or obj["type"] == kind)
    ]


def total_text_length(blocks: list[dict[str, Any]]) -> int:
    return sum(len(text) for text in text_objects(blocks))


def assert_common_limits(node: Any) -> None:
    """Limits shared by messages and modals, checked on every nested object."""
    for obj in dicts_in(node):
        for key in ("action_id", "block_id"):
            if key in obj:
                assert len(obj[key]) <= 255, f"{key} too long"
        kind = obj.get("type")
        if kind == "section":
            if "text" in obj:
                assert len(obj["text"]["text"]) <= 3000
            fields = obj.get("fields", [])
            assert len(fields) <= 10
            assert all(len(field["text"]) <= 2000 for field in fields)
        elif kind == "header":
            assert len(obj["text"]["text"]) <= 150
        elif kind == "button":
            assert 1 <= len(obj["text"]["text"]) <= 75
            assert len(obj.get("value", "")) <= 2000
        elif kind == "actions":
            action_ids = [element["action_id"] for element in obj["elements"]]
            assert len(action_ids) <= 25
            assert len(action_ids) == len(set(action_ids)), f"duplicate action ids {action_ids}"
        elif kind == "input":
            assert len(obj["label"]["text"]) <= 2000
            assert "hint" not in obj or len(obj["hint"]["text"]) <= 2000
        elif kind == "plain_text_input":
            max_length = obj.get("max_length", 3000)
            assert max_length <= 3000
            assert len(obj.get("initial_value") or "") <= max_length
        elif kind == "static_select":
            assert 1 <= len(obj["options"]) <= 100
            for option in obj["options"]:
                assert 1 <= len(option["text"]["text"]) <= 75
                assert len(option["value"]) <= 150


def assert_message_within_limits(message: message_view.RenderedMessage) -> None:
    blocks = message.blocks
    assert message.text
    assert len(blocks) <= 50
    assert total_text_length(blocks) <= MESSAGE_TEXT_BUDGET
    assert_common_limits(blocks)
    json.dumps(blocks)


def store_payload_bytes(handoff: Handoff) -> int:
    """How the store measures a request against ``MAX_PAYLOAD_BYTES`` (see HandoffStore.create)."""
    return len(json.dumps(handoff.context, ensure_ascii=False).encode()) + len(
        handoff.payload.model_dump_json().encode()
    )


def view_bytes(view: dict[str, Any]) -> int:
    return len(json.dumps(view, ensure_ascii=False).encode())


def assert_modal_within_limits(view: dict[str, Any], handoff: Handoff) -> None:
    assert view["type"] == "modal"
    assert 1 <= len(view["blocks"]) <= 100
    for key in ("title", "submit", "close"):
        if key in view:
            assert 1 <= len(view[key]["text"]) <= 24
    assert len(view["private_metadata"]) <= 3000
    assert handoff.id in view["private_metadata"]
    assert handoff_id_from_view(view) == handoff.id
    block_ids = [block["block_id"] for block in view["blocks"] if "block_id" in block]
    assert len(block_ids) == len(set(block_ids)), "duplicate block ids in a modal"
    assert_common_limits(view["blocks"])
    # Sizes in bytes grow with what the agent sent; the store caps that at MAX_PAYLOAD_BYTES.
    if store_payload_bytes(handoff) <= defaults.MAX_PAYLOAD_BYTES:
        assert view_bytes(view) < MODAL_MAX_BYTES


def action_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        element["action_id"]
        for block in blocks
        if block["type"] == "actions"
        for element in block["elements"]
    ]


def button(blocks: list[dict[str, Any]], action_id: str) -> dict[str, Any]:
    found = [
        element
        for block in blocks
        if block["type"] == "actions"
        for element in block["elements"]
        if element["action_id"] == action_id
    ]
    assert found, f"no {action_id} button; the message has {action_ids(blocks)}"
    return found[0]


def blocks_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(text_objects(blocks))


def input_values(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``view.state.values`` as Slack sends it when the modal is submitted unchanged."""
    return {
        block["block_id"]: {
            "value": {"type": "plain_text_input", "value": block["element"].get("initial_value")}
        }
        for block in view["blocks"]
        if block["type"] == "input"
    }


def full_content_sections(view: dict[str, Any]) -> dict[str, str]:
    """The full-content modal's sections: each bold title with its plain-text chunks joined."""
    sections: dict[str, str] = {}
    title = None
    for block in view["blocks"]:
        text = block.get("text") or {}
        if block["type"] == "section" and text.get("type") == "mrkdwn":
            title = text["text"].strip("*")
            sections[title] = ""
        elif block["type"] == "section" and title is not None:
            sections[title] += text["text"]
    return sections


INJECTED_PAYLOADS = {
    "context": (approval({"amount": 30}), {"context": INJECTION_TEXT}),
    "arg value": (approval({"note": INJECTION_TEXT}), {}),
    "arg name": (approval({INJECTION_TEXT: 1}), {}),
    "nested arg": (approval({"to": {"cc": [INJECTION_TEXT]}}), {}),
    "description": (approval({"amount": 30}, description=INJECTION_TEXT), {}),
    "question": (question(INJECTION_TEXT), {}),
    "choice": (question("Which?", [INJECTION_TEXT, "no"]), {}),
    "draft": (correction(INJECTION_TEXT), {}),
    "instructions": (correction("Hi", INJECTION_TEXT), {}),
    "summary": (escalation(INJECTION_TEXT), {}),
}


def assert_no_raw_injection(node: Any) -> None:
    rendered = json.dumps(node, ensure_ascii=False)
    for raw in INJECTIONS:
        assert raw not in rendered, f"{raw} rendered unescaped"
    assert "&lt;!channel&gt;" in rendered
