"""The Procfile's, the Dockerfile's and the compose file's API service's commands are valid
``handoff`` invocations.

No container is built here (Docker may not run where the tests do): the commands are
parsed as the shell and Docker would pass them, then checked against the CLI itself, so
renaming a subcommand or an option breaks this test instead of a deployment.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib

import click
import pytest
import yaml
from click.testing import CliRunner

from bot.cli import main
from bot.http.wsgi import HEALTH_PATH
from tests.conftest import ROOT

PLATFORM_ENV = {"PORT": "5000"}
"""What a Procfile platform (Heroku, foreman, honcho) sets for the web process (foreman and
honcho give each process type a PORT of its own)."""
API_PORT = "3002"
"""The port the image exposes for `handoff api` (its default)."""


def console_script() -> str:
    """The name ``pip install`` gives the CLI (``[project.scripts]``)."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        scripts = tomllib.load(file)["project"]["scripts"]
    [(name, target)] = scripts.items()
    assert target == "bot.cli:main"
    return str(name)


def procfile_commands() -> dict[str, list[str]]:
    """Process type -> argv, with ``$VAR`` expanded as the platform's shell would."""
    commands = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        kind, command = line.split(":", 1)
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: PLATFORM_ENV[m[1]], command)
        commands[kind.strip()] = shlex.split(expanded)
    return commands


def dockerfile_instruction(name: str) -> str:
    """The arguments of the last ``name`` instruction (line continuations joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = [line.split(None, 1)[1] for line in text.splitlines() if line.startswith(name + " ")]
    assert found, f"the Dockerfile has no {name}"
    return found[-1].strip()


def assert_valid_invocation(argv: list[str]) -> click.Command:
    """Parse ``argv`` with the CLI exactly as running it would, without running it: every
    option must exist and every value must convert. Returns the subcommand."""
    assert argv[0] == console_script(), argv
    group_context = click.Context(main, info_name=argv[0])
    command = main.get_command(group_context, argv[1])
    assert command is not None, f"no subcommand {argv[1]!r} in {argv}"
    command.make_context(argv[1], argv[2:], parent=group_context)
    help_run = CliRunner().invoke(main, [*argv[1:], "--help"])
    assert help_run.exit_code == 0, help_run.output
    return command


def test_procfile_runs_handoff_serve_as_web_handoff_worker_as_worker_and_the_api() -> None:
    commands = procfile_commands()

    assert set(commands) == {"web", "worker", "api"}
    assert assert_valid_invocation(commands["web"]).name == "serve"
    assert assert_valid_invocation(commands["worker"]).name == "worker"
    assert assert_valid_invocation(commands["api"]).name == "api"
    for kind in ("web", "api"):
        argv = commands[kind]
        assert argv[argv.index("--port") + 1] == PLATFORM_ENV["PORT"]
        # Reachable from the platform's router, not only from inside the dyno.
        assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_dockerfile_default_command_is_handoff_serve() -> None:
    command = json.loads(dockerfile_instruction("CMD"))

    assert assert_valid_invocation(command).name == "serve"


def test_dockerfile_health_check_asks_serve_for_healthz_on_its_port() -> None:
    serve = json.loads(dockerfile_instruction("CMD"))
    port = serve[serve.index("--port") + 1]
    health_check = dockerfile_instruction("HEALTHCHECK")

    assert f"http://127.0.0.1:{port}{HEALTH_PATH}" in health_check
    assert dockerfile_instruction("EXPOSE").split() == [port, API_PORT]


def test_the_api_port_the_image_exposes_is_the_api_commands_default() -> None:
    from bot.cli.api import api

    [port] = [p for p in api.params if p.name == "port"]
    assert str(port.default) == API_PORT
    assert API_PORT in dockerfile_instruction("EXPOSE").split()


def test_the_compose_files_api_service_serves_on_its_port_and_checks_its_health() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    service = services["api"]
    argv = service["command"]

    assert service["build"] == "."
    assert assert_valid_invocation(argv).name == "api"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # reachable from outside the container
    port = argv[argv.index("--port") + 1]
    assert port == API_PORT
    assert service["ports"] == [f"127.0.0.1:{port}:{port}"]  # TLS in front before it goes wider
    assert f"http://127.0.0.1:{port}/healthz" in " ".join(service["healthcheck"]["test"])
    assert service["environment"]["REDIS_URL"] == services["serve"]["environment"]["REDIS_URL"]
    assert not {k for k in service["environment"] if k.startswith("SLACK_")}  # no Slack secrets
    # Callbacks are checked by the API at creation and by the worker before each send.
    for name in ("api", "worker"):
        assert "HANDOFF_WEBHOOK_ALLOWED_HOSTS" in services[name]["environment"]


def test_dockerfile_runs_as_a_user_that_is_not_root() -> None:
    user = dockerfile_instruction("USER")

    assert user not in ("root", "0")
    assert dockerfile_instruction("FROM") == "python:3.11-slim"


@pytest.mark.parametrize(
    "argv",
    [
        ["handoff", "serve", "--port", "not-a-number"],
        ["handoff", "serve", "--no-such-option"],
        ["handoff", "no-such-command"],
    ],
)
def test_an_invalid_command_line_is_caught(argv: list[str]) -> None:
    with pytest.raises((click.UsageError, AssertionError)):
        assert_valid_invocation(argv)
