"""``handoff dev``: the whole loop on one machine, with the Slack stand-in and an embedded Redis.

Dev-only code, kept out of the product path: nothing outside ``bot.dev`` and the CLI imports it
(the tests and benchmarks use its embedded server).
"""
