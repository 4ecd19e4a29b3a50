"""`handoff dev`: the whole loop on one machine, with no Slack workspace and no Redis.

It starts an embedded Redis (unless REDIS_URL is set), the local Slack stand-in, the bot
(`handoff serve`) and a worker, then runs a demo agent that asks for an approval and an
answer. You decide in the terminal; your choices travel to the bot exactly as Slack would
send them (signed clicks, modal submissions, a thread reply), and the resumed run reports
what it received.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import click
from redis import Redis

from bot import views
from bot.config import Settings
from bot.demo import RESUMED_LIST, start_demo_run
from bot.embedded import start_embedded_redis
from bot.standin import Message, SlackStandIn, StandInUser, View
from store.models import Handoff, RequestType
from worker.client import Handoffs

DEV_CHANNEL = "C0DEVAPPROVALS"
DEV_REVIEWER = StandInUser("U0DEVREVIEWER", "you", real_name="You (reviewer)")
DEV_BOT_TOKEN = "xoxb-dev-standin"
_WAIT_SECONDS = 60


def run_dev(
    settings: Settings,
    *,
    data_dir: str,
    auto: bool,
    port: int,
    standin_port: int,
    keep_running: bool,
) -> int:
    """Run the demo end to end; returns the exit code."""
    # Keep the terminal for the demo; the services log to files in the data folder.
    logging.getLogger().setLevel(logging.WARNING)
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    server = None
    redis_url = settings.redis_url
    if not redis_url:
        server = start_embedded_redis(folder / "redis")
        redis_url = server.connection_url
        click.echo(f"Embedded Redis at {redis_url} (data kept in {folder / 'redis'})")
    signing_secret = secrets.token_hex(16)
    standin = SlackStandIn(
        signing_secret=signing_secret,
        bot_token=DEV_BOT_TOKEN,
        users=[DEV_REVIEWER],
        port=standin_port,
        channels={DEV_CHANNEL: "approvals"},
    )
    standin.start()
    standin.bot_url = f"http://127.0.0.1:{port}/slack/events"
    click.echo(f"Local Slack stand-in at {standin.url}; bot at {standin.bot_url}")
    env = _child_env(redis_url, standin.api_url, signing_secret)
    processes = [
        _spawn(
            ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], env, folder
        ),
        _spawn(["worker", "--name", f"dev-{uuid.uuid4().hex[:6]}"], env, folder),
    ]
    try:
        _wait_healthy(port, folder)
        handoffs = Handoffs(Redis.from_url(redis_url), namespace=settings.namespace)
        handoffs.redis.delete(RESUMED_LIST)
        run_id = f"demo-run-{uuid.uuid4().hex[:8]}"
        click.echo(f"\nThe demo agent started run {run_id}. It needs a person twice.\n")
        demo = start_demo_run(handoffs, run_id, channel=DEV_CHANNEL)
        for handoff in demo:
            message = _wait_posted(standin, handoffs, handoff.id)
            click.echo(render_text(message.blocks))
            _decide(standin, handoffs, handoff, message, auto=auto)
        code = _report_resumes(handoffs.redis, expected=len(demo))
        for handoff in demo:
            click.echo(
                "\nThe message now reads:\n"
                + render_text(_wait_updated(standin, handoffs, handoff.id))
            )
        if keep_running and code == 0:
            click.echo(
                f"\nStill running: REDIS_URL={redis_url} (logs in {folder}). "
                "Create handoffs from your agent with Handoffs.from_url(...). Ctrl-C stops."
            )
            with suppress(KeyboardInterrupt):
                while True:
                    time.sleep(1)
        return code
    finally:
        for process in processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        standin.stop()
        if server is not None:
            server.stop()


def render_text(blocks: list[dict[str, Any]]) -> str:
    """A terminal rendering of Block Kit: headers, sections, fields, context and buttons."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(click.style(block["text"]["text"], bold=True))
        elif kind == "section":
            if block.get("text"):
                lines.append(block["text"]["text"])
            for field in block.get("fields", []):
                lines.append("  " + field["text"].replace("\n", ": ", 1))
        elif kind == "context":
            lines.append(
                click.style(" ".join(e.get("text", "") for e in block["elements"]), dim=True)
            )
        elif kind == "actions":
            buttons = [
                f"[{e['text']['text']}]" for e in block["elements"] if e.get("type") == "button"
            ]
            lines.append(" ".join(buttons))
        elif kind == "divider":
            lines.append("-" * 40)
    return "\n".join(lines) + "\n"


