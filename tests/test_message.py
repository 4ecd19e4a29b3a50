"""Block Kit rendering of handoffs: every message and modal fits Slack's limits, agent text
cannot ping anyone, long payloads stay reachable, and each state shows the right buttons."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.blockkit import message as message_view
from bot.blockkit.ids import (
    ANSWER,
    APPROVE,
    CLAIM,
    CORRECT,
    EDIT,
    REJECT,
    RESOLVE,
    VIEW_FULL,
    arg_block_id,
    handoff_id_from_view,
)
from bot.blockkit.limits import MESSAGE_TEXT_BUDGET
from bot.blockkit.message import already_decided_text, outcome_text, render_message
from bot.blockkit.modals import (
    render_answer_modal,
    render_correction_modal,
    render_edit_modal,
    render_full_content_modal,
    render_reject_modal,
    render_resolve_modal,
)
from handlers.modal_inputs import parse_corrected_draft
from store import defaults
from store.models import ALLOWED_OUTCOMES, Handoff, RequestType, ResumeData, Status
from worker.client import Handoffs

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


# -- building handoffs --------------------------------------------------------------------


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


def decision(outcome: Status, by: str = "U1", **fields: Any) -> ResumeData:
    return ResumeData(decision_id="d-1", outcome=outcome, decided_by=by, **fields)


# -- generated payloads -------------------------------------------------------------------

# Pieces agent text is made of: unicode, emoji (with joiners and flags), mrkdwn control
# characters, mentions and links, and every kind of line break.
_PIECES = (
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
_EDGE_SIZES = (1, 75, 80, 150, 299, 300, 301, 500, 1000, 1500, 1501, 2500, 2501, 2900, 3000, 3001)


_piece = st.sampled_from(_PIECES)
_TEXT_UNITS = st.one_of(
    _piece,
    st.tuples(_piece, _piece, st.text(max_size=2), _piece).map("".join),
    # Logs, lists and CSV: many short lines, which quoting (">" per line) makes longer.
    st.sampled_from(["\n", "x\n", "\r\n", "1,2\n", "- item\n"]),
)


@st.composite
def agent_texts(draw: st.DrawFn, *, min_size: int = 0, max_size: int = 60_000) -> str:
    """Text of 0..60,000 characters: a short random pattern repeated to a chosen length
    (cheap to generate, and it reaches the long sizes plain ``st.text`` never does)."""
    unit = draw(_TEXT_UNITS)
    edges = [size for size in _EDGE_SIZES if min_size <= size <= max_size]
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


# -- what "within Slack's limits" means -----------------------------------------------------


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


# -- every renderer stays within Slack's limits ---------------------------------------------


@PROPERTY
@given(handoff=handoffs_in_any_state())
def test_every_message_passes_slack_validation_and_our_limits(handoff: Handoff) -> None:
    assert_message_within_limits(render_message(handoff, now=CREATED))


@PROPERTY
@given(handoff=handoffs_in_any_state())
def test_every_full_content_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_full_content_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs())
def test_every_reject_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_reject_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.APPROVAL,)))
def test_every_edit_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_edit_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.QUESTION,)))
def test_every_answer_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_answer_modal(handoff), handoff)


@PROPERTY
@given(handoff=pending_handoffs((RequestType.CORRECTION,)))
def test_every_correction_modal_fits_a_modal_and_gives_the_draft_back(handoff: Handoff) -> None:
    view = render_correction_modal(handoff)

    assert_modal_within_limits(view, handoff)
    assert parse_corrected_draft(input_values(view)) == handoff.payload.draft  # type: ignore[union-attr]


@PROPERTY
@given(handoff=pending_handoffs((RequestType.ESCALATION,)))
def test_every_resolve_modal_fits_a_modal(handoff: Handoff) -> None:
    assert_modal_within_limits(render_resolve_modal(handoff), handoff)


@pytest.mark.parametrize("lines", [1500, 2500])
def test_context_of_many_short_lines_still_fits_a_section(lines: int) -> None:
    # Quoting adds a ">" to every line, after the text was shortened to fit.
    handoff = make_handoff(correction("x\n" * lines), context="\n" * lines)

    assert_message_within_limits(render_message(handoff))


def test_full_content_modal_of_a_nested_payload_the_store_accepts_stays_under_250_kb(
    handoffs: Handoffs,
) -> None:
    # About 60 KB as the store measures it; indented JSON in the modal is several times that.
    args = {"rows": [[[0] * 30_000]]}
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="bulk_update", args=args
    )

    view = render_full_content_modal(handoff)

    assert store_payload_bytes(handoff) <= defaults.MAX_PAYLOAD_BYTES
    assert view_bytes(view) < MODAL_MAX_BYTES


# -- agent text cannot ping or inject ------------------------------------------------------

_INJECTED_PAYLOADS = {
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


@pytest.mark.parametrize("where", list(_INJECTED_PAYLOADS))
def test_mentions_and_links_in_agent_text_render_escaped_in_the_message(where: str) -> None:
    payload, fields = _INJECTED_PAYLOADS[where]

    message = render_message(make_handoff(payload, **fields))

    assert_no_raw_injection(message.blocks)


@pytest.mark.parametrize("where", ["context", "arg value", "description", "choice", "summary"])
def test_mentions_and_links_in_agent_text_render_escaped_in_the_full_content_modal(
    where: str,
) -> None:
    # The modal shows agent text as plain_text, which Slack never parses for mentions.
    payload, fields = _INJECTED_PAYLOADS[where]

    view = render_full_content_modal(make_handoff(payload, **fields))

    for text in text_objects(view["blocks"], "mrkdwn"):
        assert not any(raw in text for raw in INJECTIONS)
    assert any("<!channel>" in text for text in text_objects(view["blocks"], "plain_text"))


@pytest.mark.parametrize(
    ("render", "payload"),
    [
        (render_answer_modal, question(INJECTION_TEXT)),
        (render_correction_modal, correction("Hi", INJECTION_TEXT)),
        (render_resolve_modal, escalation(INJECTION_TEXT)),
        (render_edit_modal, approval({"a": 1}, name=INJECTION_TEXT)),
        (render_reject_modal, approval({"a": 1}, name=INJECTION_TEXT)),
    ],
)
def test_mentions_and_links_in_agent_text_render_escaped_in_modals(
    render: Any, payload: dict[str, Any]
) -> None:
    view = render(make_handoff(payload))

    for text in text_objects(view["blocks"], "mrkdwn"):
        assert not any(raw in text for raw in INJECTIONS), text


def test_reasons_and_answers_in_the_outcome_render_escaped() -> None:
    handoff = make_handoff(
        question("Which?"),
        status=Status.ANSWERED,
        resume_data=decision(Status.ANSWERED, answer=INJECTION_TEXT, comment=INJECTION_TEXT),
    )

    assert_no_raw_injection(render_message(handoff).blocks)


def test_an_action_name_cannot_inject_into_the_approve_confirmation() -> None:
    # The confirm dialog's text is mrkdwn, so the action name must be escaped there too.
    handoff = make_handoff(approval({"a": 1}, name=INJECTION_TEXT))

    confirm = button(render_message(handoff).blocks, APPROVE)["confirm"]

    assert confirm["text"]["type"] != "mrkdwn" or not any(
        raw in confirm["text"]["text"] for raw in INJECTIONS
    )


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        (approval({"a": 1}, name="<!channel> refund"), {}),
        (question("Which?"), {"agent_name": "<!channel> bot <@U123>"}),
    ],
)
def test_message_fallback_text_cannot_ping(payload: dict[str, Any], fields: dict[str, Any]) -> None:
    # chat.postMessage's `text` is what notifications show, and Slack parses mentions in it.
    message = render_message(make_handoff(payload, **fields))

    assert not any(raw in message.text for raw in INJECTIONS)


# -- long payloads stay reachable ----------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "context"),
    [
        (approval({"amount": 30}), "Customer was double charged. " * 100),
        (approval({"body": "x" * 1000}), ""),
        (approval({f"arg_{i}": i for i in range(15)}), ""),
        (approval({"items": list(range(500))}), ""),
        (question("Which? " * 600), ""),
        (correction("Dear customer " * 300), ""),
        (escalation("Details. " * 400), ""),
        # The message lists ten choices, each cut at 150 characters (75 in the answer modal).
        (question("Which?", [f"option {i}" for i in range(15)]), ""),
        (question("Which?", ["short", "a long choice " * 20]), ""),
    ],
    ids=[
        "long context",
        "long arg",
        "many args",
        "long list arg",
        "question",
        "draft",
        "summary",
        "many choices",
        "long choice",
    ],
)
def test_a_shortened_message_offers_view_full(payload: dict[str, Any], context: str) -> None:
    for handoff in (
        make_handoff(payload, context=context),
        make_handoff(
            payload,
            context=context,
            status=Status.REJECTED,
            resume_data=decision(Status.REJECTED, comment="no"),
        ),
    ):
        blocks = render_message(handoff).blocks

        assert button(blocks, VIEW_FULL)["value"] == HANDOFF_ID


@pytest.mark.parametrize(
    "payload",
    [
        approval({"amount": 30, "currency": "EUR"}),
        approval({f"arg_{i}": i for i in range(10)}),
        question("Which plan?", ["basic", "pro"]),
        correction("Dear customer,", "be polite"),
        escalation(),
    ],
)
def test_a_short_message_has_no_view_full_button(payload: dict[str, Any]) -> None:
    blocks = render_message(make_handoff(payload, context="Customer was double charged")).blocks

    assert VIEW_FULL not in action_ids(blocks)


def test_the_full_content_modal_shows_a_50_kb_context_in_full() -> None:
    context = ("Ünïcödé 🙂 <!channel> & line\n" * 2000)[:50_000]
    handoff = make_handoff(escalation("Summary"), context=context)

    view = render_full_content_modal(handoff)

    assert full_content_sections(view)["Why"] == context
    assert_modal_within_limits(view, handoff)


def test_the_full_content_modal_shows_50_kb_of_arguments_in_full(handoffs: Handoffs) -> None:
    args = {f"field_{i}": f"value {i} " * 20 for i in range(250)}
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="bulk_update", args=args
    )
    assert len(json.dumps(args)) > 50_000

    view = render_full_content_modal(handoff)

    assert json.loads(full_content_sections(view)["Arguments"]) == args
    assert_modal_within_limits(view, handoff)


def test_the_full_content_modal_shows_every_choice() -> None:
    choices = [f"Option {i}: " + "detail " * 40 for i in range(150)]
    handoff = make_handoff(question("Which?", choices))

    sections = full_content_sections(render_full_content_modal(handoff))

    assert sections["Choices"] == "\n".join(f"- {choice}" for choice in choices)


# -- buttons and outcomes per state --------------------------------------------------------


def test_a_pending_approval_has_approve_with_a_confirm_dialog_reject_and_edit(
    handoffs: Handoffs,
) -> None:
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", args={"amount": 30}
    )

    blocks = render_message(handoff).blocks

    assert action_ids(blocks) == [APPROVE, REJECT, EDIT]
    approve = button(blocks, APPROVE)
    assert approve["value"] == handoff.id
    assert approve["confirm"]["confirm"]["text"] == "Approve"
    assert "issue_refund" in approve["confirm"]["text"]["text"]
    assert all(button(blocks, a)["value"] == handoff.id for a in (REJECT, EDIT))


def test_a_pending_question_has_an_answer_button(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="run-1", thread_id="t-1", question="Which plan?")

    blocks = render_message(handoff).blocks

    assert action_ids(blocks) == [ANSWER]
    assert button(blocks, ANSWER)["value"] == handoff.id


def test_a_pending_correction_has_correct_and_reject_buttons(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Dear customer")

    assert action_ids(render_message(handoff).blocks) == [CORRECT, REJECT]


def test_an_escalation_is_claimed_first_then_resolved_or_sent_back(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(run_id="run-1", thread_id="t-1", summary="Legal threat")

    unclaimed = render_message(handoff).blocks
    claimed = render_message(handoffs.claim(handoff.id, by="U2")).blocks

    assert action_ids(unclaimed) == [CLAIM]
    assert "Claimed by" not in blocks_text(unclaimed)
    assert action_ids(claimed) == [RESOLVE, REJECT]
    assert "Claimed by <@U2>" in blocks_text(claimed)


def test_decided_messages_keep_only_the_view_full_button() -> None:
    long_context = "Long story. " * 300
    for payload in (approval({"a": 1}), question(), correction(), escalation()):
        for context in ("short", long_context):
            handoff = make_handoff(
                payload,
                context=context,
                status=Status.REJECTED,
                resume_data=decision(Status.REJECTED),
                claimed_by="U7",
            )

            assert set(action_ids(render_message(handoff).blocks)) <= {VIEW_FULL}


def test_an_approval_shows_who_approved_and_with_which_edited_arguments(
    handoffs: Handoffs,
) -> None:
    handoff = handoffs.request_approval(
        run_id="run-1", thread_id="t-1", action="issue_refund", args={"amount": 30}
    )
    decided = handoffs.decide(handoff.id, "approved", by="U1", edited_args={"amount": 25})

    text = blocks_text(render_message(decided).blocks)

    assert "*Approved* by <@U1>" in text
    assert '*With edited arguments:* `{"amount": 25}`' in text
    assert render_message(decided).text.endswith("[approved]")


def test_a_rejection_shows_who_rejected_and_why(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Hi")
    decided = handoffs.decide(handoff.id, "rejected", by="U1", comment="Wrong customer")

    text = blocks_text(render_message(decided).blocks)

    assert "*Rejected* by <@U1>" in text
    assert "*Reason:* Wrong customer" in text


def test_an_answer_shows_who_answered_and_the_answer(handoffs: Handoffs) -> None:
    handoff = handoffs.ask(run_id="run-1", thread_id="t-1", question="Which plan?")
    decided = handoffs.decide(handoff.id, "answered", by="U1", answer="The pro plan")

    text = outcome_text(decided)

    assert "*Answered* by <@U1>" in text
    assert "*Answer:* The pro plan" in text


def test_a_correction_shows_the_corrected_draft(handoffs: Handoffs) -> None:
    handoff = handoffs.request_correction(run_id="run-1", thread_id="t-1", draft="Hi")
    decided = handoffs.decide(handoff.id, "approved", by="U1", corrected_draft="Hello there")

    assert "*Corrected draft:*\n>Hello there" in outcome_text(decided)


def test_a_resolved_escalation_says_resolved_by_the_claimer(handoffs: Handoffs) -> None:
    handoff = handoffs.escalate(run_id="run-1", thread_id="t-1", summary="Legal threat")
    handoffs.claim(handoff.id, by="U2")
    decided = handoffs.decide(handoff.id, "answered", by="U2", answer="Called them back")

    blocks = render_message(decided).blocks

    assert "*Resolved* by <@U2>" in blocks_text(blocks)
    assert "Claimed by" not in blocks_text(blocks)
    assert action_ids(blocks) == []


def test_expired_and_cancelled_handoffs_say_so() -> None:
    expired = make_handoff(
        question(), status=Status.EXPIRED, resume_data=decision(Status.EXPIRED, by="system")
    )
    cancelled = make_handoff(
        question(),
        status=Status.CANCELLED,
        resume_data=decision(Status.CANCELLED, by="agent", comment="no longer needed"),
    )

    assert "*Expired*" in outcome_text(expired)
    assert "*Cancelled* by agent" in outcome_text(cancelled)
    assert "*Reason:* no longer needed" in outcome_text(cancelled)


@pytest.mark.parametrize(
    ("seconds", "ago"),
    [
        (2, "just now"),
        (30, "30 seconds ago"),
        (60, "1 minute ago"),
        (150, "2 minutes ago"),
        (7200, "2 hours ago"),
        (3 * 86400, "3 days ago"),
    ],
)
def test_a_late_reviewer_is_told_who_decided_and_when(seconds: int, ago: str) -> None:
    handoff = make_handoff(
        approval({"a": 1}), status=Status.APPROVED, resume_data=decision(Status.APPROVED)
    )
    assert handoff.decided_at is not None

    text = already_decided_text(handoff, now=handoff.decided_at + timedelta(seconds=seconds))

    assert text == f"Already approved by <@U1> {ago}."


def test_a_late_reviewer_of_an_expired_handoff_is_told_it_expired() -> None:
    handoff = make_handoff(
        question(), status=Status.EXPIRED, resume_data=decision(Status.EXPIRED, by="system")
    )
    assert handoff.decided_at is not None

    text = already_decided_text(handoff, now=handoff.decided_at + timedelta(minutes=2))

    assert text == "This request expired 2 minutes ago; nothing was changed."


# -- the edit modal --------------------------------------------------------------------------


def test_the_edit_modal_has_one_prefilled_input_per_argument() -> None:
    args = {
        "amount": 30,
        "price": 12.5,
        "notify": True,
        "note": "refund for order 42",
        "code": "42",
        "tags": ["a", "b"],
        "address": {"city": "Zürich"},
        "coupon": None,
    }
    view = render_edit_modal(make_handoff(approval(args)))

    inputs = {block["block_id"]: block for block in view["blocks"] if block["type"] == "input"}

    assert set(inputs) == {arg_block_id(name) for name in args}
    prefilled = {name: inputs[arg_block_id(name)]["element"]["initial_value"] for name in args}
    assert prefilled == {
        "amount": "30",
        "price": "12.5",
        "notify": "true",
        "note": "refund for order 42",
        "code": "42",
        "tags": '["a", "b"]',
        "address": '{"city": "Zürich"}',
        "coupon": "null",
    }
    assert all(inputs[arg_block_id(name)]["label"]["text"] == name for name in args)


def test_the_edit_modal_requires_exactly_the_schema_required_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["amount"],
    }
    view = render_edit_modal(
        make_handoff(approval({"amount": 30, "note": "x"}, args_schema=schema))
    )

    inputs = {block["block_id"]: block for block in view["blocks"] if block["type"] == "input"}

    assert inputs[arg_block_id("amount")].get("optional", False) is False
    assert inputs[arg_block_id("note")]["optional"] is True


def test_an_argument_too_long_to_edit_is_shown_as_kept_as_sent() -> None:
    args = {"body": "x" * 3001, "items": list(range(1000)), "amount": 30}
    view = render_edit_modal(make_handoff(approval(args)))

    input_ids = [block["block_id"] for block in view["blocks"] if block["type"] == "input"]
    notes = [t for t in text_objects(view["blocks"], "mrkdwn") if "too long to edit" in t]

    assert input_ids == [arg_block_id("amount")]
    assert len(notes) == 2
    assert "*body*" in notes[0]
    assert "*items*" in notes[1]


def test_an_argument_of_exactly_3000_characters_is_still_editable() -> None:
    view = render_edit_modal(make_handoff(approval({"body": "x" * 3000})))

    (block,) = [block for block in view["blocks"] if block["type"] == "input"]

    assert block["element"]["initial_value"] == "x" * 3000


# -- the correction modal --------------------------------------------------------------------


def test_a_short_draft_is_one_required_input() -> None:
    view = render_correction_modal(make_handoff(correction("Dear customer,")))

    (block,) = [block for block in view["blocks"] if block["type"] == "input"]

    assert block["element"]["initial_value"] == "Dear customer,"
    assert block.get("optional", False) is False


@pytest.mark.parametrize("size", [3001, 6000, 9500, 50_000])
def test_a_long_draft_is_split_into_parts_that_join_back_to_the_original(size: int) -> None:
    draft = ("Ünïcödé draft 🙂 line\n" * 3000)[:size]
    handoff = make_handoff(correction(draft, "Fix the tone"))

    view = render_correction_modal(handoff)
    inputs = [block for block in view["blocks"] if block["type"] == "input"]

    assert len(inputs) == -(-size // 3000)
    assert all(len(block["element"]["initial_value"]) <= 3000 for block in inputs)
    assert parse_corrected_draft(input_values(view)) == draft
    assert_modal_within_limits(view, handoff)


def test_every_modal_keeps_the_handoff_id_in_private_metadata() -> None:
    rendered = [
        (render_reject_modal, approval({"a": 1})),
        (render_edit_modal, approval({"a": 1})),
        (render_answer_modal, question("Which?", ["a", "b"])),
        (render_correction_modal, correction()),
        (render_resolve_modal, escalation()),
        (render_full_content_modal, escalation()),
    ]
    for render, payload in rendered:
        view = render(make_handoff(payload))

        assert handoff_id_from_view(view) == HANDOFF_ID


def test_the_answer_modal_offers_at_most_100_choices_by_index() -> None:
    choices = [f"choice {i} " + "x" * 100 for i in range(150)]
    view = render_answer_modal(make_handoff(question("Which?", choices)))

    (select,) = [obj for obj in dicts_in(view) if obj.get("type") == "static_select"]

    assert [option["value"] for option in select["options"]] == [str(i) for i in range(100)]
    assert select["options"][3]["text"]["text"].startswith("choice 3 ")


@pytest.mark.parametrize("metadata", [None, "", "not json", "[]", '{"other": 1}'])
def test_a_view_not_opened_for_a_handoff_has_no_handoff_id(metadata: str | None) -> None:
    assert handoff_id_from_view({"private_metadata": metadata}) is None
