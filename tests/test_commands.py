"""`/handoff` end to end: signed slash commands and clicks from the stand-in to `handoff
serve`, the store on the test Redis, and a real worker that posts, updates and resumes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from bot.queries.listings import ListFilter, ListKind
from bot.standin import Ephemeral
from handlers.commands import Command, UsageError, parse_command
from store.models import Status, TaskState
from store.repository import TaskPolicy
from tests.support import resume_targets, slack_env
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, OWNER, SlackEnv, wait_for
from worker.client import Handoffs

OTHER_CHANNEL = "C0OTHER"


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from slack_env.running_slack(redis, redis_url, tmp_path)


def _text(reply: Ephemeral) -> str:
    return reply.text + json.dumps(reply.blocks)


def _listed(reply: Ephemeral) -> list[str]:
    """The handoff ids a list reply shows, in order."""
    return [
        block["accessory"]["value"]
        for block in reply.blocks
        if block.get("accessory", {}).get("action_id") == ids.LIST_SHOW
    ]


def _buttons(blocks: list[dict]) -> set[str]:
    found = set()
    for block in blocks:
        for element in [*block.get("elements", []), block.get("accessory") or {}]:
            if element.get("type") == "button":
                found.add(element["action_id"])
    return found


def _events(slack: SlackEnv, handoff_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.actor) for e in slack.handoffs.audit(handoff_id)]


# -- help and usage ----------------------------------------------------------------------


def test_help_lists_every_subcommand(slack: SlackEnv) -> None:
    for text in ("help", ""):
        reply = slack.command(ALICE, text)
        for sub in ("list", "show", "cancel", "expire", "reassign", "retry", "stats", "help"):
            assert f"/handoff {sub}" in _text(reply)
        assert reply.source == "ack"


@pytest.mark.parametrize(
    ("text", "told"),
    [
        ("frobnicate", "I don't know the subcommand `frobnicate`"),
        ("show 42", "`42` is not a handoff id"),
        ("cancel", "`cancel` needs a handoff id"),
        ("list #approvals", "Slack did not turn `#approvals` into a channel"),
        ("list type refund", "`refund` is not a request type"),
        ("reassign ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC", "`reassign` needs where to"),
        ("reassign ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC bob", "`bob` is not a #channel"),
        ("stats forever", "`stats` takes a window such as `7d`"),
    ],
)
def test_input_it_does_not_understand_gets_a_usage_message(
    slack: SlackEnv, text: str, told: str
) -> None:
    reply = slack.command(ADMIN, text)
    assert told in _text(reply)
    assert "/handoff list" in _text(reply)  # followed by the usage


HANDOFF_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", Command("help")),
        ("LIST", Command("list", listing=ListFilter(ListKind.PENDING))),
        ("list mine", Command("list", listing=ListFilter(ListKind.MINE))),
        ("list <#C0X|ops>", Command("list", listing=ListFilter(ListKind.CHANNEL, "C0X"))),
        ("list run run-42", Command("list", listing=ListFilter(ListKind.RUN, "run-42"))),
        ("list type Approvals", Command("list", listing=ListFilter(ListKind.TYPE, "approval"))),
        ("list Failed", Command("list", listing=ListFilter(ListKind.FAILED))),
        (
            f"cancel {HANDOFF_ID}  duplicate of  another",
            Command("cancel", handoff_id=HANDOFF_ID, reason="duplicate of  another"),
        ),
        (
            f"reassign {HANDOFF_ID} <#C0X|ops> <@U0A|a> <!subteam^S0G|@g> U0B <@U0A>",
            Command(
                "reassign", handoff_id=HANDOFF_ID, channel="C0X", reviewers=("U0A", "S0G", "U0B")
            ),
        ),
        ("stats 24h", Command("stats", window=timedelta(hours=24))),
        ("stats 2w", Command("stats", window=timedelta(weeks=2))),
    ],
)
def test_command_text_is_parsed(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        f"reassign {HANDOFF_ID} <#C0X|a> <#C0Y|b>",
        # Slack's escaped forms around what is no id (too short, too long, lowercase), so
        # an admin routes a handoff only where an agent could (store.slack_ids).
        f"reassign {HANDOFF_ID} <#C1>",
        f"reassign {HANDOFF_ID} <@U1|bob>",
        f"reassign {HANDOFF_ID} <!subteam^S1|@team>",
        f"reassign {HANDOFF_ID} <#c0x|ops>",
        f"reassign {HANDOFF_ID} <#C{'0' * 32}>",
        f"reassign {HANDOFF_ID} S1><!channel>",
        "list <#C1|ops>",
        f"show {HANDOFF_ID} extra",
        "list run",
        "list mine please",
        "list failed deliveries",
        "stats 0d",
        "stats 5y",
    ],
)
def test_malformed_command_text_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError):
        parse_command(text)


# -- list and pagination -----------------------------------------------------------------


def test_list_pages_through_120_pending_handoffs_with_next_and_previous(slack: SlackEnv) -> None:
    created = [slack.refund_approval(run_id=f"run-{i // 40}") for i in range(120)]
    reply = slack.command(ADMIN, "list")
    assert "1 to 20 of 120" in _text(reply)
    assert ids.LIST_PREV not in _buttons(reply.blocks)

    pages = [_listed(reply)]
    while ids.LIST_NEXT in _buttons(reply.blocks):
        assert slack.standin.click(ADMIN, reply, ids.LIST_NEXT).status == 200
        reply = slack.current(reply)  # replaced in place through the response_url
        pages.append(_listed(reply))
    assert [len(page) for page in pages] == [20] * 6
    # Each once, oldest first (ids sort by creation time; within a millisecond, at random).
    assert [i for page in pages for i in page] == sorted(created)
    assert "101 to 120 of 120" in _text(reply)

    back = [_listed(reply)]
    while ids.LIST_PREV in _buttons(reply.blocks):
        slack.standin.click(ADMIN, reply, ids.LIST_PREV)
        reply = slack.current(reply)
        back.append(_listed(reply))
    assert back == list(reversed(pages))
    assert len(slack.standin.ephemerals(ADMIN)) == 1  # one reply, replaced each time


def test_list_filters_by_channel_run_type_and_mine(slack: SlackEnv) -> None:
    in_other = slack.refund_approval(channel=OTHER_CHANNEL, run_id="run-a")
    for_alice = slack.refund_approval(reviewers=[ALICE], run_id="run-b")
    for_finance = slack.refund_approval(reviewers=["S0FINANCE"], run_id="run-b")
    question = slack.handoffs.ask(
        run_id="run-c", thread_id="t", question="Which region?", reviewers=[CAROL]
    ).id
    anyone = slack.refund_approval(run_id="run-c")

    assert _listed(slack.command(ADMIN, f"list <#{OTHER_CHANNEL}|other>")) == [in_other]
    assert _listed(slack.command(ADMIN, f"list #{OTHER_CHANNEL}")) == [in_other]
    assert _listed(slack.command(ADMIN, "list run run-b")) == [for_alice, for_finance]
    assert _listed(slack.command(ADMIN, "list type questions")) == [question]
    assert _listed(slack.command(ADMIN, "list pending")) == [
        in_other,
        for_alice,
        for_finance,
        question,
        anyone,
    ]
    # Mine: named as reviewer, through a user group (BOB is in S0FINANCE), or open to anyone.
    assert _listed(slack.command(ALICE, "list mine")) == [in_other, for_alice, anyone]
    assert _listed(slack.command(BOB, "list mine")) == [in_other, for_finance, anyone]
    assert _listed(slack.command(CAROL, "list mine")) == [in_other, question, anyone]
    empty = slack.command(ADMIN, "list run nothing-here")
    assert "Nothing is waiting here" in _text(empty)


def test_list_mine_leaves_out_what_was_decided_and_your_own_requests(slack: SlackEnv) -> None:
    first = slack.refund_approval()
    mine_to_ask = slack.refund_approval(requester=ALICE)
    last = slack.refund_approval()
    slack.handoffs.decide(first, "approved", by=BOB)
    assert _listed(slack.command(ALICE, "list mine")) == [last]
    assert mine_to_ask not in _listed(slack.command(ALICE, "list mine"))


def test_details_button_shows_the_full_record(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    reply = slack.command(ADMIN, "list")
    slack.standin.click(ADMIN, reply, ids.LIST_SHOW, block_id=f"item_{handoff_id}")
    detail = wait_for(lambda: slack.standin.ephemerals(ADMIN)[1:])[0]
    assert handoff_id in _text(detail)
    assert "Audit trail" in _text(detail)


def test_an_admin_approves_from_the_details_of_handoff_show(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    detail = slack.command(ADMIN, f"show {handoff_id}")

    assert slack.standin.click(ADMIN, detail, ids.APPROVE).status == 200

    assert slack.resumed(handoff_id)["resume_data"]["decided_by"] == ADMIN
    assert slack.handoffs.get(handoff_id).status is Status.APPROVED


def test_approve_in_an_ephemeral_that_never_showed_the_handoff_is_refused(
    slack: SlackEnv,
) -> None:
    shown = slack.refund_approval()
    other = slack.refund_approval()
    detail = slack.command(ADMIN, f"show {shown}")

    slack.standin.click(ADMIN, detail, ids.APPROVE, value=other)  # a tampered value

    assert slack.handoffs.get(other).is_pending
    assert slack.handoffs.get(shown).is_pending


# -- who may do what ---------------------------------------------------------------------


def test_reviewers_may_not_run_admin_subcommands_and_the_refusal_is_audited(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    for text in (
        f"cancel {handoff_id}",
        f"expire {handoff_id}",
        f"reassign {handoff_id} <@{BOB}|bob>",
        f"retry {handoff_id}",
        "stats",
        "list",
        f"list <#{CHANNEL}|approvals>",
    ):
        reply = slack.command(ALICE, text)
        assert "Only handoff admins" in _text(reply), text
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    denied = [e for e in slack.handoffs.audit(handoff_id) if e.event == "denied"]
    assert [(e.actor, e.detail["command"]) for e in denied] == [
        (ALICE, "cancel"),
        (ALICE, "expire"),
        (ALICE, "reassign"),
        (ALICE, "retry"),
    ]
    # What reviewers may do: their queue, the record of what they may decide, help.
    assert _listed(slack.command(ALICE, "list mine")) == [handoff_id]
    assert handoff_id in _text(slack.command(ALICE, f"show {handoff_id}"))
    assert "You can see only the handoffs you may decide" in _text(
        slack.command(CAROL, f"show {handoff_id}")
    )


def test_workspace_owners_are_admins_through_users_info_cached(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    assert "1 to 1 of 1" in _text(slack.command(OWNER, "list"))
    slack.command(OWNER, f"cancel {handoff_id} duplicate")
    assert slack.handoffs.get(handoff_id).status is Status.CANCELLED
    asked = [c.params["user"] for c in slack.standin.calls("users.info")]
    assert asked.count(OWNER) == 1  # the answer is cached
    assert "Only handoff admins" in _text(slack.command(CAROL, "list"))


# -- the admin subcommands ---------------------------------------------------------------


def test_show_gives_the_record_decision_and_audit_trail(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    slack.posted(handoff_id)
    pending = slack.command(ADMIN, f"show {handoff_id}")
    # A pending handoff keeps the channel message's buttons (same listeners).
    assert {ids.APPROVE, ids.REJECT, ids.EDIT} <= _buttons(pending.blocks)
    slack.standin.click(ALICE, slack.posted(handoff_id), ids.APPROVE)
    slack.resumed(handoff_id)
    shown = _text(slack.command(ADMIN, f"show {handoff_id}"))
    for expected in ("approved", "run-refund", "Audit trail", "*decided*", "*resumed*"):
        assert expected in shown
    assert f"<@{ALICE}>" in shown
    assert "no longer exists" in _text(slack.command(ADMIN, "show ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"))


def test_cancel_resumes_the_run_with_cancelled_and_audits_the_admin(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    message = slack.posted(handoff_id)
    reply = slack.command(ADMIN, f"cancel {handoff_id} agent retried with another order")
    assert "Cancelled" in _text(reply)
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.CANCELLED
    assert handoff.resume_data.decided_by == ADMIN
    assert handoff.resume_data.comment == "agent retried with another order"
    assert handoff.resume_data.via == "slash_command"
    assert slack.resumed(handoff_id)["status"] == "cancelled"
    assert ("cancelled", ADMIN) in _events(slack, handoff_id)
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    assert _buttons(slack.standin.message(message.channel, message.ts).blocks) == set()
    again = slack.command(ADMIN, f"cancel {handoff_id}")
    assert "Already cancelled" in _text(again)


def test_expire_resumes_the_run_with_expired_and_audits_the_admin(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    assert "Expired" in _text(slack.command(ADMIN, f"expire {handoff_id}"))
    assert slack.handoffs.get(handoff_id).status is Status.EXPIRED
    assert slack.resumed(handoff_id)["status"] == "expired"
    assert ("expired", ADMIN) in _events(slack, handoff_id)


def test_reassign_reposts_points_the_old_message_there_and_decides_once(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval()
    old = slack.posted(handoff_id)
    reply = slack.command(ADMIN, f"reassign {handoff_id} <#{OTHER_CHANNEL}|other>")
    assert f"<#{OTHER_CHANNEL}>" in _text(reply)
    assert ("reassigned", ADMIN) in _events(slack, handoff_id)
    new = wait_for(lambda: slack.standin.messages(OTHER_CHANNEL))[0]
    assert ids.APPROVE in _buttons(new.blocks)
    wait_for(lambda: OTHER_CHANNEL in json.dumps(slack.standin.message(CHANNEL, old.ts).blocks))
    assert _listed(slack.command(ADMIN, f"list <#{OTHER_CHANNEL}|other>")) == [handoff_id]

    slack.standin.click(ALICE, new, ids.APPROVE)
    slack.standin.click(BOB, old, ids.APPROVE)  # a screen still showing the old message
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == ALICE
    assert slack.resumed(handoff_id)["status"] == "approved"
    decided = [e for e, _ in _events(slack, handoff_id) if e == "decided"]
    assert decided == ["decided"]


def test_reassign_to_people_and_groups_changes_who_may_decide(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    slack.posted(handoff_id)
    slack.command(ADMIN, f"reassign {handoff_id} <@{CAROL}|carol> <!subteam^S0FINANCE|@finance>")
    assert slack.handoffs.get(handoff_id).reviewers == [CAROL, "S0FINANCE"]
    assert _listed(slack.command(CAROL, "list mine")) == [handoff_id]
    assert _listed(slack.command(BOB, "list mine")) == [handoff_id]
    assert _listed(slack.command(ALICE, "list mine")) == []


def test_retry_reruns_a_resume_that_failed_after_its_retries(
    slack: SlackEnv, fast_tasks: TaskPolicy
) -> None:
    slack.redis.set(resume_targets.FAIL_FLAG, "1")
    handoffs = Handoffs(slack.redis, tasks=fast_tasks)  # 3 quick attempts
    handoff_id = handoffs.request_approval(
        run_id="run-retry",
        thread_id="t",
        action="ship",
        resume="tests.support.resume_targets:fail_while_flagged",
    ).id
    slack.handoffs.decide(handoff_id, "approved", by=ALICE)
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.FAILED, timeout=30)
    assert "resume failed (attempt 3)" in _text(slack.command(ADMIN, f"show {handoff_id}"))
    slack.redis.delete(resume_targets.FAIL_FLAG)
    reply = slack.command(ADMIN, f"retry {handoff_id}")
    assert "queued for another round" in _text(reply)
    assert slack.resumed(handoff_id)["status"] == "approved"
    assert ("resume_retry_requested", ADMIN) in _events(slack, handoff_id)
    assert "only failed work can be retried" in _text(slack.command(ADMIN, f"retry {handoff_id}"))
