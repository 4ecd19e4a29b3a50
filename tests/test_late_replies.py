"""A reply to a request that has no time left before Slack's answer is due is posted once
the request is answered, not dropped: a response_url takes posts for 30 minutes, and a
click that lost a race under load was otherwise never told who won."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from bot.slack_client import TimelyRespond, start_answer_clock


class _ResponseUrl(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def response_url() -> Iterator[tuple[str, list[dict[str, object]]]]:
    received: ClassVar[list[dict[str, object]]] = []
    handler = type("Handler", (_ResponseUrl,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/response/1", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_reply_with_no_time_left_is_posted_after_the_answer_not_dropped(
    response_url: tuple[str, list[dict[str, object]]],
) -> None:
    url, received = response_url
    respond = TimelyRespond(response_url=url)
    start_answer_clock(0.0)  # the request's budget is spent already

    started = time.monotonic()
    assert respond(text="Already approved by <@U0ALICE>.", response_type="ephemeral") is None
    assert time.monotonic() - started < 0.1  # it held nothing up

    deadline = time.monotonic() + 10
    while not received:
        assert time.monotonic() < deadline, "the late reply never came"
        time.sleep(0.02)
    assert received == [{"text": "Already approved by <@U0ALICE>.", "response_type": "ephemeral"}]


def test_a_reply_in_time_is_posted_before_the_call_returns(
    response_url: tuple[str, list[dict[str, object]]],
) -> None:
    url, received = response_url
    start_answer_clock(3.0)
    response = TimelyRespond(response_url=url)(text="Recorded.")
    assert response is not None and response.status_code == 200
    assert received == [{"text": "Recorded."}]
