"""The bot token, the signing secret and the app token never appear in logs, even at debug
level and on failing paths: refused signatures and replays, malformed bodies, Slack API
errors (invalid_auth, 500s, reset connections) in the worker and in listeners, and Socket
Mode failing to connect.

The package's `handoff serve` and `handoff worker` run with ``-v`` (debug logging: slack_sdk
then logs every Web API request and answer); everything they print is read here, after the
other security tests have sent their traffic through them too.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from bot.log_redaction import install as install_redaction
from tests.conftest import ROOT
from tests.support.security_harness import FORM, InProcessBot, capturing, wait_quiet
from tests.support.slack_env import (
    ALICE,
    BOB,
    BOT_TOKEN,
    CHANNEL,
    SIGNING_SECRET,
    SlackEnv,
    wait_for,
)

APP_TOKEN = "xapp-1-A0SECURITY-1234567890-do-not-log-this-app-token"

SECRETS = {
    "bot token": BOT_TOKEN,
    "signing secret": SIGNING_SECRET,
    "app token": APP_TOKEN,
}


def _leaks(text: str) -> list[str]:
    """Which secrets (whole, or without their xoxb-/xapp- prefix) appear in ``text``."""
    found = []
    for name, secret in SECRETS.items():
        if secret in text or secret.split("-", 1)[1] in text:
            found.append(name)
    return found


def _failing_paths_through_the_processes(slack: SlackEnv, store_redis: Redis) -> None:
    standin = slack.standin
    # Slack refuses the token when the worker refreshes an App Home after posting.
    assert standin.send_app_home_opened(BOB).status == 200
    wait_for(lambda: standin.home(BOB))
    standin.fail_next("views.publish", error="invalid_auth")
    handoff_id = slack.refund_approval(reviewers=[BOB])
    message = slack.posted(handoff_id)
    wait_for(lambda: any(c.response.get("error") == "invalid_auth" for c in standin.calls()))

    # Slack refuses the token when a listener opens a modal.
    standin.fail_next("views.open", error="invalid_auth")
    assert standin.click(BOB, message, ids.REJECT).status == 200

    # Forged, replayed and malformed requests.
    with capturing(standin) as captured:
        standin.click(BOB, message, ids.APPROVE)
    [(headers, body)] = captured
    assert standin.send_signed(body, content_type=FORM, signature="v0=" + "1" * 64).status == 401
    timestamp, signature = int(headers["X-Slack-Request-Timestamp"]), headers["X-Slack-Signature"]
    for expected in (200, 401):
        sent = standin.send_signed(
            body, content_type=FORM, timestamp=timestamp, signature=signature
        )
        assert sent.status == expected
    assert standin.send_signed(b"payload=%7B", content_type=FORM).status == 400
    wait_quiet(store_redis, slack)


def test_serve_and_worker_at_debug_level_never_log_a_secret(
    slack: SlackEnv, store_redis: Redis
) -> None:
    _failing_paths_through_the_processes(slack, store_redis)

    logs = slack.logs()
    # The logs are at debug level, and the failing paths did run through them.
    assert "DEBUG" in logs and "Sending a request - url:" in logs
    assert "cannot refresh the Home" in logs and "invalid_auth" in logs
    assert "refused a request" in logs
    assert _leaks(logs) == []
    # The worker's lines are JSON objects (HANDOFF_LOG_FORMAT=json), with the handoff's id.
    lines = [json.loads(line) for line in _worker_log(slack).splitlines() if line.startswith("{")]
    assert {"DEBUG", "INFO", "WARNING"} <= {line["level"] for line in lines}
    assert any(line.get("handoff_id") for line in lines)
    assert any("invalid_auth" in line["message"] for line in lines)


def test_the_app_in_process_at_debug_level_never_logs_a_secret(
    slack: SlackEnv,
    bot: InProcessBot,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    message = slack.posted(handoff_id)
    with capturing(slack.standin) as captured:
        for action_id in (ids.REJECT, ids.EDIT, ids.APPROVE):
            slack.standin.click(ALICE, message, action_id)
    reject, edit, approve = (body for _, body in captured)

    caplog.set_level(logging.DEBUG)
    slack.standin.fail_next("views.open", error="invalid_auth")
    assert bot.post(reject).status == 200
    slack.standin.fail_next("views.open", reset_connection=True)
    assert bot.post(edit).status == 200  # the person is told to click again
    assert bot.post(approve, headers={"X-Slack-Signature": "v0=" + "2" * 64}).status == 401
    assert bot.post(b"payload=%5B" * 3).status == 400
    bot.post(f"command=%2Fhandoff&user_id={ALICE}&text=list&channel_id={CHANNEL}".encode())

    logged = caplog.text + "".join(capfd.readouterr())
    assert "invalid_auth" in logged and "Sending a request" in logged
    assert _leaks(logged) == []
    # The reset call is not repeated while Slack waits for the click's answer.
    assert [c.http_status for c in slack.standin.calls("views.open")][-2:] == [200, 0]


def test_socket_mode_failing_to_connect_never_logs_the_app_token(
    slack: SlackEnv, tmp_path: Path
) -> None:
    env = {**slack.env, "SLACK_APP_TOKEN": APP_TOKEN}
    log = tmp_path / "socket-mode.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "-v", "serve", "--socket-mode"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # It asks the stand-in for a WebSocket URL (apps.connections.open), which fails.
            wait_for(lambda: slack.standin.calls("apps.connections.open"), timeout=20)
            time.sleep(0.5)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            process.wait(timeout=10)
    text = log.read_text(errors="replace")
    assert "apps.connections.open" in text or "unknown_method" in text, text[-2000:]
    assert _leaks(text) == []


def test_a_secret_logged_by_mistake_is_redacted_in_message_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The second line of defence `handoff` installs: were a library (or we) to log a
    secret or any Slack token, the line shows ``[redacted]`` instead."""
    careless = logging.getLogger("some.library")
    undo = install_redaction([BOT_TOKEN, SIGNING_SECRET, APP_TOKEN, None, "short"])
    try:
        with caplog.at_level(logging.DEBUG):
            careless.debug("POST /api/chat.postMessage token=%s", BOT_TOKEN)
            careless.info("signing with %s", SIGNING_SECRET)
            careless.info("headers: {'Authorization': 'Bearer xoxb-another-workspace-9'}")
            try:
                raise RuntimeError(f"cannot connect with {APP_TOKEN}")
            except RuntimeError:
                careless.exception("socket mode failed")
    finally:
        undo()
    assert _leaks(caplog.text) == []
    assert "xoxb-another-workspace-9" not in caplog.text
    assert caplog.text.count("[redacted]") == 4
    assert "RuntimeError: cannot connect with [redacted]" in caplog.text
    assert "short" not in caplog.text  # nothing else was touched: short values are ignored


