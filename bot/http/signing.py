"""Slack's request signatures: ``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{raw body}``.

Checked on the raw bytes, before anything of the body is decoded or parsed, so a request
that did not come from Slack is refused whatever it contains (even bytes that are not
UTF-8). A signature is only good for ``MAX_AGE_SECONDS`` around its timestamp, either way.

Example::

    signature = sign("my-secret", "1531420618", body)
    assert verify("my-secret", body, timestamp="1531420618", signature=signature,
                  now=1531420618)
"""

from __future__ import annotations

import hashlib
import hmac
import time

MAX_AGE_SECONDS = 300
"""How far a request's timestamp may be from now, in the past or the future (Slack: 5 min)."""

_VERSION = b"v0"


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature Slack sends with ``body`` at ``timestamp`` (``X-Slack-Signature``)."""
    base = _VERSION + b":" + timestamp.encode("ascii") + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return f"{_VERSION.decode()}={digest}"


def request_time(timestamp: str | None) -> int | None:
    """``X-Slack-Request-Timestamp`` as seconds, or None when it is missing or not a number."""
    if not timestamp or not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return None
    return int(timestamp)


def verify(
    secret: str,
    body: bytes,
    *,
    timestamp: str | None,
    signature: str | None,
    now: float | None = None,
) -> bool:
    """True when ``signature`` is Slack's for ``body`` and ``timestamp`` is fresh."""
    sent_at = request_time(timestamp)
    if sent_at is None or not signature or not signature.isascii():
        return False
    if abs((time.time() if now is None else now) - sent_at) > MAX_AGE_SECONDS:
        return False
    expected = sign(secret, timestamp or "", body)
    return hmac.compare_digest(expected.encode(), signature.encode())
