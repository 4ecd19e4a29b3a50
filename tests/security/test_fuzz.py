"""Property-based fuzzing of every surface: interactions (block_actions and view_submission),
events and slash commands, with bodies that are signed exactly as Slack signs them (so they
get past the signature check and reach Bolt and the listeners).

The bodies are near-valid (real payloads the stand-in sends for clicks, modal submissions,
thread replies, Home openings and commands, and the example payloads in
tests/fixtures/slack/, with one to four mutations each: a field
deleted, retyped, set to random JSON or to a value that matters here, such as another
handoff's id, a channel, a message ts, an action id, sealed or forged modal metadata) or
random (any JSON, any form fields, any bytes). Every person in them is one who may decide
nothing, so the property is the same for all of them:

- the answer is not a 5xx and shows no traceback;
- nothing in Redis changed (byte for byte), except what a refused request may change: replay
  and event markers, cached Slack answers, App Home bookkeeping, and audit entries
  ``denied`` or ``viewed_full`` appended;
- no decision modal was opened.

Hypothesis runs ``HANDOFF_FUZZ_EXAMPLES`` (2,000) examples per surface, derandomized: the
same examples on every run, so CI is reproducible, and a failure is shrunk to a small body
and printed. No example database is kept. Everything runs in process (the WSGI app of
``handoff serve``), against the real Redis and the stand-in.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.blockkit.replies import PageRequest, encode_page
from bot.queries.listings import ListFilter, ListKind
from handlers.modal_metadata import ModalOrigin, metadata_key, seal
from tests.support import slack_env
from tests.support.fixtures import COMMANDS, EVENTS, INTERACTIVITY, slack_fixtures
from tests.support.security_harness import (
    FORM,
    JSON,
    Answer,
    Fingerprint,
    InProcessBot,
    State,
    capturing,
    changes,
    fingerprint,
    interaction_body,
    no_traceback,
    payload_of,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, OWNER, SlackEnv, wait_for

EXAMPLES = int(os.environ.get("HANDOFF_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

DECIDERS = frozenset({ALICE, BOB, ADMIN, OWNER})
"""Everyone who may decide or administer something in this package: never a fuzzed actor."""
ACTORS = [CAROL, "U0MALLORY", "U0EVE", "W0GUEST"]
"""Who the fuzzed requests come from: people who may decide nothing."""

DECISION_MODALS = frozenset(
    {
        block_ids.REJECT_MODAL,
        block_ids.EDIT_MODAL,
        block_ids.ANSWER_MODAL,
        block_ids.CORRECT_MODAL,
        block_ids.RESOLVE_MODAL,
    }
)
KEYS = [
    "type", "user", "id", "actions", "action_id", "block_id", "value", "container",
    "channel_id", "message_ts", "is_ephemeral", "channel", "view", "callback_id",
    "private_metadata", "state", "values", "selected_option", "trigger_id", "response_url",
    "message", "event", "event_id", "text", "thread_ts", "ts", "subtype", "bot_id", "tab",
    "command", "user_id", "team", "enterprise", "authorizations", "payload", "blocks",
]  # fmt: skip


@dataclass
class World:
    """The fuzzed handoffs and the real requests the fuzzer starts from."""

    ids: list[str]
    clicks: list[dict[str, Any]] = field(default_factory=list)
    submissions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, str]] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    safe_url: str = ""


@pytest.fixture(scope="module")
def world(slack: SlackEnv, store_redis: Redis) -> World:
    """Pending handoffs of every kind for Alice only, and captured requests around them."""
    handoffs = slack.handoffs
    ids = [
        handoffs.request_approval(
            run_id="run-f", thread_id="t", action="issue_refund", args={"amount": 30},
            context="Why: " + "a long story. " * 150, reviewers=[ALICE],
        ).id,
        handoffs.ask(
            run_id="run-f", thread_id="t", question="Region?", choices=["eu", "us"],
            reviewers=[ALICE],
        ).id,
        handoffs.request_correction(
            run_id="run-f", thread_id="t", draft="Dear customer", reviewers=[ALICE]
        ).id,
        handoffs.escalate(run_id="run-f", thread_id="t", summary="Stuck", reviewers=[ALICE]).id,
        handoffs.escalate(run_id="run-f", thread_id="t", summary="Stuck", reviewers=[ALICE]).id,
    ]  # fmt: skip
    messages = [slack.posted(handoff_id) for handoff_id in ids]
    slack.standin.click(ALICE, messages[-1], block_ids.CLAIM)
    wait_for(lambda: block_ids.RESOLVE in json.dumps(_message(slack, ids[-1]).blocks))
    messages[-1] = _message(slack, ids[-1])
    made = World(ids=ids, safe_url=slack.standin.url + "response/forged")

    for message in messages:
        for action_id in _buttons(message.blocks):
            with capturing(slack.standin) as captured:
                slack.standin.click(CAROL, message, action_id)
            made.clicks.append(payload_of(captured[0][1]))
    slack.standin.send_app_home_opened(ALICE)
    home = wait_for(lambda: slack.standin.home(ALICE))
    # The approval's card (the Home may list other pending handoffs of Alice's first).
    [card] = [
        b for b in home.blocks if b.get("type") == "actions" and b["block_id"].endswith(ids[0])
    ]
    with capturing(slack.standin) as captured:
        slack.standin.click(ALICE, home, block_ids.APPROVE, block_id=card["block_id"])
    made.clicks.append(payload_of(captured[0][1]))

    key = metadata_key(slack_env.SIGNING_SECRET)
    for message, action_id, values in [
        (messages[0], block_ids.REJECT, {block_ids.REASON_BLOCK: {block_ids.VALUE: "no"}}),
        (messages[0], block_ids.EDIT, {}),
        (messages[1], block_ids.ANSWER, {block_ids.ANSWER_BLOCK: {block_ids.VALUE: "eu"}}),
        (messages[2], block_ids.CORRECT, {}),
        (messages[4], block_ids.RESOLVE, {block_ids.RESOLUTION_BLOCK: {block_ids.VALUE: "done"}}),
    ]:
        slack.standin.click(ALICE, message, action_id)
        modal = slack.standin.views(ALICE)[-1]
        filled = {**_prefilled(modal.blocks), **values}
        with capturing(slack.standin) as captured:
            slack.standin.submit_view(ALICE, modal, filled)
        submission = payload_of(captured[0][1])
        made.submissions.append(submission)
        opened = json.loads(submission["view"]["private_metadata"])
        for actor in ACTORS[:2]:  # the same modal, as if opened for someone who may not decide
            forged = copy.deepcopy(submission)
            forged["view"]["private_metadata"] = seal(
                key, ModalOrigin(opened["handoff_id"], opened["channel"], actor)
            )
            made.submissions.append(forged)

    with capturing(slack.standin) as captured:
        slack.standin.post_message(CAROL, CHANNEL, "eu please", thread_ts=messages[1].ts)
        slack.standin.post_message(CAROL, CHANNEL, "looks fine", thread_ts=messages[0].ts)
        slack.standin.send_app_home_opened(CAROL)
        for text in [
            "", "help", "list", "list mine", "list pending", f"list <#{CHANNEL}>",
            f"show {ids[0]}", f"cancel {ids[0]} nope", f"expire {ids[1]}", f"retry {ids[2]}",
            f"reassign {ids[3]} <#C0ELSEWHERE> <@{CAROL}>", "stats 7d",
        ]:  # fmt: skip
            slack.standin.send_command(CAROL, "/handoff", text, channel_id=CHANNEL)
    for _, body in captured:
        if body.startswith(b"{"):
            made.events.append(json.loads(body))
        else:
            made.commands.append(dict(parse_qsl(body.decode(), keep_blank_values=True)))
    _add_fixtures(made)

    made.clicks = [_trimmed(payload) for payload in made.clicks]
    made.strings = _strings(made, messages, key)
    wait_quiet(store_redis, slack)
    return made


def _trimmed(payload: dict[str, Any]) -> dict[str, Any]:
    """A click payload without most of the blocks of its message or Home view: nothing reads
    them, and thousands of places to mutate there would only slow the fuzzer down."""
    for holder in (payload.get("message"), payload.get("view")):
        if isinstance(holder, dict) and isinstance(holder.get("blocks"), list):
            blocks = holder["blocks"]
            holder["blocks"] = blocks[:1] + [b for b in blocks if b.get("type") == "actions"][:2]
    return payload


def _message(slack: SlackEnv, handoff_id: str) -> Any:
    refs = slack.handoffs.get(handoff_id).message_refs
    return slack.standin.message(refs["channel"], refs["ts"])


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        element["action_id"]
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("type") == "button"
    ]


def _prefilled(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every input of a modal filled with its initial value (as if submitted unchanged)."""
    filled = {}
    for block in blocks:
        element = block.get("element") or {}
        if block.get("type") == "input" and element.get("initial_value"):
            filled[block["block_id"]] = {element["action_id"]: element["initial_value"]}
    return filled


