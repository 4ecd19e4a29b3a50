"""The API's OpenAPI document, as ``docs/openapi.json`` commits it.

``python -m bot.api.openapi > docs/openapi.json`` regenerates it; a test fails when the
code and the committed file differ, so a change to the contract is always a visible diff.
"""

from __future__ import annotations

import json
from typing import Any

from redis import Redis

from bot.api.app import ApiConfig, build_app
from store.repository import HandoffStore, StoreConfig


def openapi_document() -> dict[str, Any]:
    """The document, built without connecting to anything (the client connects on use)."""
    store = HandoffStore(Redis(), StoreConfig())
    return build_app(store, ApiConfig(redis_url="redis://unused")).openapi()


def main() -> None:
    print(json.dumps(openapi_document(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
