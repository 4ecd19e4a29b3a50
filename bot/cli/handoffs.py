"""The commands that read and change handoffs: ``list``, ``failed``, ``show``,
``decide``, ``claim``, ``cancel``, ``expire``, ``reassign``, ``retry`` and ``redeliver``.

Each change goes through the same store call the Slack commands use (one Lua script, so
exactly once and audited with ``--by``); ``--json`` prints the resulting handoff."""

from __future__ import annotations

import bisect
import json

import click

from bot.blockkit.replies import TASK_NAMES
from bot.cli.app import main, settings
from bot.cli.output import echo_json, failed_record, json_option, record, summary_lines
from store import slack_ids
from store.exceptions import AlreadyDecided, NotRetryable
from store.ids import is_handoff_id
from store.lost_attempts import retry_warning
from store.models import Handoff, RequestType, Status, TaskKind
from store.repository import HandoffStore
from worker.client import pending_index

DECIDED_OUTCOMES = (Status.APPROVED, Status.REJECTED, Status.ANSWERED)
"""What a person decides; ``cancel`` and ``expire`` close a handoff otherwise."""

_CLI = "cli"
"""``via`` of every change made here, and the default actor."""

_limit = click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
_cursor = click.option("--cursor", default=None, help="next_cursor of the previous page.")


def _done(handoff: Handoff, as_json: bool, line: str) -> None:
    if as_json:
        echo_json(record(handoff))
    else:
        click.echo(line)


@main.command()
@click.argument("handoff_id")
@json_option
def show(handoff_id: str, as_json: bool) -> None:
    """Show a handoff, its decision and its audit trail."""
    store = settings().open_store()
    handoff = store.get(handoff_id)
    audit = store.audit_trail(handoff_id)
    if as_json:
        echo_json({**record(handoff), "audit": [e.model_dump(mode="json") for e in audit]})
        return
    for line in summary_lines(handoff, audit):
        click.echo(line)


@main.command(name="list")
@_limit
@_cursor
@click.option("--channel", default=None, help="Only the handoffs posted in this channel id.")
@click.option("--run", "run_id", default=None, help="Only the handoffs of this run.")
@click.option("--reviewer", default=None, help="Only the handoffs this user or group may decide.")
@click.option(
    "--type",
    "request_type",
    type=click.Choice([t.value for t in RequestType]),
    default=None,
    help="Only the handoffs of this type.",
)
@click.option(
    "--failed",
    is_flag=True,
    help="Instead: handoffs whose delivery, resume or message update gave up (any status).",
)
@json_option
def list_pending(
    limit: int,
    cursor: str | None,
    channel: str | None,
    run_id: str | None,
    reviewer: str | None,
    request_type: str | None,
    failed: bool,
    as_json: bool,
) -> None:
    """List pending handoffs, oldest first (filtered by at most one of the filters)."""
    filters = {
        "--channel": channel,
        "--run": run_id,
        "--reviewer": reviewer,
        "--type": request_type,
        "--failed": "yes" if failed else None,
    }
    given = {option: value for option, value in filters.items() if value}
    if len(given) > 1:
        raise click.UsageError(f"filter by one of {', '.join(filters)} at a time")
    store = settings().open_store()
    if failed:
        _list_failed(store, cursor=cursor, limit=limit, as_json=as_json)
        return
    index = pending_index(
        store.keys, channel=channel, run_id=run_id, reviewer=reviewer, request_type=request_type
    )
    page = store.list_pending(index, cursor=cursor, limit=limit)
    if as_json:
        echo_json({"handoffs": [record(h) for h in page.items], "next_cursor": page.next_cursor})
        return
    for handoff in page.items:
        votes = ""
        if handoff.quorum is not None:
            votes = f"  approvals={len(handoff.live_votes('approved'))}/{handoff.quorum[0]}"
        click.echo(
            f"{handoff.id}  {handoff.request_type.value:<10}  run={handoff.run_id}  "
            f"created={handoff.created_at:%Y-%m-%d %H:%M:%S}{votes}"
        )
    if page.next_cursor:
        click.echo(f"more: --cursor {page.next_cursor}")
    if not page.items:
        # Say so: an empty output reads as a command that did nothing.
        which = "".join(f" with {option} {value}" for option, value in given.items())
        if cursor:
            click.echo(f"no more pending handoffs{which} after this cursor")
        else:
            click.echo(f"no pending handoffs{which}")


