"""The answer to a signed request the replay guard could not check because Redis is down.

Such a request is not run (it may be a replay), nothing is recorded, and it is answered so
that it is tried again, in the way each kind of request allows:

- an event: 503. Slack delivers it again (at once, after a minute, after five minutes), and
  the delivery that finds Redis back runs, as the first one (``bot.http.replay``);
- a slash command: 200 with an ephemeral "try again" (Slack shows a command's answer);
- a modal submission: 200 with "try again" under its first input; the modal stays open;
- a click on a message: 200, and an ephemeral "try again" posted to its ``response_url``;
- anything else (a click on the App Home or in a modal, a submission without inputs): 503,
  which Slack shows as the app failing to answer. This layer holds no token to say more
  (the Home is republished with ``views.publish``, by the listeners).

The words are those the listeners use when the store is down (``handlers.decisions``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from slack_sdk.webhook import WebhookClient

logger = logging.getLogger(__name__)

TRY_AGAIN = (
    "slack-handoff cannot reach its database right now, so nothing was recorded. "
    "Please try again in a minute."
)
"""What the person is told (the same words as ``handlers.decisions.UNAVAILABLE``)."""

RESPONSE_URL_TIMEOUT_SECONDS = 2
"""How long the post to a click's response_url may take: the click is answered after it,
and Slack waits 3 seconds for that answer."""

SERVICE_UNAVAILABLE = "503 Service Unavailable"


@dataclass(frozen=True)
class TryAgain:
    """How to answer: the status line, the JSON body (None: an empty body), and the
    response_url to post "try again" to first, if any."""

    status: str
    body: dict[str, Any] | None
    response_url: str | None = None


def try_again(body: dict[str, Any]) -> TryAgain:
    """The answer to an unchecked request, from its parsed ``body``."""
    kind = body.get("type")
    if kind is None and "command" in body:
        return TryAgain("200 OK", {"response_type": "ephemeral", "text": TRY_AGAIN})
    if kind == "view_submission":
        block_id = _first_input_block(body.get("view") or {})
        if block_id is not None:
            return TryAgain(
                "200 OK", {"response_action": "errors", "errors": {block_id: TRY_AGAIN}}
            )
    response_url = body.get("response_url")
    if kind == "block_actions" and isinstance(response_url, str) and response_url:
        return TryAgain("200 OK", None, response_url=response_url)
    return TryAgain(SERVICE_UNAVAILABLE, {"error": "try again"})


def tell(response_url: str) -> None:
    """Post "try again" to a click's response_url, as an ephemeral reply that leaves the
    message as it is (as the listeners' replies do)."""
    client = WebhookClient(response_url, timeout=RESPONSE_URL_TIMEOUT_SECONDS, retry_handlers=[])
    try:
        sent = client.send_dict(
            {"text": TRY_AGAIN, "response_type": "ephemeral", "replace_original": False}
        )
    except Exception as exc:  # a courtesy: the click is refused whether or not it is heard
        logger.warning("could not say 'try again' through the response_url: %s", type(exc).__name__)
        return
    if sent.status_code != 200:
        logger.warning("the response_url refused 'try again': HTTP %s", sent.status_code)


def _first_input_block(view: dict[str, Any]) -> str | None:
    # Slack shows errors under input blocks only; it may send null for an empty list.
    for block in view.get("blocks") or []:
        if isinstance(block, dict) and block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return None
