"""HANDOFF_RESUME_MODULES: a worker imports resume targets (and the paths the adapters keep
with their handoffs) only from the modules its own environment lists, whatever a handoff in
Redis names; a refused target fails its resume at once, and nothing of it is imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from store.exceptions import ConfigurationError, InvalidResumeTarget
from store.ids import new_handoff_id
from store.models import HandoffRequest, TaskState
from store.settings import StoreSettings
from tests.conftest import ROOT, WorkerProcesses, wait_until
from tests.support import marker_targets, resume_targets
from tests.test_client import writes_nothing
from worker.adapters.decorators import APPROVED_CALL_TARGET
from worker.adapters.decorators import METADATA_KEY as APPROVED_CALL_KEY
from worker.adapters.pauses import load_object
from worker.client import Handoffs
from worker.resume_targets import (
    ResumeTargetRefused,
    allow_resume_modules,
    allowed_resume_modules,
    module_allowed,
    resolve_target,
)

ALLOWED = "tests.support.resume_targets"
OUTSIDE = "tests.support.marker_targets:touch"
NOT_LISTED = "is not in HANDOFF_RESUME_MODULES"


@pytest.fixture(autouse=True)
def _process_allow_list() -> Iterator[None]:
    """Each test starts, and leaves this process, reading the setting from the environment."""
    allow_resume_modules(None)
    yield
    allow_resume_modules(None)


# -- the rule -----------------------------------------------------------------------------


def test_a_module_is_allowed_when_it_is_an_entry_or_lies_under_one() -> None:
    allowed = ("myagent", "billing.steps")
    assert module_allowed("myagent", allowed)
    assert module_allowed("myagent.tools.refunds", allowed)
    assert module_allowed("billing.steps", allowed)
    assert module_allowed("billing.steps.refund", allowed)
    assert not module_allowed("myagent2", allowed)  # a prefix counts at a dot only
    assert not module_allowed("billing", allowed)
    assert not module_allowed("os", allowed)
    assert module_allowed("os", ())  # nothing listed: any module, as before the setting


def test_the_setting_is_a_comma_separated_list_of_module_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDOFF_RESUME_MODULES", " myagent.steps , billing ,")
    assert StoreSettings.from_env().store_config().resume_modules == ("myagent.steps", "billing")
    assert StoreSettings.from_env().store_config().resume_modules == allowed_resume_modules()

    monkeypatch.setenv("HANDOFF_RESUME_MODULES", "myagent.steps:on_decision")
    with pytest.raises(
        ConfigurationError, match=re.escape("HANDOFF_RESUME_MODULES: 'myagent.steps:on")
    ):
        StoreSettings.from_env()
    monkeypatch.delenv("HANDOFF_RESUME_MODULES")
    assert StoreSettings.from_env().store_config().resume_modules == ()


def test_a_refused_target_is_not_even_imported() -> None:
    allow_resume_modules([ALLOWED])
    # A module that does not exist: refused for where it is, not for failing to import.
    with pytest.raises(
        ResumeTargetRefused, match=re.escape(f"resume target os.path:exists {NOT_LISTED}")
    ):
        resolve_target("os.path:exists")
    with pytest.raises(ResumeTargetRefused, match=NOT_LISTED):
        resolve_target("tests.support.no_such_module:run")
    with pytest.raises(ResumeTargetRefused, match=NOT_LISTED):
        load_object("tests.support.no_such_module:build_graph")
    assert resolve_target(f"{ALLOWED}:record") is resume_targets.record
    # The adapters' entry points are always allowed; they check what they import.
    assert callable(resolve_target(APPROVED_CALL_TARGET))


def test_a_path_may_not_reach_outside_the_list_through_an_allowed_module() -> None:
    allow_resume_modules(["tests.support"])
    # marker_targets imports os and pathlib: neither may be reached through it.
    through_a_module = "tests.support.marker_targets:os.system"
    imported_name = "tests.support.marker_targets:Path"
    # Only the adapters' entry points themselves are always allowed, not what they import.
    through_an_adapter = "worker.adapters.decorators:inspect.os.system"

    for path in (through_a_module, imported_name, through_an_adapter):
        with pytest.raises(ResumeTargetRefused):
            resolve_target(path)
        with pytest.raises(ResumeTargetRefused):
            load_object(path)
    with pytest.raises(ResumeTargetRefused, match="goes through the module os"):
        resolve_target(through_a_module)
    with pytest.raises(ResumeTargetRefused, match="is not a function"):
        load_object(imported_name)
    # Defined in a listed module, but a class (its constructor is Popen's) or a function
    # claiming to wrap one from elsewhere: refused too.
    for path in (
        "tests.support.marker_targets:Spawner",
        "tests.support.marker_targets:wrapped_system",
    ):
        with pytest.raises(ResumeTargetRefused):
            load_object(path)
    # A function defined in a listed module is fine, by any name it is reached by there.
    assert callable(load_object("tests.support.marker_targets:guarded"))


# -- agents: refused when the handoff is created ---------------------------------------------


def test_an_agent_with_the_setting_is_refused_a_target_outside_it_and_nothing_is_written(
    redis: Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("HANDOFF_RESUME_MODULES", ALLOWED)
    for client in (Handoffs.from_env(), Handoffs.from_url(redis_url)):
        with writes_nothing(redis), pytest.raises(InvalidResumeTarget, match=NOT_LISTED):
            client.request_approval(
                run_id="run-1", thread_id="t", action="issue_refund", resume=OUTSIDE
            )
        with writes_nothing(redis), pytest.raises(ResumeTargetRefused, match=re.escape(OUTSIDE)):
            client.ask(run_id="run-1", thread_id="t", question="Which?", resume=OUTSIDE)
        created = client.ask(
            run_id="run-1", thread_id="t", question="Which?", resume=f"{ALLOWED}:record"
        )
        assert client.get(created.id).resume_target == f"{ALLOWED}:record"


# -- the worker: refused when the handoff is resumed -----------------------------------------


def _forge(handoffs: Handoffs, target: str, metadata: dict[str, object] | None = None) -> str:
    """A handoff written straight to the store, as anyone with Redis access could."""
    request = HandoffRequest.model_validate(
        {
            "run_id": "run-forged",
            "thread_id": "t",
            "request_type": "approval",
            "payload": {
                "kind": "approval",
                "action": {"name": "issue_refund", "args": {"order_id": "A-1", "amount": 30}},
            },
            "resume_target": target,
            "metadata": metadata or {},
        }
    )
    handoff_id = new_handoff_id()
    handoffs.store.create(request, handoff_id=handoff_id)
    handoffs.decide(handoff_id, "approved", by="U0ALICE")
    return handoff_id


def _failed_for_good(handoffs: Handoffs, handoff_id: str) -> str:
    """The resume's error, once it failed: at its first attempt, with no retry."""
    wait_until(lambda: handoffs.get(handoff_id).resume.state is TaskState.FAILED)
    resume = handoffs.get(handoff_id).resume
    assert resume.attempt == 1, resume  # the fixture's policy allows 3
    [failed] = [e for e in handoffs.audit(handoff_id) if e.event == "resume_failed"]
    assert failed.detail["permanent"] is True
    assert failed.detail["error"] == resume.last_error
    return resume.last_error or ""


