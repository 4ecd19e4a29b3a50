"""An approval that needs several people, as every surface other than its channel message
shows it: the App Home and `/handoff list mine` show a voter the handoff as voted, waiting
for others (no buttons on the Home), and everyone else the count; `/handoff show`, the CLI's
`show` and `list`, and the audit export show the votes."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner
from redis import Redis

from bot.blockkit.home import render_home
from bot.blockkit.replies import render_detail, render_listing
from bot.cli import main
from bot.queries.audit_export import export_audit
from bot.queries.listings import ListFilter, Listing, ListKind
from store.models import Handoff
from worker.client import Handoffs

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"


def _voted_by_alice(handoffs: Handoffs) -> Handoff:
    handoff = handoffs.request_approval(
        run_id="run-views",
        thread_id="t",
        action="issue_refund",
        args={"order": "A-1"},
        reviewers=[ALICE, BOB, CAROL],
        approvals_required=2,
    )
    return handoffs.store.decide(handoff.id, "approved", decided_by=ALICE)


def _queue(handoff: Handoff) -> Listing:
    return Listing(ListFilter(ListKind.MINE), [handoff])


def _text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def test_the_home_shows_a_voter_the_approval_as_voted_waiting_for_others(redis: Redis) -> None:
    handoff = _voted_by_alice(Handoffs(redis))

    alices = render_home(_queue(handoff), [], command="/handoff", viewer=ALICE)
    bobs = render_home(_queue(handoff), [], command="/handoff", viewer=BOB)

    assert "Nothing is waiting for you" in _text(alices)
    assert "Voted, waiting for others" in _text(alices)
    assert "You voted _approved_" in _text(alices)
    assert "Approvals 1 of 2" in _text(alices)
    assert not [b for b in alices["blocks"] if b["type"] == "actions"], "no vote twice"
    assert "Voted, waiting for others" not in _text(bobs)
    assert [b for b in bobs["blocks"] if b["type"] == "actions"], "Bob may still vote"
    assert "approvals 1 of 2" in _text(bobs)


def test_list_mine_marks_what_the_viewer_voted_on(redis: Redis) -> None:
    handoff = _voted_by_alice(Handoffs(redis))

    alices = render_listing(_queue(handoff), viewer=ALICE)
    bobs = render_listing(_queue(handoff), viewer=BOB)

    assert "You voted _approved_" in _text(alices.blocks)
    assert "waiting for others" in _text(alices.blocks)
    assert "You voted" not in _text(bobs.blocks)
    assert "approvals 1 of 2" in _text(bobs.blocks)


def test_show_lists_the_votes_and_the_audit_trail_the_voted_event(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _voted_by_alice(handoffs)

    detail = _text(render_detail(handoff, handoffs.audit(handoff.id)).blocks)

    assert "Approvals 1 of 2" in detail and f"<@{ALICE}> :white_check_mark:" in detail
    assert "*voted* by" in detail


def test_the_cli_shows_the_count_then_the_approvers(redis: Redis, redis_url: str) -> None:
    handoffs = Handoffs(redis)
    handoff = _voted_by_alice(handoffs)
    runner = CliRunner()
    env = {"REDIS_URL": redis_url}

    listed = runner.invoke(main, ["list"], env=env)
    pending = runner.invoke(main, ["show", handoff.id], env=env)
    handoffs.store.decide(handoff.id, "approved", decided_by=BOB)
    decided = runner.invoke(main, ["show", handoff.id], env=env)

    assert listed.exit_code == 0 and "approvals=1/2" in listed.output
    assert "needs 2 approvals (or 1 rejection): 1 approved, 0 rejected" in pending.output
    assert f"vote: approved by {ALICE}" in pending.output
    assert f"approvers: {ALICE}, {BOB}" in decided.output
    assert f"vote: approved by {BOB}" in decided.output


def test_the_audit_export_keeps_the_voted_event_with_its_detail(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _voted_by_alice(handoffs)
    output = io.StringIO()

    export_audit(handoffs.store, output)

    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    [voted] = [line for line in lines if line["event"] == "voted"]
    assert voted["handoff_id"] == handoff.id and voted["actor"] == ALICE
    assert voted["detail"] == {
        "outcome": "approved",
        "approvals": 1,
        "rejections": 0,
        "cleared": False,
        "via": "api",
    }