@main.command()
@_limit
@_cursor
@json_option
def failed(limit: int, cursor: str | None, as_json: bool) -> None:
    """List handoffs whose delivery, resume or message update gave up (`list --failed`)."""
    _list_failed(settings().open_store(), cursor=cursor, limit=limit, as_json=as_json)


def _list_failed(store: HandoffStore, *, cursor: str | None, limit: int, as_json: bool) -> None:
    ids = store.failed_handoff_ids()
    start = bisect.bisect_right(ids, cursor) if cursor else 0
    shown = store.get_many(ids[start : start + limit])
    next_cursor = shown[-1].id if shown and start + limit < len(ids) else None
    if as_json:
        echo_json({"handoffs": [failed_record(h) for h in shown], "next_cursor": next_cursor})
        return
    for handoff in shown:
        failures = [
            f"{TASK_NAMES[kind]} failed ({task.last_error or 'no error recorded'})"
            for kind, task in handoff.failed_tasks()
        ]
        click.echo(
            f"{handoff.id}  {handoff.status.value:<13}  run={handoff.run_id}  "
            + "; ".join(failures)
        )
    if next_cursor:
        click.echo(f"more: --failed --cursor {next_cursor}")
    if not shown:
        click.echo("no more failed handoffs after this cursor" if cursor else "nothing has failed")


@main.command()
@click.argument("handoff_id")
@click.argument("outcome", type=click.Choice([s.value for s in DECIDED_OUTCOMES]))
@click.option("--by", required=True, help="Who decides (e.g. a Slack user id).")
@click.option("--comment", default=None, help="Reason or note.")
@click.option("--answer", default=None, help="Answer text (questions, escalations).")
@click.option(
    "--answer-data",
    default=None,
    metavar="JSON",
    help="A typed answer: a JSON object of the question's answer_schema fields.",
)
@json_option
def decide(
    handoff_id: str,
    outcome: str,
    by: str,
    comment: str | None,
    answer: str | None,
    answer_data: str | None,
    as_json: bool,
) -> None:
    """Decide a pending handoff (to cancel or expire one, see `cancel` and `expire`)."""
    typed = None
    if answer_data is not None:
        try:
            typed = json.loads(answer_data)
        except (ValueError, RecursionError):
            typed = None
        if not isinstance(typed, dict):
            raise click.BadParameter("give a JSON object", param_hint="--answer-data")
    store = settings().open_store()
    handoff = store.decide(
        handoff_id,
        outcome,
        decided_by=by,
        via=_CLI,
        comment=comment,
        answer=answer,
        answer_data=typed,
    )
    _done(handoff, as_json, f"{handoff.id} is {handoff.status.value}")


@main.command()
@click.argument("handoff_id")
@click.option("--by", required=True, help="Who claims it (the only one who may resolve it).")
@click.option("--take-over", is_flag=True, help="Take it from whoever claimed it (an admin's).")
@json_option
def claim(handoff_id: str, by: str, take_over: bool, as_json: bool) -> None:
    """Claim a pending escalation; then `decide` it with the same --by."""
    handoff = settings().open_store().claim(handoff_id, claimed_by=by, take_over=take_over)
    _done(handoff, as_json, f"{handoff.id} is claimed by {handoff.claimed_by}")


@main.command()
@click.argument("handoff_id")
@click.option("--by", default=_CLI, show_default=True, help="Who cancels it (audited).")
@click.option("--reason", default=None, help="Why (given to the agent as the comment).")
@json_option
def cancel(handoff_id: str, by: str, reason: str | None, as_json: bool) -> None:
    """Cancel a pending handoff; its run resumes with `cancelled`."""
    handoff = settings().open_store().cancel(handoff_id, cancelled_by=by, reason=reason, via=_CLI)
    _done(handoff, as_json, f"{handoff.id} is cancelled; its run resumes with cancelled")


@main.command()
@click.argument("handoff_id")
@click.option("--by", default=_CLI, show_default=True, help="Who expires it (audited).")
@json_option
def expire(handoff_id: str, by: str, as_json: bool) -> None:
    """Expire a pending handoff now; its run resumes with `expired` (never approved)."""
    handoff = settings().open_store().expire_now(handoff_id, expired_by=by, via=_CLI)
    _done(handoff, as_json, f"{handoff.id} is expired; its run resumes with expired")


