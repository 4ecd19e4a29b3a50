"""A local Slack stand-in: the Web API the bot calls, and people clicking what the bot posted.

Used by the tests and by ``handoff dev``. See ``SlackStandIn`` for an example, and
``README.md`` beside this file for which of Slack's behaviours it plays and which it does not.
"""

from bot.standin.records import (
    ApiCall,
    BotUnreachable,
    ElementNotFound,
    Ephemeral,
    Message,
    MessageVersion,
    Response,
    StandInError,
    StandInUser,
    View,
)
from bot.standin.server import SlackStandIn, interaction_body

__all__ = [
    "ApiCall",
    "BotUnreachable",
    "ElementNotFound",
    "Ephemeral",
    "Message",
    "MessageVersion",
    "Response",
    "SlackStandIn",
    "StandInError",
    "StandInUser",
    "View",
    "interaction_body",
]
