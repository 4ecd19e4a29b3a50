"""The documentation matches what it documents: links resolve, the tests guarantees.md cites
exist, the CLI reference names only commands and options that exist (and every command), the
configuration table lists exactly the settings, and the files the docs describe (the Socket
Mode manifest, the compose file) say what the docs say they do. A doc that goes stale fails
here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from bot.cli import main
from bot.config import Settings
from tests.conftest import ROOT

DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "SECURITY.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
CLI_DOC = ROOT / "docs" / "cli.md"
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"

README_COMMANDS = """\
```bash
# Run the main job (embedded Redis, a local Slack stand-in, the bot, the HTTP API, a worker
# and a demo agent; no Slack workspace or Redis needed):
python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/handoff dev
# Install and run the whole test suite (uses REDIS_URL if set, else an embedded server):
python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest
```
"""
"""The README's first lines: CI (`.ci/run`) and users run these two commands as written."""

GLOBAL_OPTIONS = frozenset({"-v", "--verbose", "--version", "--help"})
READ_BY = frozenset({"agent", "bot", "api", "worker", "dispatcher", "all"})
SHELL_FENCES = frozenset({"", "bash", "sh", "shell", "console"})


# -- reading Markdown ---------------------------------------------------------------------


_FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string and its lines."""

    info: str
    lines: tuple[str, ...]


def split_markdown(text: str) -> tuple[list[str], list[Block]]:
    """The lines outside fenced code blocks (fenced lines blanked, so line numbers hold),
    and the fenced blocks."""
    prose: list[str] = []
    blocks: list[Block] = []
    fence: str | None = None
    info = ""
    body: list[str] = []
    for line in text.splitlines():
        opened = _FENCE.match(line.strip())
        if fence is None and opened:
            fence, info, body = opened.group(1), opened.group(2).lower(), []
            prose.append("")
        elif fence is not None and line.strip().startswith(fence):
            blocks.append(Block(info, tuple(body)))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return prose, blocks


def inline_code(line: str) -> list[str]:
    """The inline code spans of a line of prose."""
    return [match.group(2).strip() for match in _INLINE_CODE.finditer(line)]


def without_code(line: str) -> str:
    return _INLINE_CODE.sub("", line)


def heading_text(raw: str) -> str:
    """A heading as GitHub renders its text: code spans, links and emphasis unwrapped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = text.replace("`", "")
    return re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text)


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation other than ``-`` and ``_``
    dropped, each space a ``-``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's ``-1``, ``-2`` for repeats."""
    prose, _ = split_markdown(path.read_text())
    seen: dict[str, int] = {}
    found = set()
    for line in prose:
        heading = _HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading_text(heading.group(2)))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and image outside code, but web and mail links."""
    prose, _ = split_markdown(text)
    for number, line in enumerate(prose, start=1):
        for match in _LINK.finditer(without_code(line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):
                continue  # https:, mailto:
            yield number, target


# -- (a) links ----------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(doc: Path) -> None:
    problems = []
    for number, target in relative_links(doc.read_text()):
        where, _, anchor = target.partition("#")
        linked = (doc.parent / where).resolve() if where else doc
        if not linked.exists():
            problems.append(f"{doc.name}:{number}: {target}: no such file")
            continue
        if anchor and linked.suffix != ".md":
            problems.append(f"{doc.name}:{number}: {target}: an anchor into a non-Markdown file")
        elif anchor and anchor not in anchors(linked):
            problems.append(f"{doc.name}:{number}: {target}: no heading #{anchor} there")
    assert not problems, "\n".join(problems)


GUARANTEES_DOC = ROOT / "docs" / "guarantees.md"
_TEST_NAME = re.compile(r"^test_\w+$")


def test_every_test_guarantees_md_cites_as_proof_exists() -> None:
    """A proof renamed or removed leaves its promise unproven: each test named in
    docs/guarantees.md must be a test function of tests/."""
    prose, _ = split_markdown(GUARANTEES_DOC.read_text())
    cited = {span for line in prose for span in inline_code(line) if _TEST_NAME.match(span)}
    defined = {
        match.group(1)
        for path in (ROOT / "tests").rglob("test_*.py")
        for match in re.finditer(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.MULTILINE)
    }
    assert cited, "guarantees.md names no test: the checker is broken"
    assert sorted(cited - defined) == []


def test_the_link_checker_finds_links_and_anchors_as_github_makes_them() -> None:
    text = "See [a](docs/x.md#b-c), ![i](s.png), [w](https://e.org), `[no](code.md)`.\n"
    text += "```\n[in a block](nowhere.md)\n```\n"
    assert [target for _, target in relative_links(text)] == ["docs/x.md#b-c", "s.png"]
    assert github_slug(heading_text("`handoff audit export`")) == "handoff-audit-export"
    assert github_slug(heading_text("3. A real workspace: Socket Mode")) == (
        "3-a-real-workspace-socket-mode"
    )
    assert github_slug(heading_text("`run_id` and `thread_id`")) == "run_id-and-thread_id"


# -- (b) the CLI reference ----------------------------------------------------------------


def cli_commands() -> dict[str, click.Command]:
    """Every command of the ``handoff`` group by its path (``"audit export"``), groups too."""
    found: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            path = f"{prefix}{name}"
            found[path] = command
            if isinstance(command, click.Group):
                walk(command, path + " ")

    walk(main, "")
    return found


def option_names(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def handoff_invocations(text: str) -> Iterator[list[str]]:
    """The words after ``handoff`` of each command line in ``text`` that runs it (several
    per line when joined by ``&&``, ``|``, ``;``); ``/handoff`` (the slash command) is not."""
    for segment in re.split(r"&&|\|\||;|\||\$\(|\)", text):
        words = segment.split()
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)  # PYTHONPATH=$PWD handoff ...
        if words and (words[0] == "handoff" or words[0].endswith("bin/handoff")):
            yield words[1:]


def check_invocation(words: list[str], commands: dict[str, click.Command]) -> list[str]:
    """Problems with ``handoff <words>``: an unknown command, or an option it lacks."""
    words = [word.strip("[]") for word in words]
    while words and words[0] in GLOBAL_OPTIONS:
        words.pop(0)
    path = ""
    group: click.Command = main
    while words and isinstance(group, click.Group):
        word = words[0]
        candidate = f"{path} {word}".strip()
        if candidate in commands:
            path, group = candidate, commands[candidate]
            words.pop(0)
        elif re.fullmatch(r"[a-z][a-z-]*", word):
            return [f"`handoff {candidate}`: no such command"]
        else:
            return []  # a placeholder (`handoff -v ...`): nothing more to check
    if not path:
        return []
    allowed = option_names(group)
    return [
        f"`handoff {path}` has no option {flag}"
        for flag in _FLAG.findall(" ".join(words).replace("/", " "))
        if flag not in allowed
    ]


def shell_lines(blocks: list[Block]) -> Iterator[str]:
    for block in blocks:
        if block.info not in SHELL_FENCES:
            continue
        for line in block.lines:
            code = re.sub(r"(^|\s)#.*$", "", line)  # a shell comment
            if code.strip():
                yield code


def test_every_handoff_command_and_option_the_docs_name_exists() -> None:
    commands = cli_commands()
    problems = []
    for doc in DOCS:
        prose, blocks = split_markdown(doc.read_text())
        spans = [span for line in prose for span in inline_code(line)]
        for text in [*spans, *shell_lines(blocks)]:
            for words in handoff_invocations(text):
                problems += [f"{doc.name}: {p}" for p in check_invocation(words, commands)]
    assert not problems, "\n".join(sorted(set(problems)))


_COMMAND_HEADING = re.compile(r"^#{2,4}\s+`handoff ([a-z][a-z -]*)`\s*$")


def cli_sections() -> dict[str, str]:
    """docs/cli.md's section of each command (``### `handoff list` `` up to the next
    heading), by command path."""
    source = CLI_DOC.read_text()
    prose, _ = split_markdown(source)
    text = source.splitlines()
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for number, line in enumerate(prose):
        heading = _COMMAND_HEADING.match(line)
        if heading:
            current = heading.group(1).strip()
            sections[current] = []
        elif _HEADING.match(line):
            current = None
        elif current is not None:
            sections[current].append(text[number])  # fenced lines too: the synopsis
    return {path: "\n".join(lines) for path, lines in sections.items()}


def test_every_command_of_the_cli_has_a_section_in_the_cli_reference() -> None:
    leaves = {p for p, c in cli_commands().items() if not isinstance(c, click.Group)}
    documented = set(cli_sections())
    assert leaves - documented == set(), "commands missing from docs/cli.md"
    assert documented - leaves == set(), "docs/cli.md documents commands the CLI lacks"


def test_each_command_section_names_only_its_own_options_and_all_of_them() -> None:
    commands = cli_commands()
    problems = []
    for path, section in cli_sections().items():
        command = commands.get(path)
        if command is None:
            continue  # reported by the test above
        allowed = option_names(command)
        prose, _ = split_markdown(section)
        # Options named on their own (`--json`, a row of the options table) are this
        # command's; those in a `handoff ...` span or line belong to the command it names.
        bare = [
            flag
            for line in prose
            for span in inline_code(line)
            if span.startswith("-")
            for flag in _FLAG.findall(span.replace("/", " "))
        ]
        problems += [f"`handoff {path}`: no option {flag}" for flag in bare if flag not in allowed]
        named = set(_FLAG.findall(section.replace("/", " ")))
        for param in command.params:
            if isinstance(param, click.Option) and not set(param.opts) & named:
                problems.append(f"`handoff {path}`: option {param.opts[-1]} is not documented")
    assert not problems, "\n".join(problems)


def test_the_cli_reference_lists_every_exit_code() -> None:
    from bot.cli.exit_codes import ExitCode

    documented = set(re.findall(r"^\| `(\d+)` \|", CLI_DOC.read_text(), flags=re.MULTILINE))
    assert documented == {str(int(code)) for code in ExitCode}


def test_the_cli_checker_catches_unknown_commands_and_options() -> None:
    commands = cli_commands()
    assert check_invocation(["list", "--limit", "5", "--json"], commands) == []
    assert check_invocation(["audit", "export", "--since", "7d"], commands) == []
    assert check_invocation(["-v", "...", "--nothing"], commands) == []
    assert check_invocation(["lst"], commands) == ["`handoff lst`: no such command"]
    assert check_invocation(["list", "--limt"], commands) == ["`handoff list` has no option --limt"]
    assert [w for w in handoff_invocations("set -a && X=1 .venv/bin/handoff show ID")] == [
        ["show", "ID"]
    ]
    assert list(handoff_invocations("/handoff list mine")) == []


# -- (c) the configuration table ----------------------------------------------------------


_SETTING_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \| ([^|]*) \| (.*) \|$")


def configuration_table() -> dict[str, tuple[str, str]]:
    """docs/configuration.md's settings table: variable -> (default, read by)."""
    rows = {}
    for line in CONFIGURATION_DOC.read_text().splitlines():
        row = _SETTING_ROW.match(line)
        if row:
            assert row.group(1) not in rows, f"{row.group(1)} is in the table twice"
            rows[row.group(1)] = (row.group(2).strip(), row.group(3).strip())
    return rows