def _add_fixtures(made: World) -> None:
    """Every example payload in tests/fixtures/slack/ (its people decide nothing here):
    clicks, modal submissions and closings, events (url_verification included), slash
    commands and Slack's ssl_check ping."""
    for payload in slack_fixtures(INTERACTIVITY).values():
        (made.clicks if payload["type"] == "block_actions" else made.submissions).append(payload)
    made.events += slack_fixtures(EVENTS).values()
    made.commands += [
        {k: str(v) for k, v in fields.items()} for fields in slack_fixtures(COMMANDS).values()
    ]


def _strings(made: World, messages: list[Any], key: bytes) -> list[str]:
    """Values that mean something to the bot, to put where the fuzzer changes a string."""
    ids = made.ids
    action_ids = [v for k, v in vars(block_ids).items() if k.isupper() and isinstance(v, str)]
    action_ids += [block_ids.LIST_PREV, block_ids.LIST_NEXT, block_ids.LIST_SHOW]
    strings = [
        *ids,
        "ho_01ZZZZZZZZZZZZZZZZZZZZZZZZ",
        "ho_",
        *{m.channel for m in messages},
        *{m.ts for m in messages},
        "C0ELSEWHERE",
        "D0DIRECT",
        *action_ids,
        "block_actions", "view_submission", "view_closed", "event_callback", "message",
        "app_home_opened", "home", "modal", "view", "url_verification", "block_suggestion",
        "/handoff", "/other", "", " ", "\x00", "\u202e", "null", "true", "0", "-1", "1e309",
        "x" * 3001,
        json.dumps({"handoff_id": ids[0]}),
        json.dumps({"handoff_id": ids[0], "channel": CHANNEL, "user": CAROL}),
        json.dumps({"handoff_id": ids[0], "channel": CHANNEL, "user": CAROL, "seal": "0" * 32}),
        seal(key, ModalOrigin(ids[1], CHANNEL, "U0MALLORY")),
        seal(key, ModalOrigin(ids[0], None, CAROL)),
        "[1, 2]",
        "{" * 50,
        encode_page(PageRequest(ListFilter(ListKind.PENDING))),
        encode_page(PageRequest(ListFilter(ListKind.MINE), after=ids[0])),
        f"cancel {ids[0]}",
        f"show {ids[1]}",
        f"reassign {ids[2]} <@{CAROL}>",
        *ACTORS,
    ]  # fmt: skip
    return [s for s in strings if s not in DECIDERS]