def _worker_log(slack: SlackEnv) -> str:
    return "".join(p.read_text(errors="replace") for p in slack.log_dir.glob("worker-*.log"))


def test_json_log_lines_never_hold_a_secret(tmp_path: Path) -> None:
    """With HANDOFF_LOG_FORMAT=json, a secret in a message, in an ``extra=`` field (a string,
    or inside another value) or in a traceback is redacted, or left out, in the JSON line."""
    script = (
        "import logging\n"
        "from bot.cli import main\n"
        "@main.command()\n"
        "def leak():\n"
        "    log = logging.getLogger('x')\n"
        f"    log.warning('token=%s', {BOT_TOKEN!r}, extra={{'handoff_id': 'h_1', "
        f"'user': 'U0ALICE', 'event': 'posted', 'header': 'Bearer ' + {BOT_TOKEN!r}, "
        f"'settings': {{'secret': {SIGNING_SECRET!r}}}}})\n"
        "    try:\n"
        f"        raise RuntimeError('cannot connect with ' + {APP_TOKEN!r})\n"
        "    except RuntimeError:\n"
        "        log.exception('socket mode failed', extra={'run_id': 'run-1'})\n"
        "main(['leak'])\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_APP_TOKEN": APP_TOKEN,
        "HANDOFF_LOG_FORMAT": "json",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert _leaks(done.stderr) == [], done.stderr
    warning, failure = [json.loads(line) for line in done.stderr.splitlines()]
    assert warning["message"] == "token=[redacted]"
    assert warning["header"] == "Bearer [redacted]"
    assert "settings" not in warning  # not a plain value: never redacted, so left out
    context = (warning["handoff_id"], warning["user"], warning["event"])
    assert context == ("h_1", "U0ALICE", "posted")
    assert failure["run_id"] == "run-1" and failure["level"] == "ERROR"
    assert "RuntimeError: cannot connect with [redacted]" in failure["exception"]


def test_handoff_installs_the_redaction_for_its_commands(tmp_path: Path) -> None:
    """`handoff` reads the secrets from its settings before any command runs."""
    script = (
        "import logging, sys\n"
        "from bot.cli import main\n"
        "@main.command()\n"
        "def leak():\n"
        f"    logging.getLogger('x').warning('secret=%s token=%s', {SIGNING_SECRET!r}, "
        f"{BOT_TOKEN!r})\n"
        "main(['leak'])\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert "secret=[redacted] token=[redacted]" in done.stderr, done.stderr
