"""The click benchmark's baseline: a Bolt app whose only listener acks an approve click.

It shares what every Bolt app pays for a request (WSGI adapter, signature check,
authorization, listener matching, ack) and nothing of slack-handoff's (reviewer policy,
Redis decision), so ``handoff serve``'s rate over this app's rate says how much of the
Bolt budget the decision costs. Served the way ``bench.clicks`` serves it::

    SLACK_BOT_TOKEN=xoxb-... SLACK_SIGNING_SECRET=... SLACK_API_URL=http://127.0.0.1:PORT/api/ \\
        python -m gunicorn --worker-class gthread --workers 2 --threads 8 \\
        bench.bare_bolt_app:application
"""

from __future__ import annotations

import os

from slack_bolt import Ack, App
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient

from bot.blockkit import ids
from bot.http.wsgi import EVENTS_PATH


def create_bare_app() -> App:
    """A Bolt app configured like ``bot.app.create_app`` (same token checks and request
    handling), with one listener that only acks ``ids.APPROVE``.

    Bolt's authorization middleware calls ``auth.test`` once per process on the first
    request, so the client points at ``SLACK_API_URL`` (the stand-in) as the bot's does.
    """
    client = WebClient(
        token=os.environ["SLACK_BOT_TOKEN"],
        base_url=os.environ.get("SLACK_API_URL", WebClient.BASE_URL),
    )
    app = App(
        token=os.environ["SLACK_BOT_TOKEN"],
        signing_secret=os.environ["SLACK_SIGNING_SECRET"],
        client=client,
        token_verification_enabled=False,
        process_before_response=True,
    )

    @app.action(ids.APPROVE)
    def approve(ack: Ack) -> None:
        ack()

    return app


# gunicorn imports this module in each worker process (no --preload), so every worker
# builds its own app, as ``handoff serve`` does.
application = SlackRequestHandler(create_bare_app(), path=EVENTS_PATH)
