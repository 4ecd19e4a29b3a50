"""The Slack side: Bolt app factory, settings, Block Kit views, CLI and the local Slack stand-in."""
