"""The App Home tab: published when a person opens it; its buttons are the channel message's.

The Home shows each handoff with the very buttons of its channel message (same action ids
and values), so a click on the Home goes to the listeners of ``handlers.actions`` and through
the same exactly-once decision as a click in the channel.

One difference: Slack sends no ``response_url`` with a click on a Home tab, so the
listeners' ``respond`` (their private "already decided" or "only @alice can decide this"
answers) cannot work there. The middleware ``RespondOnHome`` gives such requests a
``respond`` that shows the answer as a notice on top of the republished Home instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from slack_bolt import App, BoltRequest, BoltResponse, Respond
from slack_bolt.middleware import Middleware
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookResponse

from bot.blockkit import home
from bot.delivery.home_publisher import Homes
from bot.slack_client import AMBIGUOUS_ERRORS
from handlers.decisions import STORE_DOWN, UNAVAILABLE
from handlers.deps import HandlerDeps, deps_of

logger = logging.getLogger(__name__)

_SLACK_FAILURES: tuple[type[Exception], ...] = (SlackApiError, *AMBIGUOUS_ERRORS)
"""What a Web API call may raise: Slack's refusal, or no answer at all."""


def register(app: App) -> None:
    """Attach the Home listener and the Home ``respond`` middleware to ``app``."""
    app.middleware(RespondOnHome())
    app.event("app_home_opened")(on_home_opened)


def on_home_opened(event: dict[str, Any], client: WebClient, context: dict[str, Any]) -> None:
    """Publish the viewer's Home: their queue and their recent decisions."""
    if event.get("tab", "home") != "home":
        return  # the Messages tab
    deps = deps_of(context)
    user = str(event["user"])
    homes = homes_of(deps)
    # The hash of the Home the person sees now: a publish that lands meanwhile changes it.
    shown_hash = (event.get("view") or {}).get("hash") or None
    try:
        homes.opened(user)
        homes.publish(client, user, view_hash=shown_hash)
    except STORE_DOWN:
        logger.exception("store unavailable while publishing a Home", extra={"user": user})
        publish_unavailable(client, user, UNAVAILABLE, command=deps.slash_command)
    except SlackApiError as exc:
        logger.warning("views.publish failed for %s: %s", user, exc.response.get("error"))
    except AMBIGUOUS_ERRORS as exc:
        # No answer from Slack (reset, timeout): the event still gets its 200. The notice
        # goes with the hash of the Home as it was opened, so it replaces nothing newer
        # (should the Home have been published after all, Slack refuses the notice).
        logger.warning("views.publish got no answer for %s: %s", user, type(exc).__name__)
        publish_unavailable(
            client, user, SLACK_NO_ANSWER, command=deps.slash_command, view_hash=shown_hash
        )


SLACK_NO_ANSWER = (
    "Slack did not answer in time, so your Home could not be refreshed. "
    "Please open the Home tab again in a moment."
)


def publish_unavailable(
    client: WebClient, user: str, notice: str, *, command: str, view_hash: str | None = None
) -> None:
    """Show ``notice`` alone on the Home: it cannot be built while the store is down (or
    Slack did not answer); with ``view_hash``, only over the Home of that hash."""
    try:
        client.views_publish(
            user_id=user,
            view=home.render_home_unavailable(notice, command=command),
            **({"hash": view_hash} if view_hash else {}),
        )
    except Exception:  # Slack unreachable too: nothing more to show the person
        logger.exception("views.publish of the unavailable notice failed", extra={"user": user})


def homes_of(deps: HandlerDeps) -> Homes:
    """The Home publisher for the app's store and policies."""
    return Homes(deps.store, deps.reviewers, command=deps.slash_command)


class RespondOnHome(Middleware):
    """Bolt middleware: for a click on a Home tab, ``respond`` republishes the Home with
    the message as a notice (there is no response_url to answer through). A ``Middleware``
    subclass, so Bolt does not build injectable arguments for it on every request."""

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse | None:
        if is_home_click(req.body):
            context = req.context
            context["respond"] = HomeNotice(
                homes_of(deps_of(context)), context.client, str(req.body["user"]["id"])
            )
        return next()


def is_home_click(body: dict[str, Any]) -> bool:
    """True for an interaction from a Home tab (which comes without a response_url)."""
    view = body.get("view") or {}
    return (
        body.get("type") == "block_actions"
        and view.get("type") == "home"
        and not body.get("response_url")
    )


class HomeNotice(Respond):
    """A ``respond`` for Home clicks: the text becomes a notice on the republished Home."""

    def __init__(self, homes: Homes, client: WebClient, user_id: str) -> None:
        super().__init__(response_url=None)
        self.homes = homes
        self.client = client
        self.user_id = user_id

    def __call__(
        self,
        text: str | dict[str, Any] = "",
        blocks: Sequence[Any] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> WebhookResponse:
        """Republish the Home with ``text`` on top; blocks and message options do not apply."""
        notice = text.get("text", "") if isinstance(text, dict) else text
        try:
            self.homes.publish(self.client, self.user_id, notice=str(notice) or None)
        except STORE_DOWN:
            publish_unavailable(self.client, self.user_id, UNAVAILABLE, command=self.homes.command)
        except _SLACK_FAILURES as exc:  # the click must still get its 200
            logger.warning("the Home notice for %s failed: %s", self.user_id, exc)
        return WebhookResponse(url="", status_code=200, body="ok", headers={})