def documented_default(cell: str) -> object:
    if cell in ("unset", "empty"):
        return {"unset": None, "empty": ""}[cell]
    found = re.fullmatch(r"`([^`]*)`", cell)
    assert found, f"a default is `value`, unset or empty, not {cell!r}"
    return found.group(1)


def same_default(documented: object, actual: object) -> bool:
    if documented is None or actual is None or documented == "":
        return documented == actual or (documented == "" and actual in ("", None))
    if isinstance(actual, bool):
        return documented == str(actual).lower()
    if isinstance(actual, int | float):
        return float(str(documented)) == float(actual)
    return documented == actual


def test_the_configuration_table_lists_exactly_the_settings() -> None:
    documented = set(configuration_table())
    expected = {Settings.env_name(name) for name in Settings.model_fields}
    assert documented - expected == set(), "documented, but not a setting"
    assert expected - documented == set(), "settings missing from docs/configuration.md"


def test_the_configuration_table_gives_each_default_and_who_reads_it() -> None:
    table = configuration_table()
    problems = []
    for name, field in Settings.model_fields.items():
        env = Settings.env_name(name)
        if env not in table:
            continue  # reported by the test above
        default, read_by = table[env]
        if not same_default(documented_default(default), field.default):
            problems.append(f"{env}: documented default {default}, actual {field.default!r}")
        readers = {part.strip() for part in read_by.split(",")}
        if not readers or not readers <= READ_BY:
            problems.append(f"{env}: 'read by' is {read_by!r}; use {', '.join(sorted(READ_BY))}")
    assert not problems, "\n".join(problems)


