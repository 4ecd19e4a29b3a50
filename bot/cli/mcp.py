"""``handoff mcp``: the MCP server over stdio, as an agent host launches it from its
config; it talks to a ``handoff api`` by URL and key, never to Redis."""

from __future__ import annotations

import logging
import socket

import click

from bot.cli.app import main


@main.command()
@click.option(
    "--api-url",
    envvar="HANDOFF_API_URL",
    required=True,
    help="The handoff API's address, e.g. http://127.0.0.1:3002 (env HANDOFF_API_URL).",
)
@click.option(
    "--api-key",
    envvar="HANDOFF_API_KEY",
    required=True,
    help="An API key, hk_... (env HANDOFF_API_KEY).",
)
@click.option(
    "--run-id",
    default=None,
    help="The run its handoffs belong to (default: mcp-<host name>).",
)
def mcp(api_url: str, api_key: str, run_id: str | None) -> None:
    """Serve the MCP tools (request_approval, ask_human, request_correction, escalate,
    get_handoff, permission_prompt) over stdio."""
    from bot import mcp as mcp_extra

    if not mcp_extra.installed():
        raise click.UsageError(mcp_extra.NOT_INSTALLED)
    from bot.mcp.server import Api, build_server

    # stdout carries the protocol: logs go to stderr only, and quietly.
    logging.getLogger().setLevel(logging.WARNING)
    server = build_server(Api(api_url, api_key), run_id=run_id or f"mcp-{socket.gethostname()}")
    server.run()
