"""An agent host calling the MCP tools with the official `mcp` client: over stdio (launching
`handoff mcp` as a host's config would) or over Streamable HTTP (`/mcp` on `handoff api`)."""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conftest import ROOT

STDIO_RUN = "host-run"
"""The run of handoffs made over stdio (`handoff mcp --run-id`)."""
HTTP_RUN = "mcp"
"""The run of handoffs made over `/mcp`."""

Progress = list[tuple[float, float | None, str | None]]


def stdio_params(url: str, key: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot.cli", "mcp", "--run-id", STDIO_RUN],
        env={
            "PYTHONPATH": str(ROOT),
            "HANDOFF_API_URL": url,
            "HANDOFF_API_KEY": key,
            "PATH": os.environ.get("PATH", ""),
        },
        cwd=str(ROOT),
    )


async def _call_in(session: ClientSession, tool: str, arguments: dict[str, Any]) -> tuple:
    await session.initialize()
    progress: Progress = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    result = await session.call_tool(tool, arguments, progress_callback=on_progress)
    return result, progress


def call_stdio(url: str, key: str, tool: str, arguments: dict[str, Any]) -> tuple[Any, Progress]:
    """Call ``tool`` through `handoff mcp` over ``url`` with ``key``: (result, progress)."""

    async def go() -> tuple:
        async with (
            stdio_client(stdio_params(url, key)) as (read, write),
            ClientSession(read, write) as session,
        ):
            return await _call_in(session, tool, arguments)

    return anyio.run(go)


def call_http(url: str, key: str, tool: str, arguments: dict[str, Any]) -> tuple[Any, Progress]:
    """Call ``tool`` over Streamable HTTP at ``url``/mcp with ``key``: (result, progress)."""

    async def go() -> tuple:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
        async with (
            client,
            streamable_http_client(f"{url}/mcp", http_client=client) as streams,
            ClientSession(*streams[:2]) as session,
        ):
            return await _call_in(session, tool, arguments)

    return anyio.run(go)
