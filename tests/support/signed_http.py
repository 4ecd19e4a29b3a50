"""Slack's side of a load test: many signed POSTs at once to several `handoff serve` processes.

The stand-in's own ``send_signed`` opens a connection per request, which is right for a
person acting but costs the test process more CPU than the bot spends under a storm of
thousands. ``SignedSender`` keeps one connection per thread and server, and signs each
body exactly as Slack does, with the time it is sent.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from slack_sdk.signature import SignatureVerifier

from bot.standin.server import USER_AGENT

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
FRESH_SECONDS = 1.0
"""A connection idle longer than this is opened again before use: the server closes idle
keep-alive connections (gunicorn after 5 s), and a POST sent as it does so may be lost."""


@dataclass(frozen=True)
class Answer:
    """The bot's HTTP answer to one signed request."""

    status: int
    body: bytes


class SignedSender:
    """POSTs bodies signed with ``signing_secret``, over keep-alive connections.

    Example::

        sender = SignedSender(SIGNING_SECRET)
        answer = sender.post("http://127.0.0.1:3000/slack/events", body, FORM)
    """

    def __init__(self, signing_secret: str, *, timeout: float = 10.0) -> None:
        self._verifier = SignatureVerifier(signing_secret)
        self._timeout = timeout
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def post(self, url: str, body: bytes, content_type: str) -> Answer:
        """Sign ``body`` now and POST it to ``url``. A connection the server had closed is
        opened again (it read nothing of the request); one dropped once the request is sent
        fails loudly rather than being retried (the bot may have acted on it)."""
        parts = urlsplit(url)
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": content_type,
            "User-Agent": USER_AGENT,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": self._verifier.generate_signature(timestamp=timestamp, body=body),
        }
        connection = self._connection(parts.netloc)
        try:
            connection.request("POST", parts.path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            connection = self._connection(parts.netloc, reopen=True)
            connection.request("POST", parts.path, body=body, headers=headers)
        response = connection.getresponse()
        answer = Answer(response.status, response.read())
        self._local.used[parts.netloc] = time.monotonic()
        return answer

    def close(self) -> None:
        """Close every connection opened so far."""
        with self._lock:
            for connection in self._all:
                connection.close()
            self._all.clear()
        self._local = threading.local()

    def _connection(self, netloc: str, *, reopen: bool = False) -> http.client.HTTPConnection:
        """This thread's connection to ``netloc``, opened again if it has been idle long."""
        connections: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "by_server", {}
        )
        used: dict[str, float] = self._local.__dict__.setdefault("used", {})
        idle = time.monotonic() - used.get(netloc, 0.0)
        if netloc in connections and (reopen or idle > FRESH_SECONDS):
            connections.pop(netloc).close()
        if netloc not in connections:
            connection = http.client.HTTPConnection(netloc, timeout=self._timeout)
            connections[netloc] = connection
            used[netloc] = time.monotonic()
            with self._lock:
                self._all.append(connection)
        return connections[netloc]
