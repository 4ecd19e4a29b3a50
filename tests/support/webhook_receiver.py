"""A webhook receiver on a loopback port, as an agent in another language would run one:
it verifies each callback's Standard Webhooks signature and answers as a test scripts it
(a status, or silence until the sender gives up)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook

HANG = -1
"""An answer that never comes (the receiver holds the connection)."""


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    verified: Any
    """What ``standardwebhooks`` verified (the parsed body), or the exception it raised."""


@dataclass
class Receiver:
    secret: str
    answers: list[int] = field(default_factory=list)
    """Scripted answers, in order; after them, 200."""
    received: list[Received] = field(default_factory=list)
    url: str = ""
    location: str = ""
    """Where a scripted 3xx answer points (``Location``)."""
    stop: threading.Event = field(default_factory=threading.Event)

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.received)


@contextmanager
def webhook_receiver(
    secret: str, answers: list[int] | None = None, *, location: str = ""
) -> Iterator[Receiver]:
    receiver = Receiver(secret=secret, answers=list(answers or []), location=location)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                verified: Any = Webhook(receiver.secret).verify(body, headers)
            except Exception as exc:
                verified = exc
            receiver.received.append(Received(headers, body, verified))
            answer = receiver.answers.pop(0) if receiver.answers else 200
            if answer == HANG:
                receiver.stop.wait(60)
                return
            self.send_response(answer)
            if 300 <= answer < 400:
                self.send_header("location", receiver.location)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/handoff"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.stop.set()
        server.shutdown()
        server.server_close()
