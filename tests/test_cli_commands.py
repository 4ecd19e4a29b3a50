"""The operator's commands (claim, cancel, expire, reassign, stats, failed, --json), their
exit codes, --version and NO_COLOR, against the test Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result
from redis import Redis

from bot.cli import main
from bot.cli.exit_codes import ExitCode
from store.ids import new_handoff_id
from store.models import Status, TaskKind
from tests.conftest import ROOT
from worker.client import Handoffs

Run = Callable[..., Result]


@pytest.fixture
def run(redis_url: str) -> Run:
    """``handoff ARGS...`` in this process, against the test Redis."""

    def invoke(*args: str, color: bool = False, **env: str) -> Result:
        return CliRunner().invoke(
            main, list(args), env={"REDIS_URL": redis_url, **env}, color=color
        )

    return invoke


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_escalations_are_claimed_then_resolved_from_the_cli(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    escalation = handoffs.escalate(run_id="r", thread_id="t", summary="Customer is angry")

    unclaimed = run("decide", escalation.id, "answered", "--by", "U0OPS", "--answer", "done")
    claimed = run("claim", escalation.id, "--by", "U0OPS")
    stolen = run("claim", escalation.id, "--by", "U0OTHER")
    resolved = run("decide", escalation.id, "answered", "--by", "U0OPS", "--answer", "done")

    assert unclaimed.exit_code == ExitCode.CONFLICT, unclaimed.output
    assert "must be claimed" in unclaimed.output
    assert claimed.exit_code == 0 and "claimed by U0OPS" in claimed.stdout
    assert stolen.exit_code == ExitCode.CONFLICT and "claimed by U0OPS" in stolen.output
    assert resolved.exit_code == 0, resolved.output
    decided = handoffs.get(escalation.id)
    assert decided.status is Status.ANSWERED and decided.resume_data.answer == "done"


def test_cancel_and_expire_close_a_handoff_and_say_so(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    first = handoffs.ask(run_id="r", thread_id="t", question="Which region?")
    second = handoffs.ask(run_id="r", thread_id="t", question="Which zone?")

    cancelled = _json(run("cancel", first.id, "--by", "U0ADMIN", "--reason", "wrong run", "--json"))
    expired = run("expire", second.id)
    again = run("cancel", second.id)

    assert cancelled["status"] == "cancelled"
    assert cancelled["resume_data"]["comment"] == "wrong run"
    assert cancelled["resume_data"]["decided_by"] == "U0ADMIN"
    assert expired.exit_code == 0 and "expired" in expired.stdout
    assert handoffs.get(second.id).status is Status.EXPIRED
    assert again.exit_code == ExitCode.CONFLICT
    assert "already expired" in again.output
    events = [e.event for e in handoffs.store.audit_trail(first.id)]
    assert events == ["created", "cancelled"]


def test_a_typed_question_is_decided_with_answer_data(redis: Redis, run: Run) -> None:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer", "maximum": 500}, "late": {"type": "boolean"}},
    }
    handoff = Handoffs(redis).ask(run_id="r", thread_id="t", question="?", answer_schema=schema)

    untyped = run("decide", handoff.id, "answered", "--by", "U0A", "--answer", "30")
    not_json = run("decide", handoff.id, "answered", "--by", "U0A", "--answer-data", "30")
    too_much = run(
        "decide", handoff.id, "answered", "--by", "U0A", "--answer-data", '{"amount": 501}'
    )
    typed = run(
        "decide",
        handoff.id,
        "answered",
        "--by",
        "U0A",
        "--answer-data",
        '{"amount": 30, "late": true}',
    )

    assert untyped.exit_code == ExitCode.USAGE and "answer_data" in untyped.output
    assert not_json.exit_code == ExitCode.USAGE and "--answer-data" in not_json.output
    assert too_much.exit_code == ExitCode.USAGE and "greater than the maximum" in too_much.output
    assert typed.exit_code == 0, typed.output
    decided = Handoffs(redis).get(handoff.id).resume_data
    assert decided is not None and decided.answer_data == {"amount": 30, "late": True}
    assert decided.answer == "amount: 30\nlate: yes"


def test_decide_offers_only_what_a_person_decides(redis: Redis, run: Run) -> None:
    handoff = Handoffs(redis).request_approval(run_id="r", thread_id="t", action="deploy")

    refused = run("decide", handoff.id, "expired", "--by", "U0A")

    assert refused.exit_code == ExitCode.USAGE
    assert "'approved', 'rejected', 'answered'" in refused.output
    assert Handoffs(redis).get(handoff.id).is_pending


def test_reassign_moves_a_handoff_and_refuses_bad_ids(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r", thread_id="t", action="deploy", channel="C0OLD", reviewers=["U0A"]
    )

    bad_channel = run("reassign", handoff.id, "--channel", "#ops")
    bad_reviewer = run("reassign", handoff.id, "--reviewer", "bob")
    nothing = run("reassign", handoff.id)
    moved = _json(
        run(
            "reassign",
            handoff.id,
            "--channel",
            "C0NEW",
            "--reviewer",
            "U0B",
            "--reviewer",
            "S0SRE",
            "--by",
            "U0ADMIN",
            "--json",
        )
    )

    for refused in (bad_channel, bad_reviewer, nothing):
        assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "Slack" in bad_channel.output and "'bob'" in bad_reviewer.output
    assert moved["channel"] == "C0NEW" and moved["reviewers"] == ["U0B", "S0SRE"]
    stored = handoffs.get(handoff.id)
    assert (stored.channel, stored.reviewers) == ("C0NEW", ["U0B", "S0SRE"])
    assert "reassigned" in [e.event for e in handoffs.store.audit_trail(handoff.id)]


def test_a_dm_handoff_given_to_another_person_goes_to_their_dm(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r", thread_id="t", action="deploy", channel="U0ANA", reviewers=["U0ANA"]
    )

    moved = run("reassign", handoff.id, "--reviewer", "U0BEN")

    assert moved.exit_code == 0, moved.output
    assert "a worker posts it to U0BEN" in moved.stdout
    stored = handoffs.get(handoff.id)
    assert (stored.channel, stored.reviewers) == ("U0BEN", ["U0BEN"])


def test_exit_codes_tell_not_found_from_conflict(redis: Redis, run: Run) -> None:
    handoff = Handoffs(redis).ask(run_id="r", thread_id="t", question="?")
    assert run("decide", handoff.id, "answered", "--by", "U0A", "--answer", "x").exit_code == 0

    missing = run("show", "ho_01NOSUCHHANDOFF")
    decided_twice = run("decide", handoff.id, "answered", "--by", "U0B", "--answer", "y")
    not_failed = run("retry", handoff.id)
    wrong_kind = run("claim", handoff.id, "--by", "U0A")

    assert missing.exit_code == ExitCode.NOT_FOUND and "no handoff with id" in missing.output
    assert decided_twice.exit_code == ExitCode.CONFLICT
    assert not_failed.exit_code == ExitCode.CONFLICT
    assert wrong_kind.exit_code == ExitCode.USAGE and "only escalations are claimed" in (
        wrong_kind.output
    )
    for result in (missing, decided_twice, not_failed, wrong_kind):
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_unreachable_redis_exits_5_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "list"],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == ExitCode.UNAVAILABLE, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: cannot reach Redis")


def test_list_show_and_failed_print_json_a_script_can_read(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    first = handoffs.ask(run_id="run-j", thread_id="t", question="Which region?", channel="C01")
    second = handoffs.request_approval(run_id="run-j", thread_id="t", action="deploy")
    page = _json(run("list", "--limit", "1", "--json"))
    rest = _json(run("list", "--cursor", page["next_cursor"], "--json"))
    store = handoffs.store
    start = store.begin_task(second.id, TaskKind.DELIVER, run_token=new_handoff_id())
    store.finish_task(
        second.id, TaskKind.DELIVER, attempt=start.attempt, error="is_archived", permanent=True
    )

    shown = _json(run("show", first.id, "--json"))
    failed = _json(run("failed", "--json"))

    assert [h["id"] for h in page["handoffs"]] == [first.id]
    assert [h["id"] for h in rest["handoffs"]] == [second.id] and rest["next_cursor"] is None
    assert shown["payload"]["question"] == "Which region?"
    assert [e["event"] for e in shown["audit"]] == ["created"]
    assert [h["id"] for h in failed["handoffs"]] == [second.id]
    assert failed["handoffs"][0]["status"] == "undeliverable"
    assert failed["handoffs"][0]["failed"][0]["task"] == TaskKind.DELIVER.value
    assert failed["handoffs"][0]["failed"][0]["last_error"] == "is_archived"


def test_show_prints_a_readable_summary(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="run-s",
        thread_id="ticket-9",
        action="refund",
        args={"amount": 30},
        context="Charged twice",
        channel="C0PAY",
    )
    handoffs.decide(handoff.id, "rejected", by="U0ANA", comment="duplicate")

    shown = run("show", handoff.id)

    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == f"{handoff.id}  approval  rejected"
    assert "  run run-s  thread ticket-9" in lines
    assert any("rejected by U0ANA" in line for line in lines)
    assert "    comment: duplicate" in lines
    assert '  action: refund {"amount": 30}' in lines
    assert shown.stdout.count("decided") == 1
    assert "API key" not in shown.stdout  # created by Python code, not over HTTP


def test_stats_in_json_and_text(redis: Redis, run: Run) -> None:
    handoffs = Handoffs(redis)
    handoffs.ask(run_id="r", thread_id="t", question="?", channel="C01")
    decided = handoffs.request_approval(run_id="r", thread_id="t", action="deploy")
    handoffs.decide(decided.id, "approved", by="U0A")
    handoffs.cancel(handoffs.ask(run_id="r", thread_id="t", question="?").id, reason="x")

    figures = _json(run("stats", "--json"))
    text = run("stats", "--window", "12h")
    bad = run("stats", "--window", "soon")

    assert figures["pending"] == 1 and figures["pending_by_type"] == {"question": 1}
    assert figures["pending_by_channel"] == {"C01": 1}
    assert (figures["decided"], figures["cancelled"], figures["closed"]) == (1, 1, 2)
    assert figures["window_seconds"] == 7 * 86400
    assert text.exit_code == 0 and "pending now        1 (1 question)" in text.stdout
    assert bad.exit_code == ExitCode.USAGE and "--window" in bad.output


def test_version_and_no_color(run: Run) -> None:
    version = run("--version")
    nowhere = {"REDIS_URL": "redis://127.0.0.1:1/0"}
    colored = run("check", "--manifest", "none.yml", color=True, **nowhere)
    plain = run("check", "--manifest", "none.yml", color=True, NO_COLOR="1", **nowhere)

    assert version.exit_code == 0 and version.stdout.startswith("handoff, version ")
    assert "\x1b[" in colored.stdout
    assert "\x1b[" not in plain.stdout and "FAIL" in plain.stdout
