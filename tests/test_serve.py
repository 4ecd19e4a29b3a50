"""The WSGI app of `handoff serve`: health check, routing, and the gate before Bolt."""

from __future__ import annotations

import io
import json
from typing import Any

from bot.config import Settings
from bot.serve import build_wsgi_app

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
