"""`handoff dev`: the whole loop on one machine, with no Slack workspace and no Redis.

It starts an embedded Redis (unless REDIS_URL is set), the local Slack stand-in, the bot
(`handoff serve`) and a worker, then runs a demo agent that asks for an approval and an
answer. You decide in the browser workbench the stand-in serves (Slack as a reviewer sees
it) or in the terminal; either way your choices travel to the bot exactly as Slack would send
them (signed clicks, modal submissions, a thread reply), and the resumed run reports what it
received. Run interactively, everything stays up afterwards for more (``--keep-running``);
``--auto`` decides for you and exits.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
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

from bot.blockkit import ids
from bot.config import Settings
from bot.dev.demo_agent import RESUMED_LIST, start_demo_run
from bot.dev.embedded_redis import start_embedded_redis
from bot.standin import Message, SlackStandIn, StandInUser, View
from store.models import Handoff, RequestType
from worker.client import Handoffs

DEV_CHANNEL = "C0DEVAPPROVALS"
DEV_REVIEWER = StandInUser("U0DEVREVIEWER", "you", real_name="You (reviewer)")
DEV_ADMIN = StandInUser("U0DEVADMIN", "ada", real_name="Ada", is_admin=True)
"""A handoff admin (also in HANDOFF_ADMINS): may run `/handoff list`, `cancel`, `stats`..."""
DEV_TEAMMATE = StandInUser("U0DEVTEAMMATE", "sam", real_name="Sam")
DEV_USERS = [DEV_REVIEWER, DEV_ADMIN, DEV_TEAMMATE]
"""The people of the stand-in workspace; the workbench's user switcher offers them."""
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
    """Run the demo end to end; returns the exit code.

    Interactive (not ``auto``), the demo waits for each decision from the workbench or the
    terminal, and everything keeps running afterwards, as with ``keep_running``.
    """
    keep_running = keep_running or not auto
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
        users=DEV_USERS,
        port=standin_port,
        channels={DEV_CHANNEL: "approvals"},
    )
    admins = ",".join(sorted(settings.admin_ids | {DEV_ADMIN.id}))
    standin.workbench.admins = frozenset(admins.split(","))
    standin.start()
    standin.bot_url = f"http://127.0.0.1:{port}/slack/events"
    click.echo(f"Local Slack stand-in at {standin.url}; bot at {standin.bot_url}")
    if keep_running:
        click.secho(
            f"Workbench (Slack as a reviewer sees it): {standin.url}  - open it in a browser",
            bold=True,
        )
    env = _child_env(redis_url, standin.api_url, signing_secret, admins=admins)
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
            if auto:
                _decide(standin, handoffs, handoff, message, choice=_auto_choice(handoff))
            else:
                _decide_interactively(standin, handoffs, handoff, message)
        code = _report_resumes(handoffs.redis, expected=len(demo))
        for handoff in demo:
            click.echo(
                "\nThe message now reads:\n"
                + render_text(_wait_updated(standin, handoffs, handoff.id))
            )
        if keep_running and code == 0:
            click.echo(
                f"\nStill running: REDIS_URL={redis_url} (logs in {folder}). "
                "Create handoffs from your agent with Handoffs.from_url(...); they appear in "
                f"the workbench at {standin.url} (switch to {DEV_ADMIN.name} to try "
                "`/handoff list`). Ctrl-C stops."
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


def _auto_choice(handoff: Handoff) -> str:
    """What ``--auto`` decides: approve an approval, pick the first choice of a question."""
    if handoff.request_type is RequestType.APPROVAL:
        return "a"
    return (getattr(handoff.payload, "choices", None) or [""])[0]


def _decide_interactively(
    standin: SlackStandIn, handoffs: Handoffs, handoff: Handoff, message: Message
) -> None:
    """Wait for a decision in the workbench, or take one typed in the terminal."""
    if handoff.request_type is RequestType.APPROVAL:
        prompt = "Click a button in the workbench, or type [a]pprove, [r]eject or [e]dit"
        choices: list[str] | None = ["a", "r", "e"]
        default = "a"
    else:
        prompt = "Reply in the message's thread in the workbench, or type your answer"
        choices = None
        default = _auto_choice(handoff)
    choice = _browser_or_terminal(handoffs, handoff.id, prompt, choices, default)
    if choice is None:
        decided = handoffs.get(handoff.id)
        who = decided.resume_data.decided_by if decided.resume_data else "someone"
        click.secho(f"-> {decided.status.value} by {who} in the workbench\n", fg="green")
        return
    _decide(standin, handoffs, handoff, message, choice=choice)


def _browser_or_terminal(
    handoffs: Handoffs, handoff_id: str, prompt: str, choices: list[str] | None, default: str
) -> str | None:
    """A line typed in the terminal, or None as soon as the handoff is decided elsewhere.

    ``click.prompt`` would block on the terminal while a click in the browser decides the
    handoff, so this watches both: stdin (a tty here: ``--auto`` is forced otherwise) and the
    handoff's state.
    """
    click.echo(f"{prompt} [{default}]: ", nl=False)
    while True:
        if not handoffs.get(handoff_id).is_pending:
            click.echo()
            return None
        readable, _, _ = select.select([sys.stdin], [], [], 0.2)
        if not readable:
            continue
        line = sys.stdin.readline()
        if not line:  # end of input: nobody is typing, so only the workbench can decide
            while handoffs.get(handoff_id).is_pending:
                time.sleep(0.2)
            return None
        typed = line.strip() or default
        if choices is None or typed in choices:
            return typed
        click.echo(f"Type one of {', '.join(choices)} [{default}]: ", nl=False)


def _decide(
    standin: SlackStandIn, handoffs: Handoffs, handoff: Handoff, message: Message, *, choice: str
) -> None:
    """Act as the dev reviewer: ``choice`` is a/r/e for an approval, the answer otherwise."""
    user = DEV_REVIEWER.id
    if handoff.request_type is RequestType.APPROVAL:
        if choice == "a":
            standin.click(user, message, ids.APPROVE)
        elif choice == "r":
            standin.click(user, message, ids.REJECT)
            reason = click.prompt("Reason", default="Not without a manager's OK")
            standin.submit_view(user, _modal(standin), {ids.REASON_BLOCK: {ids.VALUE: reason}})
        else:
            _edit(standin, handoff, message)
    else:
        standin.post_message(user, message.channel, choice, thread_ts=message.ts)
    decided = handoffs.get(handoff.id)
    click.secho(f"-> {decided.status.value}\n", fg="green" if not decided.is_pending else "red")


def _edit(standin: SlackStandIn, handoff: Handoff, message: Message) -> None:
    user = DEV_REVIEWER.id
    standin.click(user, message, ids.EDIT)
    modal = _modal(standin)
    args = handoff.payload.action.args  # type: ignore[union-attr]
    while True:
        values = {}
        for name, value in args.items():
            shown = value if isinstance(value, str) else json.dumps(value)
            typed = click.prompt(f"  {name}", default=shown)
            values[ids.arg_block_id(name)] = {ids.VALUE: typed}
        response = standin.submit_view(user, modal, values)
        errors = response.json().get("errors") if response.body else None
        if not errors:
            return
        for block_id, error in errors.items():
            click.secho(f"  {block_id}: {error}", fg="red")


def _modal(standin: SlackStandIn) -> View:
    open_views = [v for v in standin.views(DEV_REVIEWER.id) if not v.closed]
    return open_views[-1]


def _child_env(redis_url: str, api_url: str, signing_secret: str, *, admins: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(
        {
            "REDIS_URL": redis_url,
            "SLACK_BOT_TOKEN": DEV_BOT_TOKEN,
            "SLACK_SIGNING_SECRET": signing_secret,
            "SLACK_API_URL": api_url,
            "HANDOFF_CHANNEL": DEV_CHANNEL,
            "HANDOFF_BLOCK_SELF_APPROVAL": "false",
            "HANDOFF_ADMINS": admins,
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
