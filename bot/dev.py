"""`handoff dev`: the whole loop on one machine, with no Slack workspace and no Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import click
from redis import Redis

from bot.config import Settings
from bot.demo import RESUMED_LIST, start_demo_run
from bot.embedded import start_embedded_redis
from store.models import Handoff, RequestType
from worker.client import Handoffs

_RESUME_WAIT_SECONDS = 60


def run_dev(settings: Settings, *, data_dir: str, auto: bool) -> int:
    """Start Redis (embedded unless REDIS_URL is set) and a worker, run the demo agent,
    let the user decide its handoffs, and show the resumed run. Returns an exit code."""
    server = None
    url = settings.redis_url
    if not url:
        server = start_embedded_redis(Path(data_dir))
        url = server.connection_url
        click.echo(f"Embedded Redis at {url} (data kept in {data_dir}/)")
    env = {**os.environ, "REDIS_URL": url}
    worker = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "worker", "--name", f"dev-{uuid.uuid4().hex[:6]}"],
        env=env,
        start_new_session=True,
    )
    os.environ["REDIS_URL"] = url
    try:
        handoffs = Handoffs(Redis.from_url(url), namespace=settings.namespace)
        run_id = f"demo-run-{uuid.uuid4().hex[:8]}"
        click.echo(f"\nDemo agent started run {run_id}; it needs a person twice:\n")
        for handoff in start_demo_run(handoffs, run_id):
            _show(handoff)
            _decide(handoffs, handoff, auto=auto)
        return _report_resumes(handoffs.redis, expected=2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=10)
        if server is not None:
            server.stop()


def _show(handoff: Handoff) -> None:
    click.secho(f"[{handoff.request_type.value}] {handoff.id}", bold=True)
    click.echo(f"  context: {handoff.context}")
    payload = handoff.payload
    if payload.kind == "approval":
        click.echo(f"  action:  {payload.action.name} {json.dumps(payload.action.args)}")
    elif payload.kind == "question":
        click.echo(f"  question: {payload.question}")
        for number, choice in enumerate(payload.choices or [], start=1):
            click.echo(f"    {number}. {choice}")


def _decide(handoffs: Handoffs, handoff: Handoff, *, auto: bool) -> None:
    by = "U_DEV_REVIEWER"
    if handoff.request_type is RequestType.APPROVAL:
        approve = True if auto else click.confirm("  Approve?", default=True)
        outcome = "approved" if approve else "rejected"
        reason = None if approve else click.prompt("  Reason", default="not now")
        handoffs.decide(handoff.id, outcome, by=by, comment=reason, via="dev")
    else:
        choices = getattr(handoff.payload, "choices", None) or ["(no choices)"]
        answer = choices[0] if auto else click.prompt("  Your answer", default=choices[0])
        handoffs.decide(handoff.id, "answered", by=by, answer=answer, via="dev")
    click.echo(f"  -> {handoffs.get(handoff.id).status.value}\n")


def _report_resumes(redis: Redis, *, expected: int) -> int:
    for _ in range(expected):
        item = redis.blpop([RESUMED_LIST], timeout=_RESUME_WAIT_SECONDS)
        if item is None:
            click.secho("The worker did not resume the run in time; see its log above.", fg="red")
            return 1
        report = json.loads(item[1])
        click.secho(
            f"Run {report['run_id']} resumed: {report['request_type']} {report['status']} "
            f"by {report['decided_by']}"
            + (f", answer: {report['answer']}" if report["answer"] else "")
            + f" (attempt {report['attempt']})",
            fg="green",
        )
    return 0