# -- strategies -------------------------------------------------------------------------------

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=30),
)
JSON_VALUES = st.one_of(
    LEAVES,
    st.lists(LEAVES, max_size=3),
    st.dictionaries(st.text(max_size=10), LEAVES, max_size=3),
    st.lists(st.dictionaries(st.sampled_from(["id", "type", "value"]), LEAVES), max_size=2),
)
"""Any JSON value up to two levels deep (deeper structures add cost, not coverage: the
gate refuses every wrong type at the first level it checks)."""


def _slots(node: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) of every value inside ``node``."""
    if depth > 8:
        return
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in list(items):
        yield node, key
        yield from _slots(value, depth + 1)


OPERATIONS = ("set", "meaningful", "delete", "add", "retype")
MUTATION_COUNTS = (1, 1, 1, 2, 2, 3, 4)
"""How many mutations a near-valid body gets: mostly one, so that most still reach the
listeners rather than the gate's shape check."""


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]], strings: list[str]) -> dict[str, Any]:
    """A copy of one of ``bases`` with one to four mutations."""
    payload = copy.deepcopy(bases[draw(st.integers(0, len(bases) - 1))])
    for _ in range(MUTATION_COUNTS[draw(st.integers(0, len(MUTATION_COUNTS) - 1))]):
        slots = list(_slots(payload))
        if not slots:
            break
        # Indexes rather than sampled_from: cheaper to draw from a list made afresh.
        container, key = slots[draw(st.integers(0, len(slots) - 1))]
        operation = OPERATIONS[draw(st.integers(0, len(OPERATIONS) - 1))]
        meaningful = strings[draw(st.integers(0, len(strings) - 1))]
        if operation == "set":
            container[key] = draw(JSON_VALUES)
        elif operation == "meaningful":
            container[key] = meaningful
        elif operation == "delete":
            del container[key]
        elif operation == "add" and isinstance(container, dict):
            added = KEYS[draw(st.integers(0, len(KEYS) - 1))]
            container[added] = meaningful if draw(st.booleans()) else draw(JSON_VALUES)
        elif operation == "retype":
            value = container[key]
            container[key] = draw(
                st.sampled_from([[value], {"id": value}, str(value), 0, None, {}, []])
            )
    return payload