def test_a_worker_refuses_targets_outside_its_list_and_never_imports_them(
    redis: Redis, handoffs: Handoffs, workers: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    workers.start(
        extra_env={"HANDOFF_RESUME_MODULES": ALLOWED, marker_targets.MARKER_DIR: str(markers)}
    )
    forged = _forge(handoffs, OUTSIDE)
    # An adapter's entry point is allowed, but not the function it would import and call.
    forged_call = _forge(
        handoffs,
        APPROVED_CALL_TARGET,
        {APPROVED_CALL_KEY: {"function": "tests.support.marker_targets:guarded"}},
    )
    allowed = _forge(handoffs, f"{ALLOWED}:record")

    error = _failed_for_good(handoffs, forged)
    assert error.startswith(f"resume target {OUTSIDE} {NOT_LISTED} ({ALLOWED})"), error
    error = _failed_for_good(handoffs, forged_call)
    assert f"adapter path tests.support.marker_targets:guarded {NOT_LISTED}" in error, error
    wait_until(lambda: handoffs.get(allowed).resume.state is TaskState.COMPLETED)
    completed = [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]
    assert [entry["handoff_id"] for entry in completed] == [allowed]
    assert sorted(p.name for p in markers.iterdir()) == []  # neither imported nor called
    assert "HANDOFF_RESUME_MODULES is not set" not in workers.logs()


def test_a_worker_without_the_setting_warns_once_at_start(redis: Redis, redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HANDOFF_RESUME_MODULES"}
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "worker", "--burst"],
        env={**env, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "HANDOFF_RESUME_MODULES" in line]
    assert len(warnings) == 1, result.stderr
    assert "WARNING" in warnings[0] and "is not set" in warnings[0]
