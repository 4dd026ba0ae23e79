"""Every topic and id name the runtime derives from the application id, in one place."""

from __future__ import annotations


def changelog_topic(application_id: str, store_name: str) -> str:
    """Kafka Streams' changelog topic name of a store."""
    return f"{application_id}-{store_name}-changelog"


def commit_marker_topic(application_id: str) -> str:
    """The topic holding each task's commit markers (exactly-once)."""
    return f"{application_id}-task-commits"


def transactional_id(application_id: str, task_id: str) -> str:
    """The transactional id of a task's producer: a restarted task fences its predecessor."""
    return f"{application_id}-{task_id}"


def worker_transactional_id(application_id: str, worker: str) -> str:
    """The transactional id of a worker's producer (exactly-once): every host of the worker,
    wherever Spark runs it, fences the previous ones with it."""
    return f"{application_id}-{worker}"


def metrics_topic(application_id: str) -> str:
    """The topic the worker hosts send their metrics reports to (``run-topology --metrics-port``)."""
    return f"{application_id}-metrics"
