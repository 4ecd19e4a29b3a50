"""Task policies with short timeouts and backoff, so retry and lease tests run in seconds."""

from __future__ import annotations

from store.repository import TaskPolicy


def task_policy(
    *,
    attempts: int,
    timeout: float,
    backoff: tuple[float, float],
    lease_grace: float,
    resume_attempts: int | None = None,
) -> TaskPolicy:
    """Deliveries and resumes each get ``attempts`` attempts (resumes ``resume_attempts``
    when given) of ``timeout`` seconds, retried after ``backoff[0]`` seconds growing to
    ``backoff[1]``; a lease lapses ``lease_grace`` seconds after its timeout."""
    return TaskPolicy(
        resume_max_attempts=attempts if resume_attempts is None else resume_attempts,
        resume_timeout_seconds=timeout,
        delivery_max_attempts=attempts,
        delivery_timeout_seconds=timeout,
        backoff_seconds=backoff[0],
        backoff_max_seconds=backoff[1],
        lease_grace_seconds=lease_grace,
    )
