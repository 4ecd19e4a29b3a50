"""``handoff api``'s app served by uvicorn on a free loopback port, in a thread of the test
process: real HTTP, as a client in another language would call it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from bot.api.app import ApiConfig, build_app
from store.repository import HandoffStore
from tests.support.slack_env import free_port


@contextmanager
def serve_api(store: HandoffStore, config: ApiConfig) -> Iterator[str]:
    """Serve the API over ``store``; yields its base URL (``http://127.0.0.1:<port>``)."""
    with serve_app(build_app(store, config)) as url:
        yield url


@contextmanager
def serve_app(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` (built by ``build_app``, for a test that looks inside it)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
