"""How big a reliability run is, and its random choices: a default size, a larger one under
``pytest --soak``, either replaced from the environment, and a printed seed that replays
the run's choices (``RELIABILITY_SEED``)."""

from __future__ import annotations

import os
import random


def run_size(variable: str, *, default: int, soak_size: int, soak: bool) -> int:
    """``$variable`` if set, else ``soak_size`` under ``--soak``, else ``default``."""
    return int(os.environ.get(variable) or (soak_size if soak else default))


def seeded(what: str) -> random.Random:
    """A random generator for the run described by ``what``; its seed is printed."""
    seed = int(os.environ.get("RELIABILITY_SEED") or random.randrange(2**32))
    print(f"{what}, seed {seed} (RELIABILITY_SEED={seed} replays it)")
    return random.Random(seed)