def _decide(
    standin: SlackStandIn, handoffs: Handoffs, handoff: Handoff, message: Message, *, auto: bool
) -> None:
    user = DEV_REVIEWER.id
    if handoff.request_type is RequestType.APPROVAL:
        choice = (
            "a"
            if auto
            else click.prompt(
                "Click [a]pprove, [r]eject or [e]dit",
                type=click.Choice(["a", "r", "e"]),
                default="a",
            )
        )
        if choice == "a":
            standin.click(user, message, views.APPROVE)
        elif choice == "r":
            standin.click(user, message, views.REJECT)
            reason = click.prompt("Reason", default="Not without a manager's OK")
            standin.submit_view(user, _modal(standin), {views.REASON_BLOCK: {views.VALUE: reason}})
        else:
            _edit(standin, handoff, message)
    else:
        choices = getattr(handoff.payload, "choices", None) or [""]
        answer = (
            choices[0]
            if auto
            else click.prompt("Reply in the message's thread", default=choices[0])
        )
        standin.post_message(user, message.channel, answer, thread_ts=message.ts)
    decided = handoffs.get(handoff.id)
    click.secho(f"-> {decided.status.value}\n", fg="green" if not decided.is_pending else "red")


def _edit(standin: SlackStandIn, handoff: Handoff, message: Message) -> None:
    user = DEV_REVIEWER.id
    standin.click(user, message, views.EDIT)
    modal = _modal(standin)
    args = handoff.payload.action.args  # type: ignore[union-attr]
    while True:
        values = {}
        for name, value in args.items():
            shown = value if isinstance(value, str) else json.dumps(value)
            typed = click.prompt(f"  {name}", default=shown)
            values[views.arg_block_id(name)] = {views.VALUE: typed}
        response = standin.submit_view(user, modal, values)
        errors = response.json().get("errors") if response.body else None
        if not errors:
            return
        for block_id, error in errors.items():
            click.secho(f"  {block_id}: {error}", fg="red")


def _modal(standin: SlackStandIn) -> View:
    open_views = [v for v in standin.views(DEV_REVIEWER.id) if not v.closed]
    return open_views[-1]


def _child_env(redis_url: str, api_url: str, signing_secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(
        {
            "REDIS_URL": redis_url,
            "SLACK_BOT_TOKEN": DEV_BOT_TOKEN,
            "SLACK_SIGNING_SECRET": signing_secret,
            "SLACK_API_URL": api_url,
            "HANDOFF_CHANNEL": DEV_CHANNEL,
            "HANDOFF_BLOCK_SELF_APPROVAL": "false",
        }
    )
    return env


def _spawn(args: list[str], env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
    log = open(folder / f"{args[0]}.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [sys.executable, "-m", "bot.cli", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_healthy(port: int, folder: Path) -> None:
    deadline = time.monotonic() + _WAIT_SECONDS
    while time.monotonic() < deadline:
        with (
            suppress(OSError),
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.2)
    raise click.ClickException(f"the bot did not start; see {folder / 'serve.log'}")


def _wait_posted(standin: SlackStandIn, handoffs: Handoffs, handoff_id: str) -> Message:
    deadline = time.monotonic() + _WAIT_SECONDS
    while time.monotonic() < deadline:
        refs = handoffs.get(handoff_id).message_refs
        if refs.get("ts"):
            return standin.message(refs["channel"], refs["ts"])
        time.sleep(0.05)
    raise click.ClickException("the worker did not post the handoff; see worker.log")


def _wait_updated(
    standin: SlackStandIn, handoffs: Handoffs, handoff_id: str
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + _WAIT_SECONDS
    while (
        time.monotonic() < deadline and handoffs.get(handoff_id).notify.state.value != "completed"
    ):
        time.sleep(0.05)
    refs = handoffs.get(handoff_id).message_refs
    return standin.message(refs["channel"], refs["ts"]).blocks


def _report_resumes(redis: Redis, *, expected: int) -> int:
    for _ in range(expected):
        item = redis.blpop([RESUMED_LIST], timeout=_WAIT_SECONDS)
        if item is None:
            click.secho("The worker did not resume the run in time; see worker.log.", fg="red")
            return 1
        report = json.loads(item[1])
        details = ""
        if report["answer"]:
            details = f", answer: {report['answer']}"
        elif report["comment"]:
            details = f", reason: {report['comment']}"
        elif report.get("edited_args"):
            details = f", edited args: {json.dumps(report['edited_args'])}"
        click.secho(
            f"Run {report['run_id']} resumed: {report['request_type']} {report['status']} "
            f"by {report['decided_by']}{details} (attempt {report['attempt']})",
            fg="green",
        )
    return 0