# -- the files the docs describe ----------------------------------------------------------


def _without_urls(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_urls(v) for k, v in value.items() if k not in ("url", "request_url")}
    if isinstance(value, list):
        return [_without_urls(v) for v in value]
    return value


def test_the_socket_mode_manifest_is_the_http_one_without_request_urls() -> None:
    http = yaml.safe_load((ROOT / "manifest.yml").read_text())
    socket_mode = yaml.safe_load((ROOT / "manifest-socket-mode.yml").read_text())

    assert http["settings"]["socket_mode_enabled"] is False
    assert socket_mode["settings"]["socket_mode_enabled"] is True
    assert _without_urls(socket_mode) == socket_mode, "Socket Mode takes no request URLs"
    expected = _without_urls(http)
    expected["settings"]["socket_mode_enabled"] = True  # type: ignore[index]
    assert socket_mode == expected


def test_the_compose_file_runs_redis_as_the_docs_recommend_and_valid_commands() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]

    redis_command = " ".join(compose["redis"]["command"])
    for setting in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
        assert setting in redis_command
    commands = cli_commands()
    for service in ("serve", "worker"):
        assert compose[service]["build"] == "."  # the repository's Dockerfile
        assert compose[service]["environment"]["REDIS_URL"].startswith("redis://redis:")
        argv = compose[service]["command"]
        assert argv[:2] == ["handoff", service]
        commands[service].make_context(service, list(argv[2:]))  # raises on a bad option
    assert compose["worker"]["healthcheck"] == {"disable": True}


def test_the_readme_starts_with_the_two_commands_and_stays_short() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("# slack-handoff\n\n" + README_COMMANDS)
    assert len(readme.splitlines()) <= 150
    _, blocks = split_markdown(readme)
    assert any(block.info == "python" for block in blocks), "the README's first example"
    # The first python block is the one a test runs against `handoff dev`: it must stay
    # the example of "First approval".
    first_python = readme.index("```python")
    assert readme.rfind("## First approval", 0, first_python) != -1
