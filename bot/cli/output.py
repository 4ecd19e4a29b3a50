"""How the commands print: a handoff as JSON (``--json``, for scripts) or as lines a
person reads."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from bot.blockkit.replies import TASK_NAMES
from store.models import AuditEvent, Handoff, TaskState

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of text."
)


def echo_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def record(handoff: Handoff) -> dict[str, Any]:
    """The handoff as the JSON document ``--json`` prints (the model's own JSON form)."""
    return handoff.model_dump(mode="json")


def failed_record(handoff: Handoff) -> dict[str, Any]:
    """The handoff's record plus ``failed``: each task that gave up, with its error."""
    return {
        **record(handoff),
        "failed": [
            {
                "task": kind.value,
                "name": TASK_NAMES[kind],
                "attempts": task.attempt,
                "last_error": task.last_error,
            }
            for kind, task in handoff.failed_tasks()
        ],
    }


def _when(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC" if moment else "-"


def summary_lines(handoff: Handoff, audit: list[AuditEvent]) -> list[str]:
    """What ``handoff show`` prints: the request, where it went, its decision, its tasks
    and its audit trail."""
    lines = [
        f"{handoff.id}  {handoff.request_type.value}  {handoff.status.value}",
        f"  run {handoff.run_id}  thread {handoff.thread_id}",
        f"  created {_when(handoff.created_at)}"
        + (f"  expires {_when(handoff.expires_at)}" if handoff.expires_at else ""),
        f"  channel {handoff.channel or '(default)'}  reviewers "
        + (", ".join(handoff.reviewers) or "(default)"),
    ]
    if handoff.requester:
        lines.append(f"  requester {handoff.requester}")
    if handoff.api_key:
        lines.append(f"  created by API key {handoff.api_key}")
    if handoff.callback:
        lines.append(f"  callback {handoff.callback.url}")
    payload = handoff.payload.model_dump(mode="json", exclude={"kind"}, exclude_none=True)
    action = payload.pop("action", None)
    if action is not None:
        lines.append(f"  action: {action['name']} {json.dumps(action['args'], ensure_ascii=False)}")
    for name, value in payload.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"  {name}: {shown}")
    if handoff.context:
        lines.append(f"  context: {handoff.context}")
    if handoff.claimed_by:
        lines.append(f"  claimed by {handoff.claimed_by} at {_when(handoff.claimed_at)}")
    if handoff.quorum is not None:
        approvals, rejections = handoff.quorum
        lines.append(
            f"  needs {approvals} approvals (or {rejections} rejection"
            f"{'' if rejections == 1 else 's'}): {len(handoff.live_votes('approved'))} "
            f"approved, {len(handoff.live_votes('rejected'))} rejected so far"
        )
    votes = handoff.resume_data.votes if handoff.resume_data else None
    for vote in votes or handoff.votes:
        cleared = "  (cleared by an edit)" if vote.cleared else ""
        lines.append(f"    vote: {vote.outcome} by {vote.by} at {_when(vote.at)}{cleared}")
    decision = handoff.resume_data
    if decision is not None:
        lines.append(
            f"  {decision.outcome.value} by {decision.decided_by} at "
            f"{_when(decision.decided_at)} via {decision.via}"
        )
        for name in ("comment", "answer", "corrected_draft"):
            if value := getattr(decision, name):
                lines.append(f"    {name}: {value}")
        if decision.approvers:
            lines.append(f"    approvers: {', '.join(decision.approvers)}")
        if decision.edited_args is not None:
            lines.append(f"    edited args: {json.dumps(decision.edited_args)}")
    for kind_name, task in (
        ("delivery", handoff.delivery),
        ("resume", handoff.resume),
        ("message update", handoff.notify),
    ):
        if task.state is TaskState.NONE:
            continue
        error = f" ({task.last_error})" if task.last_error else ""
        lines.append(
            f"  {kind_name}: {task.state.value}, attempt {task.attempt}/{task.max_attempts}" + error
        )
    lines.append("  audit:")
    for event in audit:
        detail = f"  {json.dumps(event.detail, ensure_ascii=False)}" if event.detail else ""
        lines.append(f"    {_when(event.at)}  {event.event:<13} {event.actor}{detail}")
    return lines
