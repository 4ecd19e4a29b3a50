"""The HTTP agents in examples/ (bash with curl and jq, TypeScript with plain fetch) run as
their headers say against `handoff dev`: `.handoff-dev/env` sourced, an approval created
over the API and long-polled until the dev reviewer approves it in the workbench. One dev
run serves every test here; it also shows that `handoff dev` starts the API with a key of
its own."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.dev.run import DEV_REVIEWER
from store.api_keys import ApiKeys
from store.keys import KeySpace
from tests.conftest import ROOT, wait_until
from tests.support.dev import (
    DevRun,
    click_approve_as_the_reviewer,
    running_dev,
    second_terminal_env,
)
from tests.support.slack_env import free_port

SHELL_EXAMPLE = ROOT / "examples" / "http_agent.sh"
TS_EXAMPLE = ROOT / "examples" / "http_agent.ts"
AGENT_SECONDS = 60
COMPILE_SECONDS = 300
_OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network|proxy",
    re.IGNORECASE,
)
"""What npm says when it cannot reach the registry (to fetch TypeScript)."""


class Dev:
    """The shared `handoff dev` run: its printed URLs and tokens, and its agents' file."""

    def __init__(self, run: DevRun, api_port: int) -> None:
        self.run = run
        self.standin, self.token = run.wait_ready()
        self.env_file = run.data / "env"
        self.settings = dict(
            line.split("=", 1)
            for line in self.env_file.read_text().splitlines()
            if line and not line.startswith("#")
        )
        self.api_port = api_port

    @property
    def api_log(self) -> str:
        return (self.run.data / "api.log").read_text(errors="replace")

    def api(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        request = urllib.request.Request(
            self.settings["HANDOFF_API_URL"] + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {key or self.settings['HANDOFF_API_KEY']}",
                "Content-Type": "application/json",
            },
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    api_port = free_port()
    with running_dev(tmp_path_factory.mktemp("http-examples"), api_port=api_port) as run:
        yield Dev(run, api_port)


@pytest.fixture(scope="module")
def compiled_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/http_agent.ts compiled by tsc as its header says; skipped only without npx
    or node, or when npm cannot reach the registry for TypeScript."""
    for tool in ("npx", "node"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH")
    out = tmp_path_factory.mktemp("http-agent-js")
    command = ["npx", "--yes", "-p", "typescript@5", "tsc", "--target", "es2022"]
    command += ["--module", "nodenext", "--outDir", str(out), str(TS_EXAMPLE)]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=COMPILE_SECONDS
    )
    output = result.stdout + result.stderr
    if result.returncode != 0 and "error TS" not in output and _OFFLINE.search(output):
        pytest.skip(f"npm cannot reach the registry for TypeScript: {output.strip()[-300:]}")
    assert result.returncode == 0, output
    return out / "http_agent.js"


def _start_agent(dev: Dev, runner: str, script: Path, **extra: str) -> subprocess.Popen[str]:
    # As the examples' headers say: set -a && . .handoff-dev/env && set +a && bash|node ...
    shell = 'set -a && . "$1" && set +a && exec "$2" "$3"'
    return subprocess.Popen(
        ["bash", "-c", shell, "-", str(dev.env_file), runner, str(script)],
        cwd=ROOT,
        env=second_terminal_env(**extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_to_approval(
    dev: Dev, runner: str, script: Path, *, polls_first: int = 0, **extra: str
) -> tuple[str, str, str]:
    """Run an example, approve its handoff as the dev reviewer (once it has asked
    ``polls_first`` times, when given); its handoff id, the rest of its output and its
    errors. Fails unless it exits 0."""
    agent = _start_agent(dev, runner, script, **extra)
    try:
        assert agent.stdout is not None and agent.stderr is not None
        first = agent.stdout.readline()
        waiting = re.match(r"Waiting for a person to decide (ho_\w+) \.\.\.$", first)
        assert waiting, first + (agent.stderr.read() if agent.poll() is not None else "")
        handoff_id = waiting[1]
        if polls_first:
            # The long poll comes back pending when its wait is over, and is made again.
            polled = f"GET /v1/handoffs/{handoff_id}?wait="
            assert wait_until(lambda: dev.api_log.count(polled) >= polls_first, timeout=30)
        click_approve_as_the_reviewer(dev.standin, dev.token, handoff_id)
        rest, errors = agent.communicate(timeout=AGENT_SECONDS)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=5)
    assert agent.returncode == 0, rest + errors
    return handoff_id, rest, errors


def test_handoff_dev_starts_the_api_with_a_dev_key_in_the_agents_file(dev: Dev) -> None:
    url, key = dev.settings["HANDOFF_API_URL"], dev.settings["HANDOFF_API_KEY"]
    assert url == f"http://127.0.0.1:{dev.api_port}"
    assert re.fullmatch(r"hk_[\w-]{40,}", key)
    assert f"API at {url} (docs: /v1/docs); key: {key}\n" in dev.run.printed()
    with urllib.request.urlopen(f"{url}/v1/docs", timeout=5) as docs:
        assert docs.status == 200

    # An agent key for any channel, of this run (the next run revokes it and makes another).
    redis = Redis.from_url(dev.settings["REDIS_URL"])
    try:
        record = ApiKeys(redis, KeySpace(dev.settings["HANDOFF_NAMESPACE"])).authenticate(key)
    finally:
        redis.close()
    assert record is not None
    assert re.fullmatch(r"dev-\d{8}-\d{6}-[0-9a-f]{4}", record.name)
    assert (record.admin, record.channels) == (False, [])
    decision = {"outcome": "approved", "by": DEV_REVIEWER.id}
    status, refused = dev.api("POST", "/v1/handoffs/ho_x/decision", decision)
    assert status == 403, refused
    assert dev.api("GET", "/v1/handoffs", key="hk_not-the-dev-key")[0] == 401


def test_the_dev_api_accepts_callbacks_to_this_machine(dev: Dev) -> None:
    # HANDOFF_WEBHOOK_ALLOWED_HOSTS=127.0.0.1,localhost reaches `handoff api`: a receiver
    # on this machine over http is refused elsewhere (loopback, not https).
    for host in ("127.0.0.1", "localhost"):
        status, created = dev.api(
            "POST",
            "/v1/handoffs",
            {
                "request_type": "escalation",
                "run_id": f"callback-{host}",
                "thread_id": "t",
                "summary": "a local receiver",
                "callback": {"url": f"http://{host}:{free_port()}/hooks/handoff"},
            },
        )
        assert status == 201, created
        assert dev.api("POST", f"/v1/handoffs/{created['id']}/cancel", {})[0] == 200
    status, refused = dev.api(
        "POST",
        "/v1/handoffs",
        {
            "request_type": "escalation",
            "run_id": "callback-private",
            "thread_id": "t",
            "summary": "a private address is still refused",
            "callback": {"url": "http://10.1.2.3/hooks/handoff"},
        },
    )
    assert status == 422, refused


def _ran_as_the_example_says(dev: Dev, handoff_id: str, run_prefix: str) -> None:
    status, handoff = dev.api("GET", f"/v1/handoffs/{handoff_id}")
    assert status == 200, handoff
    assert handoff["status"] == "approved"
    assert handoff["api_key"].startswith("dev-")  # created with the run's key
    assert handoff["run_id"].startswith(run_prefix)
    assert handoff["idempotency_key"] == f"{handoff['run_id']}/refund"  # the header was sent
    assert handoff["payload"]["action"]["name"] == "issue_refund"


@pytest.mark.parametrize("polls", [0, 2], ids=["decided-during-the-first-wait", "waits-again"])
def test_the_shell_example_waits_for_the_approval_and_prints_it(dev: Dev, polls: int) -> None:
    extra = {"HTTP_AGENT_WAIT_SECONDS": "1"} if polls else {}
    handoff_id, rest, errors = _run_to_approval(
        dev, "bash", SHELL_EXAMPLE, polls_first=polls, **extra
    )
    assert rest == f"approved by {DEV_REVIEWER.id}\n", rest + errors
    assert errors == ""
    _ran_as_the_example_says(dev, handoff_id, "refund-agent-sh-")
    wait = "1" if polls else "30"
    assert f"GET /v1/handoffs/{handoff_id}?wait={wait} " in dev.api_log


@pytest.mark.parametrize("polls", [0, 2], ids=["decided-during-the-first-wait", "waits-again"])
def test_the_typescript_example_waits_for_the_approval_and_prints_it(
    dev: Dev, compiled_ts: Path, polls: int
) -> None:
    extra = {"HTTP_AGENT_WAIT_SECONDS": "1"} if polls else {}
    handoff_id, rest, errors = _run_to_approval(
        dev, "node", compiled_ts, polls_first=polls, **extra
    )
    assert rest == f"approved by {DEV_REVIEWER.id}\n", rest + errors
    assert errors == ""
    _ran_as_the_example_says(dev, handoff_id, "refund-agent-ts-")
    wait = "1" if polls else "30"
    assert f"GET /v1/handoffs/{handoff_id}?wait={wait} " in dev.api_log


@pytest.mark.parametrize("example", ["shell", "typescript"])
def test_an_http_error_exits_non_zero_with_the_problems_detail(
    dev: Dev, example: str, request: pytest.FixtureRequest
) -> None:
    if example == "shell":
        runner, script = "bash", SHELL_EXAMPLE
    else:
        runner, script = "node", request.getfixturevalue("compiled_ts")
    # The sourced file's key, then revoked-like: a key the API does not know.
    shell = 'set -a && . "$1" && set +a && HANDOFF_API_KEY=hk_unknown exec "$2" "$3"'
    result = subprocess.run(
        ["bash", "-c", shell, "-", str(dev.env_file), runner, str(script)],
        cwd=ROOT,
        env=second_terminal_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=AGENT_SECONDS,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    assert "POST /v1/handoffs: HTTP 401: the API key is unknown, revoked or expired" in (
        result.stderr
    )

    # Without the settings at all: a usage error saying where they come from.
    result = subprocess.run(
        [runner, str(script)],
        cwd=ROOT,
        env=second_terminal_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=AGENT_SECONDS,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "set HANDOFF_API_URL and HANDOFF_API_KEY" in result.stderr
    assert ".handoff-dev/env" in result.stderr


def test_stopped_the_dev_run_takes_its_api_and_file_along(dev: Dev) -> None:
    """Last here (it stops the shared run): the agents' file goes, and the API with it."""
    url = dev.settings["HANDOFF_API_URL"]
    dev.run.process.send_signal(signal.SIGTERM)
    dev.run.process.wait(timeout=20)
    assert not dev.env_file.exists(), dev.run.printed()
    deadline = time.monotonic() + 10
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
        except OSError:
            break  # nothing listens there any more
        assert time.monotonic() < deadline, "the API outlived handoff dev"
        time.sleep(0.2)
