"""`handoff policy check` and `handoff policy explain`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "policies"
REFUNDS = str(FIXTURES / "refunds.yaml")


def _request(tmp_path: Path, amount: object, name: str = "issue_refund", **payload: object) -> str:
    path = tmp_path / "request.json"
    action = {"name": name, "args": {"amount": amount}}
    request = {
        "request_type": "approval",
        "payload": {"kind": "approval", "action": action, **payload},
    }
    path.write_text(json.dumps(request))
    return str(path)


def test_check_accepts_a_valid_file() -> None:
    result = CliRunner().invoke(main, ["policy", "check", REFUNDS])
    assert result.exit_code == 0, result.output
    assert "3 rule(s), valid" in result.output


def test_check_names_each_bad_rule_and_field_with_exit_2_and_no_traceback() -> None:
    result = CliRunner().invoke(main, ["policy", "check", str(FIXTURES / "invalid.toml")])
    assert result.exit_code == 2
    assert "rule 'large-refunds' (rules[0]): match.when: not a CEL expression" in result.output
    assert "set.reviewer: Extra inputs are not permitted" in result.output
    assert "Traceback" not in result.output


def test_explain_names_the_rule_that_matches_and_what_it_sets(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["policy", "explain", REFUNDS, "--request", _request(tmp_path, 900)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [
        "rule large-refunds: matches",
        "applies rule large-refunds",
    ]
    assert "  sets approvals_required = 2" in result.output
    assert '  sets reviewers = ["S0FINANCE"]' in result.output


def test_explain_says_why_each_rule_did_not_match_and_that_the_defaults_apply(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        main, ["policy", "explain", REFUNDS, "--request", _request(tmp_path, 200)]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "rule large-refunds: no: when: args.amount > 500 is not true",
        "rule small-refunds: no: when: args.amount <= 50 is not true",
        "rule no-deleting-production: no: action 'issue_refund' matches none of ['drop_*']",
        "no rule matches: the request is stored as sent, with the defaults",
    ]


def test_explain_as_json_shows_an_auto_decision(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["policy", "explain", REFUNDS, "--request", _request(tmp_path, 20), "--json"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["matched"] == "small-refunds" and shown["auto"] == "approved"
    assert [t["rule"] for t in shown["tried"]] == ["large-refunds", "small-refunds"]


def test_explain_refuses_a_request_that_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    path.write_text('{"request_type": "approval"}')
    result = CliRunner().invoke(main, ["policy", "explain", REFUNDS, "--request", str(path)])
    assert result.exit_code == 2
    assert "not a handoff request: payload" in result.output


def test_check_refuses_a_typo_in_a_condition_naming_the_rule_and_a_suggestion(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n"
        "  - name: large-refunds\n"
        "    match: {when: \"args.amount > 500 && action.startswith('issue')\"}\n"
        "    auto: reject\n"
        "  - name: large-refunds-2\n"
        '    match: {when: "arg.amount > 500"}\n'
        "    auto: reject\n"
    )
    result = CliRunner().invoke(main, ["policy", "check", str(policy)])
    assert result.exit_code == 2
    assert (
        "rule 'large-refunds' (rules[0]): match.when: unknown method .startswith() "
        "(did you mean 'startsWith'?)"
    ) in result.output
    assert (
        "rule 'large-refunds-2' (rules[1]): match.when: unknown variable 'arg' "
        "(did you mean 'args'?)"
    ) in result.output


def test_explain_says_a_condition_could_not_be_evaluated_and_why(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["policy", "explain", REFUNDS, "--request", _request(tmp_path, "lots")]
    )
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(
        "rule large-refunds: no: when: args.amount > 500 could not be evaluated ("
    )
    assert "no matching overload" in first


def test_explain_shows_that_a_routed_approval_keeps_its_veto(tmp_path: Path) -> None:
    request = _request(tmp_path, 900, rejections_required=25)
    result = CliRunner().invoke(main, ["policy", "explain", REFUNDS, "--request", request])
    assert result.exit_code == 0, result.output
    assert "  sets rejections_required = 1" in result.output
    assert "  decided by 2 approval(s), or rejected by 1 rejection(s)" in result.output
    shown = CliRunner().invoke(main, ["policy", "explain", REFUNDS, "--request", request, "--json"])
    assert json.loads(shown.output)["quorum"] == {"approvals": 2, "rejections": 1}


def test_explain_shows_a_request_whose_condition_is_too_costly_as_refused(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        'rules:\n  - name: bulk\n    match: {when: "args.ids.exists(i, i < 0)"}\n    auto: reject\n'
    )
    path = tmp_path / "request.json"
    action = {"name": "delete_rows", "args": {"ids": [1] * 21_000}}
    path.write_text(
        json.dumps({"request_type": "approval", "payload": {"kind": "approval", "action": action}})
    )
    result = CliRunner().invoke(main, ["policy", "explain", str(policy), "--request", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("rule bulk: no: when: args.ids.exists(i, i < 0) ran out of")
    assert lines[1].startswith("refused: the routing condition of rule 'bulk'")


def test_check_refuses_a_key_given_twice_in_yaml(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "rules:\n  - name: small\n    match: {action: refund}\n    auto: reject\n"
        "    match: {request_type: approval}\n"
    )
    result = CliRunner().invoke(main, ["policy", "check", str(policy)])
    assert result.exit_code == 2
    assert "not valid YAML: line 5: the key 'match' is given twice" in result.output


@pytest.mark.parametrize(("name", "text"), [("p.yaml", "rules: "), ("p.toml", "rules = ")])
def test_check_refuses_a_deeply_nested_file_with_exit_2_and_no_traceback(
    tmp_path: Path, name: str, text: str
) -> None:
    policy = tmp_path / name
    policy.write_text(text + "[" * 5000)
    result = CliRunner().invoke(main, ["policy", "check", str(policy)])
    assert result.exit_code == 2
    assert "nested too deeply to read" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # the usage error, not a RecursionError


def test_explain_refuses_a_deeply_nested_request_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    path.write_text('{"request_type": "approval", "payload": ' + "[" * 100_000 + "}")
    result = CliRunner().invoke(main, ["policy", "explain", REFUNDS, "--request", str(path)])
    assert result.exit_code == 2
    assert "nested too deeply to be a request" in result.output
    assert isinstance(result.exception, SystemExit)
