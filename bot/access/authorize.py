"""Who the bot is in Slack (``auth.test``), for Bolt's authorization step.

Bolt's single-workspace authorization calls ``auth.test`` on each process's first request
and answers that request with HTTP 500 when Slack does not answer in time, so a person's
click fails because Slack was slow for an unrelated call. ``BotIdentity`` asks once and
remembers the answer; while Slack gives none, requests go on without the bot's user id (used
only to skip the bot's own events, and the listeners ignore bots' messages anyway) and a
later request asks again.
"""

from __future__ import annotations

import logging

from slack_bolt import BoltContext
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.authorize import Authorize
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.slack_client import AMBIGUOUS_ERRORS, metered

logger = logging.getLogger(__name__)


class BotIdentity(Authorize):
    """Bolt ``authorize`` for the one workspace of ``token``, tolerant of a slow Slack.

    Example: ``App(client=tokenless_client, authorize=BotIdentity(token))``.
    """

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self._known: AuthorizeResult | None = None

    def __call__(
        self,
        *,
        context: BoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult:
        """The bot's token and ids, with the requesting person's ``user_id``."""
        known = self._known or self._ask(context.client)
        if known is None:
            return AuthorizeResult(
                enterprise_id=enterprise_id, team_id=team_id, bot_token=self.token, user_id=user_id
            )
        return AuthorizeResult(
            enterprise_id=known.enterprise_id,
            team_id=known.team_id,
            bot_id=known.bot_id,
            bot_user_id=known.bot_user_id,
            bot_token=self.token,
            user_id=user_id,
        )

    def _ask(self, client: WebClient) -> AuthorizeResult | None:
        try:
            answer = metered(client).auth_test(token=self.token)
        except SlackApiError as exc:
            if exc.response.status_code < 429:
                raise  # Slack answered (say, invalid_auth): Bolt tells the person
            logger.warning("auth.test failed (%s); going on without the bot's ids", exc)
            return None
        except AMBIGUOUS_ERRORS as exc:
            logger.warning("auth.test got no answer (%s); going on without the bot's ids", exc)
            return None
        self._known = AuthorizeResult.from_auth_test_response(
            bot_token=self.token, auth_test_response=answer
        )
        return self._known
