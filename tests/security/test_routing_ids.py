"""The routing fields of a handoff (``channel``, ``reviewers``, ``escalate_to``, and the
``requester``) can never ping a channel or slip a link into Slack.

They are posted to and mentioned (``<#C…>``, ``<@U…>``, ``<!subteam^S…>``), so an agent that
sends ``S1> <!channel> <https://evil|Approve>`` as its escalation target must be refused,
and a record stored before the check must still render as escaped text. Two properties,
over any text in those fields (hypothesis, derandomized, a modest number of examples):

- creation through ``Handoffs`` is refused, saying what a Slack id looks like, unless every
  routing field is an id; a handoff that is created is posted by the real worker to the
  Slack stand-in, reminded and escalated, and nothing it posted holds ``<!channel>``,
  ``<!here>``, ``<!everyone>``, a link, or any ``<…>`` token but a mention of an id and a date;
- a handoff stored with any text in those fields (read through the stored model, which
  checks nothing) renders the same way on every surface: the channel message, reminders,
  the moved notice, ``list``, ``show``, the App Home, ``stats`` and the refusal text.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.blockkit.home import render_home
from bot.blockkit.message import reminder_text, render_message, render_moved
from bot.blockkit.replies import render_detail, render_listing, render_stats
from bot.queries.listings import ListFilter, Listing, ListKind
from bot.queries.stats import Stats
from store.exceptions import InvalidHandoffRequest
from store.keys import KeySpace
from store.models import Handoff, Status
from tests.support.blockkit import CREATED, approval, make_handoff
from tests.support.slack_env import SlackEnv, wait_for

ROUTING = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# The shapes of Slack ids, written out here rather than imported: the test states the rule.
_ID = r"[A-Z0-9]{2,31}"
CHANNEL_ID = re.compile(rf"[CGD]{_ID}")
USER_ID = re.compile(rf"[UW]{_ID}")
GROUP_ID = re.compile(rf"S{_ID}")

FORBIDDEN = ("<!channel", "<!here", "<!everyone", "<http", "<mailto")
ALLOWED_TOKEN = re.compile(
    rf"<(?:@[UW]{_ID}|#[CGD]{_ID}|!subteam\^S{_ID}|!date\^\d+\^[^|<>]*\|[^<>]*)>"
)
"""The only ``<…>`` tokens the bot may write: mentions of ids, and dates."""

PIECES = (
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<https://evil.example|Approve>",
    "<http://x|y>",
    "<mailto:a@b.c|mail>",
    "<@U0ALICE>",
    "<#C0OPS>",
    "<!subteam^S0OPS>",
    "S1",
    "C0",
    "U0ALICE",
    "<",
    ">",
    "|",
    "&",
    "^",
    " ",
    "\n",
    "é",
)
"""What a hostile routing field is made of."""

_channel_ids = st.from_regex(CHANNEL_ID, fullmatch=True)
_user_ids = st.from_regex(USER_ID, fullmatch=True)
_group_ids = st.from_regex(GROUP_ID, fullmatch=True)
_anything = st.one_of(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=5).map("".join),
    st.text(max_size=40),
    # An id's first letter and anything: too short, lowercase, other scripts' letters.
    st.builds(str.__add__, st.sampled_from("UWSCGD"), st.text(max_size=4)),
    _channel_ids,  # an id, of the wrong kind for some fields
    _user_ids,
    _group_ids,
)
"""Any text: hostile, random, nearly an id, or an id of any kind."""


def _often(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Two times in three an id of the right kind, else anything (one_of would flatten the
    # branches of _anything into its own, and pick the right kind far less often).
    return st.sampled_from((True, True, False)).flatmap(lambda right: valid if right else _anything)


@st.composite
def routing_fields(draw: st.DrawFn, *, ids_often: bool = True) -> dict[str, Any]:
    """Any text in each routing field; with ``ids_often``, an id of the right kind two
    times in three (so that about a third of the requests are created, and posted)."""

    def field(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return _often(valid) if ids_often else valid | _anything

    return {
        "channel": draw(st.none() | field(_channel_ids | _user_ids)),
        "reviewers": draw(st.lists(field(_user_ids | _group_ids), max_size=3)),
        "escalate_to": draw(st.none() | field(_channel_ids | _group_ids)),
        "requester": draw(st.none() | field(_user_ids)),
    }


def _all_ids(routing: dict[str, Any]) -> bool:
    """Whether a request with these fields should be created: every field holds an id of
    its kind (an empty channel is the client's default channel; a requester is any name)."""
    channel, target = routing["channel"], routing["escalate_to"]
    return (
        # A person's id is a destination too: the handoff is posted in their DM.
        (not channel or bool(CHANNEL_ID.fullmatch(channel) or USER_ID.fullmatch(channel)))
        and all(USER_ID.fullmatch(r) or GROUP_ID.fullmatch(r) for r in routing["reviewers"])
        and (target is None or bool(CHANNEL_ID.fullmatch(target) or GROUP_ID.fullmatch(target)))
    )


def assert_no_injection(where: str, *rendered: Any) -> None:
    """Nothing in ``rendered`` (texts, blocks, views) pings a channel or links anywhere,
    and every ``<…>`` token in it is a mention of an id or a date."""
    text = json.dumps(rendered, ensure_ascii=False)
    for forbidden in FORBIDDEN:
        assert forbidden not in text, f"{forbidden} in {where}: {text[:2000]}"
    leftover = ALLOWED_TOKEN.sub("", text)
    assert "<" not in leftover, f"a raw < in {where}: {leftover[:2000]}"


# -- created through the agent API and posted by the real worker --------------------------


def _posted_messages(slack: SlackEnv, handoff: Handoff) -> list[Any]:
    """Every message posted for ``handoff``: its message, its copies, and their threads."""
    refs = handoff.message_refs
    places = [(refs["channel"], refs["ts"])]
    places += [(copy["channel"], copy["ts"]) for copy in refs.get("copies", [])]
    found = []
    for channel, ts in places:
        found.append(slack.standin.message(channel, ts))
        found.extend(slack.standin.thread(channel, ts))
    return found


def _settled(slack: SlackEnv, handoff_id: str, *, escalates: bool) -> Handoff:
    """The handoff once posted, reminded once and (when it has a target) escalated."""

    def done() -> Handoff | None:
        handoff = slack.handoffs.get(handoff_id)
        posted = handoff.message_refs.get("ts") and handoff.reminders_sent >= 1
        return handoff if posted and (handoff.escalated_at or not escalates) else None

    settled = wait_for(done, timeout=20)
    assert isinstance(settled, Handoff)
    return settled


@settings(ROUTING, max_examples=50)
@given(routing=routing_fields())
def test_a_handoff_is_refused_unless_routed_to_ids_and_posts_no_mention_or_link(
    slack: SlackEnv, routing: dict[str, Any]
) -> None:
    options: dict[str, Any] = {k: v for k, v in routing.items() if v is not None}
    options.update(remind_after=0.05, max_reminders=1)
    # A private channel takes the bot's posts only once it was invited there, as in Slack;
    # a person's DM only if they are a member (the others end undeliverable: no post).
    for channel in (routing["channel"], routing["escalate_to"]):
        if channel and channel.startswith("G"):
            slack.standin.invite_bot(channel)
    # A person or a DM the stand-in does not know: Slack refuses it, nothing is posted.
    reachable = (routing["channel"] or "C")[:1] not in ("U", "W", "D")
    if routing["escalate_to"] is not None:
        options["escalate_after"] = 0.05
    try:
        handoff = slack.handoffs.request_approval(
            run_id="run-routing",
            thread_id="t",
            action="issue_refund",
            args={"order_id": "A-1"},
            **options,
        )
    except InvalidHandoffRequest as refused:
        event("refused")
        assert not _all_ids(routing), f"refused a request routed to ids: {refused}"
        assert "is not a Slack " in str(refused) and "a capital letter, then" in str(refused)
        return
    assert _all_ids(routing), f"created a handoff routed to {routing}"
    event("created and posted" + " and escalated" * (routing["escalate_to"] is not None))
    try:
        if not reachable:
            closed = slack.handoffs.wait(handoff.id, timeout=20)
            assert closed.status is Status.UNDELIVERABLE
            assert closed.resume_data is not None
            comment = closed.resume_data.comment or ""
            assert "user_not_found" in comment or "channel_not_found" in comment, comment
            return
        # A DM id of nobody the bot talks to takes no copy (Slack: channel_not_found): that
        # escalation fails at once, and nothing is posted there.
        target = routing["escalate_to"]
        escalates = target is not None and not target.startswith("D")
        settled = _settled(slack, handoff.id, escalates=escalates)
        for message in _posted_messages(slack, settled):
            assert_no_injection(f"message {message.ts}", message.text, message.blocks)
    finally:
        # Pending handoffs of no reviewer are their channel's: leave none to the other tests.
        if slack.handoffs.get(handoff.id).is_pending:
            slack.handoffs.cancel(handoff.id, by="agent")


# -- stored before the check, and rendered on every surface -------------------------------


def _stored(routing: dict[str, Any]) -> Handoff:
    """A pending handoff stored with ``routing`` as it is, escalated to its target."""
    return make_handoff(
        approval({"amount": 30}),
        channel=routing["channel"],
        reviewers=routing["reviewers"],
        requester=routing["requester"],
        escalate_to=routing["escalate_to"],
        escalated_at=CREATED if routing["escalate_to"] else None,
        message_refs={"channel": routing["channel"] or "C0APPROVALS", "ts": "1.0"},
    )


def _stats(channel: str) -> Stats:
    return Stats(
        since=CREATED,
        window=timedelta(days=7),
        pending=1,
        pending_by_type={"approval": 1},
        pending_by_channel={channel: 1},
        decided=0,
        expired=0,
        cancelled=0,
        median_decision_seconds=None,
        p90_decision_seconds=None,
        failed_resumes=0,
        failing_resumes=0,
    )


@settings(ROUTING, max_examples=100)
@given(routing=routing_fields(ids_often=False))
def test_a_handoff_stored_with_any_routing_text_renders_no_mention_or_link(
    slack: SlackEnv, routing: dict[str, Any]
) -> None:
    handoff = _stored(routing)
    channel = routing["channel"] or "C0APPROVALS"  # where a handoff naming none is posted
    rendered = {
        "message": render_message(handoff),
        "reminder": reminder_text(handoff),
        "moved": render_moved(handoff, channel=channel),
        "list": render_listing(Listing(ListFilter(ListKind.PENDING), [handoff])),
        "list of its channel": render_listing(
            Listing(ListFilter(ListKind.CHANNEL, channel), [handoff])
        ),
        "show": render_detail(handoff, []),
        "home": render_home(Listing(ListFilter(ListKind.MINE), [handoff]), [], command="/h"),
        "stats": render_stats(_stats(channel)),
    }
    for where, shown in rendered.items():
        if isinstance(shown, str | dict):
            assert_no_injection(where, shown)
        else:
            assert_no_injection(where, shown.text, shown.blocks)

    client = WebClient(token=slack.standin.bot_token, base_url=slack.standin.api_url)
    refusal = ReviewerPolicy(client, slack.redis, KeySpace()).denial("U0NOBODYATALL", handoff)
    assert_no_injection("refusal", refusal or "")
