"""A count of the event loop's turns while something awaits: a loop that a call blocks
stops counting."""

from __future__ import annotations

import asyncio


class LoopTicks:
    """``start()`` a task that counts every 10 ms the loop runs it; ``stop()`` it."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._tick())

    def stop(self) -> int:
        """Stop counting; the ticks counted."""
        if self._task is not None:
            self._task.cancel()
        return self.count

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.count += 1