def random_payload() -> st.SearchStrategy[Any]:
    """Any JSON value; as often, an object with keys the bot reads."""
    known = st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=6)
    return st.one_of(JSON_VALUES, known)


# -- sending and checking -------------------------------------------------------------------


def _neutralised(node: Any, safe_url: str) -> Any:
    """``node`` with every actor who may decide replaced by one who may not, and every URL
    pointed at the stand-in: the bot posts replies to a payload's ``response_url``, and
    fuzzed requests must never make it contact anything but this machine."""
    if isinstance(node, dict):
        return {k: _neutralised(v, safe_url) for k, v in node.items()}
    if isinstance(node, list):
        return [_neutralised(v, safe_url) for v in node]
    if isinstance(node, str):
        if node in DECIDERS:
            return CAROL
        if "://" in node and not node.startswith(safe_url.rsplit("response/", 1)[0]):
            return safe_url
    return node


@dataclass
class Checker:
    """Sends fuzzed requests and checks the property after each one."""

    bot: InProcessBot
    redis: Redis
    slack: SlackEnv
    world: World
    baseline: State | None = None
    last: Fingerprint | None = None
    sent: int = 0

    def send(self, body: bytes, content_type: str) -> None:
        if self.last is None:
            self.baseline = snapshot(self.redis, with_allowed=False)
            self.last = fingerprint(self.redis)
        answer = self.bot.post(body, content_type=content_type)
        self.sent += 1
        self.check(answer, body)

    def check(self, answer: Answer, body: bytes) -> None:
        assert answer.status < 500, f"{answer.status} for {body[:2000]!r}"
        assert no_traceback(answer.text), answer.text
        now = fingerprint(self.redis)
        assert self.last is not None and self.baseline is not None
        if now.digest != self.last.digest:
            found = changes(self.baseline, snapshot(self.redis, with_allowed=False), self.redis)
            raise AssertionError(f"{found or 'state changed'} after {body[:2000]!r}")
        found = changes(self.last.audits, now.audits, self.redis)
        assert not found, f"{found} after {body[:2000]!r}"
        self.last = now
        if self.sent % 200 == 0:  # replay markers are allowed; keep the database small
            markers = self.redis.keys("{ho}:bot:request:*")
            if markers:
                self.redis.delete(*markers)

    def modals_opened(self) -> set[str]:
        return {
            str(call.params.get("view", {}).get("callback_id"))
            for call in self.slack.standin.calls("views.open")
            if isinstance(call.params.get("view"), dict)
        }


@pytest.fixture(scope="module")
def checker(
    bot: InProcessBot, store_redis: Redis, slack: SlackEnv, world: World
) -> Iterator[Checker]:
    checking = Checker(bot, store_redis, slack, world)
    modals_before = checking.modals_opened()
    yield checking
    assert not (checking.modals_opened() - modals_before) & DECISION_MODALS


