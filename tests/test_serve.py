"""The WSGI app of `handoff serve`: health check, routing, and the gate before Bolt."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bot.config import Settings
from bot.serve import build_wsgi_app
from tests.conftest import ROOT, wait_until
from tests.support.slack_env import free_port

SECRET = "server-test-signing-secret"


def _call(app: Any, method: str, path: str, body: bytes = b"") -> tuple[str, dict[str, Any]]:
    answered: list[str] = []
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    raw = b"".join(app(environ, lambda status, headers: answered.append(status)))
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = {"text": raw.decode()}
    return answered[0], parsed


def _app(redis_url: str) -> Any:
    return build_wsgi_app(
        Settings(
            slack_bot_token="xoxb-server-test",
            slack_signing_secret=SECRET,
            redis_url=redis_url,
            slack_api_url="http://127.0.0.1:9/api/",
        )
    )


def test_healthz_is_ok_when_redis_answers(redis_url: str) -> None:
    status, body = _call(_app(redis_url), "GET", "/healthz")

    assert status == "200 OK"
    assert body == {"ok": True, "redis": "ok"}


def test_healthz_is_503_without_naming_the_redis_server_when_it_is_down() -> None:
    status, body = _call(_app("redis://127.0.0.1:9/0"), "GET", "/healthz")

    assert status == "503 Service Unavailable"
    assert body == {"ok": False, "redis": "unavailable"}
    assert "127.0.0.1" not in json.dumps(body)


def test_other_paths_are_not_found(redis_url: str) -> None:
    app = _app(redis_url)

    assert _call(app, "GET", "/slack/events")[0] == "404 Not Found"
    assert _call(app, "POST", "/elsewhere", b"{}")[0] == "404 Not Found"


def test_an_unsigned_post_is_refused_before_bolt(redis_url: str) -> None:
    status, body = _call(_app(redis_url), "POST", "/slack/events", b'{"type": "url_verification"}')

    assert status == "401 Unauthorized"
    assert body == {"error": "invalid request"}


def test_handoff_serve_starts_without_a_warning(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": redis_url,
        "SLACK_BOT_TOKEN": "xoxb-serve-test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": "http://127.0.0.1:9/api/",
    }
    env.pop("SLACK_APP_TOKEN", None)
    command = ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    stderr_path = tmp_path / "serve.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", *command],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        # /healthz answers once a worker has built its app (create_app ran twice by then:
        # the fail-fast check, and the worker's own).
        wait_until(lambda: _healthz(port) == 200, timeout=60)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    log = stderr_path.read_text()

    assert "Booting worker" in log
    assert "will be unused" not in log
    assert " WARNING " not in log
    assert "Traceback" not in log


def _healthz(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return int(answer.status)
    except OSError:
        return None
