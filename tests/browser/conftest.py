"""Browser tests of the workbench: headless Debian Chromium, driven by Playwright for Python.

Playwright only drives the machine's own Chromium (``/usr/bin/chromium``, or
``HANDOFF_CHROMIUM``); it never downloads a browser. Without Chromium or Playwright every
test here is skipped with the reason, and nothing else in the suite depends on them.
Screenshots go to a temporary folder, so a test run leaves the checkout as it was;
``HANDOFF_SCREENSHOT_DIR=docs/screenshots`` refreshes the ones the README links.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from redis import Redis

from bot.standin import SlackStandIn
from store.models import TaskState
from tests.support import resume_targets
from tests.support.slack_env import (
    BOT_TOKEN,
    CHANNEL,
    SIGNING_SECRET,
    USERGROUPS,
    USERS,
    SlackEnv,
    started,
    wait_for,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = os.environ.get("HANDOFF_CHROMIUM", "/usr/bin/chromium")
# What Chromium needs on these machines: no sandbox as root, no GPU, and no background
# connections (the network is closed; they would be refused at every start).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(
    os.environ.get("HANDOFF_SCREENSHOT_DIR")
    or Path(tempfile.gettempdir()) / f"handoff-screenshots-{os.getpid()}"
)
VIEWPORT = {"width": 1200, "height": 720}
CHANNEL_NAME = "approvals"


def _missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).is_file():
        return (
            f"no Chromium at {CHROMIUM}: install Debian's chromium (`apt-get install chromium`; "
            ".ci/run does it as root) or set HANDOFF_CHROMIUM"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the browser tests (each test gets a fresh context)."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright gives the browser a fresh, empty --user-data-dir of its own.
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


class WorkbenchSlack(SlackEnv):
    """The e2e setup (stand-in, `handoff serve`, a worker) with a named approvals channel."""

    def __init__(self, redis: Redis, redis_url: str, log_dir: Path) -> None:
        super().__init__(redis, redis_url, log_dir)
        self.standin = SlackStandIn(
            signing_secret=SIGNING_SECRET,
            bot_token=BOT_TOKEN,
            users=USERS,
            usergroups=USERGROUPS,
            channels={CHANNEL: CHANNEL_NAME},
        )

    def resumed(self, handoff_id: str) -> dict[str, Any]:
        """What the agent's run was resumed with, once the worker has resumed it."""
        wait_for(lambda: self.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
        entries = [json.loads(raw) for raw in self.redis.lrange(resume_targets.COMPLETED, 0, -1)]
        [entry] = [e for e in entries if e["handoff_id"] == handoff_id]
        return entry


@pytest.fixture
def slack(
    browser: Browser, redis: Redis, redis_url: str, tmp_path: Path
) -> Iterator[WorkbenchSlack]:
    """A running bot against the stand-in (asks for ``browser`` first, to skip early)."""
    yield from started(WorkbenchSlack(redis, redis_url, tmp_path))


class Workbench:
    """The workbench page in a browser tab, with what the tests look for on it."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.url = url

    def open(self, user: str, where: str = CHANNEL) -> Page:
        """Open the page as ``user`` on channel ``where`` (or "app/home", "app/messages")."""
        self.page.goto(f"{self.url}?user={user}#{where}")
        self.page.wait_for_selector("#status[data-state=live]")
        return self.page

    def message(self, ts: str) -> Locator:
        """A message of the main channel view, by its ts."""
        return self.page.locator(f"#messages .msg[data-ts='{ts}']")

    def act_as(self, user: str) -> None:
        """Switch user with the user switcher."""
        self.page.get_by_label("Act as user").select_option(user)
        self.page.wait_for_function(
            f"new URL(location.href).searchParams.get('user') === {json.dumps(user)}"
        )

    def type_message(self, text: str) -> None:
        """Type in the channel's message box and press Enter."""
        box = self.page.get_by_label("Message", exact=True)
        box.fill(text)
        box.press("Enter")

    def screenshot(self, name: str) -> Path:
        """Save the page as <SCREENSHOTS>/<name>.png (docs/screenshots when refreshing the
        README's pictures)."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        # Flashes of updated messages are fast-forwarded: the picture shows the settled page.
        self.page.screenshot(path=str(path), animations="disabled")
        return path


@pytest.fixture
def workbench_on(browser: Browser) -> Iterator[Any]:
    """``workbench_on(standin)``: a fresh browser tab on that stand-in's workbench."""
    contexts = []

    def open_on(standin: SlackStandIn) -> Workbench:
        context = browser.new_context(viewport=VIEWPORT, timezone_id="UTC", locale="en-US")
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        return Workbench(page, standin.url)

    yield open_on
    for context in contexts:
        context.close()


@pytest.fixture
def workbench(slack: WorkbenchSlack, workbench_on: Any) -> Workbench:
    """A browser tab on the running bot's stand-in."""
    return workbench_on(slack.standin)
