"""Resume any agent: POST the decided handoff to its ``callback`` URL, signed per the
Standard Webhooks specification (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``) with the webhook secret of the API key that created it.

A 2xx answer completes the resume; anything else raises, and the resume task retries with
backoff like any resume (same lease, attempts, ``resume_failed``, ``handoff retry``). Every
attempt sends the same ``webhook-id`` so a receiver can drop a repeat. The URL is checked
again before each send and the connection goes to the checked address (``worker.outbound``);
no redirect is followed and at most ``MAX_RESPONSE_BYTES`` of the answer are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from store.api_keys import ApiKeys
from store.models import Handoff
from store.public import HandoffView
from store.repository import HandoffStore
from worker.outbound import UnsafeUrl, check_url

MAX_RESPONSE_BYTES = 4096
USER_AGENT = "slack-handoff-webhooks/1"


class WebhookFailed(Exception):
    """The receiver did not take the callback (answer, timeout, refused URL)."""


@dataclass(frozen=True)
class WebhookConfig:
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    timeout_seconds: float = 10.0


def webhook_id(handoff: Handoff) -> str:
    """The id every attempt of this handoff's callback carries (receivers deduplicate on it)."""
    return f"msg_{handoff.id}"


def send_callback(store: HandoffStore, handoff: Handoff, config: WebhookConfig) -> int:
    """POST ``handoff`` to its callback; returns the receiver's status. Raises
    ``WebhookFailed`` (or ``UnsafeUrl``) when the receiver did not take it."""
    assert handoff.callback is not None
    key = ApiKeys(store.redis, store.keys).get(handoff.api_key or "")
    if key is None:
        raise WebhookFailed(
            f"the API key {handoff.api_key!r} that created the handoff is revoked: there is "
            "no secret to sign its callback with"
        )
    checked = check_url(handoff.callback.url, allowed_hosts=config.allowed_hosts)
    body = HandoffView.of(handoff).model_dump_json()
    message_id = webhook_id(handoff)
    sent_at = datetime.now(UTC)
    signature = Webhook(key.webhook_secret).sign(message_id, sent_at, body)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signature,
    }
    extensions = {}
    if checked.address is not None:
        # Connected to the checked address; the receiver still sees its own name (the
        # Host header, and the TLS server name its certificate is checked against).
        headers["host"] = _host_header(checked.url)
        extensions["sni_hostname"] = checked.host
    try:
        with (
            httpx.Client(timeout=config.timeout_seconds, follow_redirects=False) as client,
            client.stream(
                "POST",
                checked.pinned_url(),
                content=body.encode(),
                headers=headers,
                extensions=extensions,
            ) as answer,
        ):
            _read_some(answer)
            status = answer.status_code
    except httpx.HTTPError as exc:
        raise WebhookFailed(
            f"callback to {checked.host} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not 200 <= status < 300:
        raise WebhookFailed(f"callback to {checked.host} answered {status}, not 2xx")
    return status


def _host_header(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc.rpartition("@")[2]


def _read_some(answer: httpx.Response) -> bytes:
    """At most ``MAX_RESPONSE_BYTES`` of the answer: a receiver cannot make the worker
    read a huge body."""
    taken = b""
    for chunk in answer.iter_raw():
        taken += chunk
        if len(taken) >= MAX_RESPONSE_BYTES:
            break
    return taken[:MAX_RESPONSE_BYTES]


__all__ = ["UnsafeUrl", "WebhookConfig", "WebhookFailed", "send_callback", "webhook_id"]
