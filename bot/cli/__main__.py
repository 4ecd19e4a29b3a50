"""``python -m bot.cli``: the ``handoff`` command (how ``handoff dev`` and the tests start
the bot and the workers)."""

from bot.cli import main

main()
