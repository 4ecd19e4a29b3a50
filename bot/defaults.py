"""Default values of the Slack side, each in one place (the store's are in ``store.defaults``)."""

SLASH_COMMAND = "/handoff"
"""The slash command the app answers (``HANDOFF_SLASH_COMMAND``; the manifest registers it)."""

USERGROUP_CACHE_SECONDS = 300
"""How long the workspace's user groups and their members are cached in Redis."""

CHANNEL_MEMBERS_CACHE_SECONDS = 300
"""How long a channel's members are cached in Redis (who may decide handoffs naming no
reviewers, with ``HANDOFF_ALLOW_ANY_CHANNEL_MEMBER``)."""

ADMIN_CACHE_SECONDS = 300
"""How long Slack's answer to "is this person a workspace admin or owner" is cached."""

SLACK_API_URL = "https://slack.com/api/"
"""Where the Web API is; the stand-in's address in ``handoff dev`` and the tests."""

SLACK_TIMEOUT_SECONDS = 10
"""Longest wait for one Web API answer."""

SLACK_HISTORY_CALLS_PER_MINUTE = 1.0
"""Calls a minute to ``conversations.history`` (and, apart, to ``conversations.replies``)
the whole deployment makes, to find a post whose answer was lost: Slack allows apps outside
the Marketplace one. A Marketplace app may raise it (Slack's tier 3: 50)."""

SLACK_HISTORY_PAGE_SIZE = 15
"""Messages asked for per page of those methods (Slack gives apps outside the Marketplace
15 at most)."""

SLACK_CLOCK_SKEW_SECONDS = 10.0
"""How far Slack's clock (message ts) may be from Redis's: a look-up for a lost post reads
this much more on each side of the time the post was tried."""

MENTION_NAME_LOOKUP_SECONDS = 0.5
"""Longest a thread answer waits for ``users.info`` to name the people it mentions (the
answer is taken with ``@U123`` for those not named by then): the event is answered within
Slack's 3 seconds."""

MENTION_NAME_LOOKUPS = 5
"""Most people a thread answer has named by ``users.info``; the others stay ``@U123``."""

SLACK_REQUEST_TIMEOUT_SECONDS = 2.0
"""Longest wait for one Web API answer while Slack waits for ours (a click, a command, an
event: Slack gives 3 seconds, and a ``trigger_id`` dies after 3): such calls are not
retried either; the person is told to try again instead."""

SLACK_ANSWER_BUDGET_SECONDS = 2.5
"""Longest all the Web API calls made while Slack waits for one answer may take together
(each also within ``SLACK_REQUEST_TIMEOUT_SECONDS``): the rest of Slack's 3 seconds is the
bot's own work and the way back."""

JOINED_CHANNEL_SECONDS = 600
"""How long a worker takes the bot to still be in a public channel it joined before it
joins again before posting there (a bot removed from a channel is back within this long)."""


BOT_SCOPES: frozenset[str] = frozenset(
    {
        "chat:write",
        "commands",
        "chat:write.public",
        "channels:join",
        "im:write",
        "channels:history",
        "groups:history",
        "im:history",
        "users:read",
        "usergroups:read",
        "channels:read",
        "groups:read",
        "im:read",
        "mpim:read",
    }
)
"""The bot token scopes of ``manifest.yml`` (a test keeps them equal): what ``handoff check``
expects the token to have when it finds no manifest to read them from."""
