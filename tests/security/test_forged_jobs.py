"""A job record written straight into Redis, naming a function of the attacker's choice,
is refused by the workers: nothing is imported or called (RQ itself would call anything)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from redis import Redis
from rq import Callback, Queue, Webhook
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from tests.conftest import ROOT
from tests.support import marker_targets
from worker.queues import make_queue


def test_a_job_naming_another_function_fails_without_importing_it(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    # Written with RQ's own queue class, as anyone with Redis access could.
    # A queue of this test's own: no other test's worker may take the jobs.
    name = f"forged-{uuid.uuid4().hex[:8]}"
    plain = Queue(name, connection=redis, serializer=JSONSerializer)
    heard: list[str] = []
    listener = _listener(heard)
    hooks = [
        Webhook(f"{listener}/on-{status}", status, method="POST")  # type: ignore[arg-type]
        for status in ("finished", "failed")
    ]
    forged = plain.enqueue_call(
        func="tests.support.marker_targets.guarded", args=("A-1", 30), webhooks=hooks
    )
    with_callback = plain.enqueue_call(
        func="worker.jobs.run_resume",
        args=("ho", "ho_01NOSUCH"),
        # Whether run_resume of an unknown handoff returns or raises, RQ would call one next.
        on_success=Callback("tests.support.marker_targets.touch"),
        on_failure=Callback("tests.support.marker_targets.touch"),
        webhooks=hooks,
    )

    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "worker", "--burst", "--no-dispatcher"],
        env={
            **os.environ,
            "REDIS_URL": redis_url,
            "HANDOFF_QUEUE": name,
            "PYTHONPATH": str(ROOT),
            marker_targets.MARKER_DIR: str(markers),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in markers.iterdir()) == []  # neither imported nor called
    queue = make_queue(redis, name)
    refused = queue.fetch_job(forged.id)
    assert refused is not None and refused.get_status() is JobStatus.FAILED
    result = refused.latest_result()
    assert result is not None and "not one of the project's job functions" in (
        result.exc_string or ""
    )
    assert "names a callback" in done.stderr
    assert queue.fetch_job(with_callback.id) is not None
    # RQ's own webhooks (any URL, method and headers a record names) are never called.
    assert heard == []
    assert "webhooks; ignored" in done.stderr


def _listener(heard: list[str]) -> str:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            heard.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"