def _interaction_bodies(world: World) -> st.SearchStrategy[tuple[bytes, str]]:
    bases = world.clicks + world.submissions
    near_valid = mutated(bases, world.strings)
    payloads = st.one_of(near_valid, near_valid, near_valid, random_payload())
    encoded = payloads.map(lambda p: _neutralised(p, world.safe_url))
    as_form = encoded.map(lambda p: (interaction_body(p), FORM))
    as_json = encoded.map(lambda p: (json.dumps(p).encode(), JSON))
    raw = st.binary(max_size=200).map(lambda b: (b"payload=" + b, FORM))
    return st.one_of(as_form, as_form, as_form, as_form, as_json, raw)


_EVENT_NUMBERS = itertools.count()


def _as_a_new_event(payload: Any) -> Any:
    """``payload`` with its event_id, if it has one, made unique: the gate lets an event_id
    through once, and each example must reach the listeners as a new event."""
    if isinstance(payload, dict) and isinstance(payload.get("event_id"), str):
        payload["event_id"] += f"-{next(_EVENT_NUMBERS)}"
    return payload


def _event_bodies(world: World) -> st.SearchStrategy[tuple[bytes, str]]:
    near_valid = mutated(world.events, world.strings)
    payloads = st.one_of(near_valid, near_valid, near_valid, random_payload())
    encoded = payloads.map(lambda p: _as_a_new_event(_neutralised(p, world.safe_url)))
    as_json = encoded.map(lambda p: (json.dumps(p).encode(), JSON))
    raw = st.binary(max_size=200).map(lambda b: (b, JSON))
    return st.one_of(as_json, as_json, as_json, as_json, as_json, raw)


@st.composite
def _command_fields(draw: st.DrawFn, world: World) -> dict[str, str]:
    fields = dict(draw(st.sampled_from(world.commands)))
    words = st.sampled_from(
        ["help", "list", "mine", "pending", "show", "cancel", "expire", "retry", "reassign",
         "stats", "run", "type", "approval", "7d", "0h", "9999w", f"<#{CHANNEL}>", "<@U0EVE>",
         "<!subteam^S0X>", "#general", "payload", *world.ids]
    )  # fmt: skip
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        operation = draw(st.sampled_from(["text", "words", "set", "delete", "add"]))
        if operation == "text":
            fields["text"] = draw(st.text(max_size=60))
        elif operation == "words":
            fields["text"] = " ".join(draw(st.lists(words, max_size=5)))
        elif operation == "set" and fields:
            fields[draw(st.sampled_from(sorted(fields)))] = draw(
                st.one_of(st.text(max_size=30), st.sampled_from(world.strings))
            )
        elif operation == "delete" and fields:
            del fields[draw(st.sampled_from(sorted(fields)))]
        elif operation == "add":
            fields[draw(st.sampled_from(KEYS))] = draw(st.text(max_size=30))
    return _neutralised(fields, world.safe_url)  # type: ignore[no-any-return]


def _command_bodies(world: World) -> st.SearchStrategy[tuple[bytes, str]]:
    form = _command_fields(world).map(lambda f: (urlencode(f).encode(), FORM))
    raw = st.binary(max_size=200).map(lambda b: (b, FORM))
    return st.one_of(form, form, form, form, form, raw)


# -- the properties -------------------------------------------------------------------------------


def test_fuzzed_interactions_never_fail_leak_or_change_anything(
    world: World, checker: Checker
) -> None:
    @FUZZ
    @given(body=_interaction_bodies(world))
    def property(body: tuple[bytes, str]) -> None:
        checker.send(*body)

    property()


def test_fuzzed_events_never_fail_leak_or_change_anything(world: World, checker: Checker) -> None:
    @FUZZ
    @given(body=_event_bodies(world))
    def property(body: tuple[bytes, str]) -> None:
        checker.send(*body)

    property()


def test_fuzzed_commands_never_fail_leak_or_change_anything(world: World, checker: Checker) -> None:
    @FUZZ
    @given(body=_command_bodies(world))
    def property(body: tuple[bytes, str]) -> None:
        checker.send(*body)

    property()
