"""What the app's ``manifest.yml`` grants, for the stand-in to enforce (``missing_scope``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "manifest.yml"


@functools.cache
def manifest() -> dict[str, Any]:
    """The parsed manifest."""
    return dict(yaml.safe_load(MANIFEST.read_text()))


def bot_scopes() -> frozenset[str]:
    """The bot token scopes the manifest asks for."""
    return frozenset(manifest()["oauth_config"]["scopes"]["bot"])
