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

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from standardwebhooks import Webhook

from store.api_keys import ApiKeys
from store.models import Handoff
from store.public import HandoffView
from store.repository import HandoffStore
from worker.outbound import UnsafeUrl, check_url
from worker.tracing import propagation_headers

if TYPE_CHECKING:
    # Imported where a callback is sent: it costs every worker ~0.2 s to import, and most
    # deployments send none.
    import httpx

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
        # The agent's trace (traceparent), continued by whoever receives the decision.
        **propagation_headers(handoff.trace_context),
    }
    extensions = {}
    if checked.address is not None:
        # Connected to the checked address; the receiver still sees its own name (the
        # Host header, and the TLS server name its certificate is checked against).
        headers["host"] = _host_header(checked.url)
        extensions["sni_hostname"] = checked.host
    import httpx

    try:
        status = asyncio.run(
            _post(checked.pinned_url(), body.encode(), headers, extensions, config)
        )
    except TimeoutError:
        raise WebhookFailed(
            f"callback to {checked.host} did not answer within {config.timeout_seconds:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise WebhookFailed(
            f"callback to {checked.host} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not 200 <= status < 300:
        raise WebhookFailed(f"callback to {checked.host} answered {status}, not 2xx")
    return status


async def _post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    extensions: dict[str, str],
    config: WebhookConfig,
) -> int:
    """POST within ``config.timeout_seconds`` in all: httpx's timeouts bound each read, so a
    receiver dripping a byte a second would hold the worker until the job's own timeout;
    ``asyncio.timeout`` bounds the whole exchange."""
    import httpx

    async with asyncio.timeout(config.timeout_seconds):
        async with (
            httpx.AsyncClient(timeout=config.timeout_seconds, follow_redirects=False) as client,
            client.stream(
                "POST", url, content=body, headers=headers, extensions=extensions
            ) as answer,
        ):
            await _read_some(answer)
            return answer.status_code


def _host_header(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc.rpartition("@")[2]


async def _read_some(answer: httpx.Response) -> bytes:
    """At most ``MAX_RESPONSE_BYTES`` of the answer: a receiver cannot make the worker
    read a huge body."""
    taken = b""
    async for chunk in answer.aiter_raw():
        taken += chunk
        if len(taken) >= MAX_RESPONSE_BYTES:
            break
    return taken[:MAX_RESPONSE_BYTES]


__all__ = ["UnsafeUrl", "WebhookConfig", "WebhookFailed", "send_callback", "webhook_id"]
