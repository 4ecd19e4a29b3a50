"""Reading a policy file (TOML or YAML), with errors that name the rule and the field."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from store.decoding import MAX_JSON_DEPTH
from store.exceptions import ConfigurationError
from store.policies.model import PolicyFile
from store.policies.routing import RoutingPolicy

YAML_SUFFIXES = (".yaml", ".yml")
TOML_SUFFIXES = (".toml",)
MAX_POLICY_DEPTH = MAX_JSON_DEPTH + 8
"""How deep a policy file may nest: a rule's metadata match holds values as deep as a
request's (``MAX_JSON_DEPTH``), under rules, the rule, match and metadata."""


class PolicyError(ConfigurationError):
    """A policy file that cannot be used; ``problems`` lists each as "rule 'name': field:
    what is wrong" (``handoff policy check`` prints them one per line)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"policy file {source}: " + "; ".join(problems))


def load_policy(path: str | Path) -> RoutingPolicy:
    """The policy in ``path`` (``.toml``, ``.yaml`` or ``.yml``), validated and with its
    conditions compiled; raises ``PolicyError`` naming each bad rule and field."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(source, [f"cannot be read ({exc.__class__.__name__}: {exc})"]) from None
    return parse_policy(text, source=source)


def parse_policy(text: str, *, source: str) -> RoutingPolicy:
    """The policy in ``text``; ``source`` is its file name (its suffix says TOML or YAML)."""
    data = _parse_document(text, source)
    if _deeper_than(data, MAX_POLICY_DEPTH):
        raise PolicyError(source, [f"nested deeper than {MAX_POLICY_DEPTH} levels"])
    if not isinstance(data, dict):
        raise PolicyError(source, ["the file must hold a mapping with a 'rules' list"])
    try:
        return RoutingPolicy(PolicyFile.model_validate(data), source=source)
    except ValidationError as exc:
        raise PolicyError(source, describe_policy_errors(exc, data)) from None


def _parse_document(text: str, source: str) -> Any:
    suffix = Path(source).suffix.lower()
    too_deep = f"nested too deeply to read (at most {MAX_POLICY_DEPTH} levels)"
    if suffix in TOML_SUFFIXES:
        try:
            return tomllib.loads(text)  # which refuses a key given twice itself
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(source, [f"not valid TOML: {exc}"]) from None
        except RecursionError:
            raise PolicyError(source, [too_deep]) from None
    if suffix in YAML_SUFFIXES:
        import yaml  # here, not at the top: it costs every process ~0.1 s to import

        try:
            return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader
        except yaml.YAMLError as exc:
            raise PolicyError(source, [f"not valid YAML: {' '.join(str(exc).split())}"]) from None
        except RecursionError:
            raise PolicyError(source, [too_deep]) from None
    raise PolicyError(source, ["name it .toml, .yaml or .yml, so its format is known"])


@functools.cache
def _yaml_loader() -> type:
    """PyYAML's SafeLoader, but refusing a key given twice in one mapping: YAML keeps the
    last, so a second ``match:`` added to a rule replaced its first (and an ``auto:
    approve`` then matched every action)."""
    import yaml
    from yaml.constructor import ConstructorError

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<: *defaults" merges keys that the mapping may override
                key = self.construct_object(key_node, deep=deep)
                try:
                    seen = first_line.get(key)
                except TypeError:
                    continue  # unhashable: SafeLoader refuses it below
                line = key_node.start_mark.line + 1
                if seen is not None:
                    raise ConstructorError(
                        problem=f"line {line}: the key {key!r} is given twice in one "
                        f"mapping (first on line {seen}); YAML would keep only the last, "
                        "so merge the two or remove one",
                    )
                first_line[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists and mappings deeper than ``limit``; iterative, and each
    container is walked once per depth (a YAML alias is one object met many times)."""
    deepest_seen: dict[int, int] = {}
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if not isinstance(value, dict | list):
            continue
        if depth > limit:
            return True
        if deepest_seen.get(id(value), 0) >= depth:
            continue
        deepest_seen[id(value)] = depth
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children)
    return False


def describe_policy_errors(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    """One line per error: ``rule 'large-refunds' (rules[1]): set.approvals_required:
    Input should be less than or equal to 25``."""
    rules = data.get("rules")
    problems = []
    for error in exc.errors():
        loc = list(error["loc"])
        where = "file"
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            index = loc[1]
            rule = rules[index] if isinstance(rules, list) and index < len(rules) else None
            name = rule.get("name") if isinstance(rule, dict) else None
            where = f"rule {name!r} (rules[{index}])" if name else f"rules[{index}]"
            loc = loc[2:]
        field = ".".join(str(part) for part in loc if not _is_pydantic_branch(part))
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
    return problems


def _is_pydantic_branch(part: Any) -> bool:
    # Union members and validators pydantic adds to a location ("list[str]", "function-...").
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))