@main.command()
@click.argument("handoff_id")
@click.option("--channel", default=None, help="Post it in this channel id (C…, G…) or DM (U…).")
@click.option(
    "--reviewer",
    "reviewers",
    multiple=True,
    help="Who may decide it now: a user (U…) or user-group (S…) id; repeat for several.",
)
@click.option("--by", default=_CLI, show_default=True, help="Who reassigns it (audited).")
@json_option
def reassign(
    handoff_id: str, channel: str | None, reviewers: tuple[str, ...], by: str, as_json: bool
) -> None:
    """Route a pending handoff to another channel and/or other reviewers.

    A worker posts it there and points the old message to it; it is still decided once.
    """
    if channel is None and not reviewers:
        raise click.UsageError("give --channel, --reviewer or both")
    if channel is not None and (problem := slack_ids.DESTINATION.first_refusal([channel])):
        raise click.BadParameter(problem, param_hint="--channel")
    if problem := slack_ids.REVIEWER.first_refusal(list(reviewers)):
        raise click.BadParameter(problem, param_hint="--reviewer")
    store = settings().open_store()
    # A handoff in a person's DM given to another person goes to their DM, as with /handoff.
    current = store.get(handoff_id)
    channel = slack_ids.reassigned_channel(current.channel, channel, reviewers)
    try:
        handoff = store.reassign(
            handoff_id, by=by, channel=channel, reviewers=list(reviewers) or None
        )
    except AlreadyDecided as exc:
        if exc.status != Status.UNDELIVERABLE.value:
            raise
        raise NotRetryable(
            f"handoff {handoff_id} is undeliverable: it is closed and its run was resumed, "
            f"so it is not reassigned; redeliver it as a new handoff instead: "
            f"handoff redeliver {handoff_id} --channel C…"
        ) from exc
    where = f"to {handoff.channel}" if channel else "where it was"
    who = f" for {', '.join(handoff.reviewers)}" if reviewers else ""
    _done(handoff, as_json, f"{handoff.id} is reassigned{who}; a worker posts it {where}")


@main.command()
@click.argument("handoff_id")
@click.option("--by", default=_CLI, show_default=True, help="Who asks for the retry (audited).")
@json_option
def retry(handoff_id: str, by: str, as_json: bool) -> None:
    """Retry what failed after all its attempts: the delivery, the resume, the update."""
    store = settings().open_store()
    warning = retry_warning(store.get(handoff_id).resume)
    retried = store.retry_failed(handoff_id, requested_by=by)
    if as_json:
        echo_json({**record(store.get(handoff_id)), "retried": [k.value for k in retried]})
    else:
        click.echo(f"{', '.join(kind.value for kind in retried)} of {handoff_id} queued again")
    if warning and TaskKind.RESUME in retried:
        click.echo(f"warning: {warning}", err=True)


@main.command()
@click.argument("handoff_id")
@click.option(
    "--channel",
    default=None,
    help="Post the new handoff in this channel id (C…, G…) or DM (U…); default: where the "
    "old one was sent.",
)
@click.option("--by", default=_CLI, show_default=True, help="Who redelivers it (audited).")
@json_option
def redeliver(handoff_id: str, channel: str | None, by: str, as_json: bool) -> None:
    """Ask again, as a new handoff, what an undeliverable handoff asked.

    The new handoff has the same request (run, type, payload, reviewers, resume target), is
    posted by a worker and resumes the run once more when decided; the old one stays closed.
    """
    if not is_handoff_id(handoff_id):
        raise click.BadParameter(
            f"{handoff_id!r} is not a handoff id (they look like ho_01JDZ3Q6T5...)",
            param_hint="HANDOFF_ID",
        )
    if channel is not None and (problem := slack_ids.DESTINATION.first_refusal([channel])):
        raise click.BadParameter(problem, param_hint="--channel")
    made = settings().open_store().redeliver(handoff_id, by=by, channel=channel)
    new = made.handoff
    if as_json:
        echo_json({**record(new), "created": made.created})
        return
    where = new.channel or "the default channel"
    if made.created:
        click.echo(f"{handoff_id} is redelivered as {new.id}; a worker posts it in {where}")
    else:
        click.echo(f"{handoff_id} was redelivered already, as {new.id} ({new.status.value})")
