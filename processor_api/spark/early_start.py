"""Worker hosts started by the driver while its query starts (local mode).

A run's first epoch call reaches the executors only after Spark has started its JVM, its
session and the streaming query and planned the first micro-batch (~11 s on a small
machine, ``bench/RESULTS.md``). In local mode the executor is this machine, so the driver
starts every worker's host itself before all that (:func:`start_hosts_early`), each on a
socket the epoch calls look for (``host_client.connect_or_start`` with the spec's
``early_start_pid``) and with the state directories they use. Each host takes its tasks'
locks and then, what a new checkpoint allows:

* **build** (a new checkpoint): the tasks are built as the first epoch builds a task Spark
  has never run (recover from the commit markers, restore, ``init``, the input's consumer,
  under exactly-once the transactional producer that fences older ones);
* **process** (a new checkpoint): the host runs them in an epoch of its own until the first
  epoch's request comes, committing as in any epoch. A commit there is what the first epoch
  would find anyway: it hands over no state, and a task built from none adopts its newest
  commit marker, which is this host's (it holds the task's lock; under exactly-once its
  producer fences any other). An ``--available-now`` run's own epoch ends at the run's end
  offsets: the driver reads them before it starts the hosts, and the same offsets bound the
  query's epoch (its rows come from Spark's ``rate-micro-batch`` source, not from Kafka, so
  Spark has no end offsets of its own to disagree with); the first epoch then finds its
  tasks at their ends, or takes over the rest.

The first epoch's call then goes on with the running tasks (``EpochTaskRunner._resume``: no
state from Spark and a task started early). A checkpoint with history gets its hosts and
locks early, and its tasks are built from Spark's state on the first call, as always: the
driver does not read Spark's state. On a cluster, the executors start their hosts when the
first call arrives.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from processor_api.logging import LEVEL_ENV, current_level, debug_enabled, get_logger
from processor_api.runtime.host_client import (
    request,
    socket_name,
    start_host,
    worker_key,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import EarlyStartRequest, EpochEnd, OkReply

#: How long the driver waits for a host it started to listen before it leaves the worker to
#: its first epoch call (which then starts a host of its own).
LISTEN_TIMEOUT_S = 30.0

_log = get_logger("processor_api.early_start")


def host_environment(spark_conf: dict[str, str]) -> dict[str, str]:
    """The environment of a host the driver starts: what Spark gives its Python workers
    (the driver's modules on ``PYTHONPATH``, the log level, Python warnings off below debug,
    ``spark.executorEnv.*``)."""
    from processor_api.spark.session import python_path

    env = dict(os.environ)
    env["PYTHONPATH"] = python_path()
    env[LEVEL_ENV] = current_level()
    if not debug_enabled():
        env.setdefault("PYTHONWARNINGS", "ignore")  # as the session gives its workers
    prefix = "spark.executorEnv."
    env.update({k[len(prefix) :]: v for k, v in spark_conf.items() if k.startswith(prefix)})
    return env


def start_hosts_early(
    spec: JobSpec,
    build: bool,
    process: bool,
    env: dict[str, str] | None = None,
    end: EpochEnd | None = None,
) -> threading.Thread:
    """Start a host for every worker of ``spec.assignment`` that has tasks, listening where
    the epoch calls look for them (``spec.early_start_pid`` must be this process), and hand
    each its tasks (:class:`EarlyStartRequest`) from a thread of its own, which is returned;
    ``build``: the tasks are built as for no state from Spark (a new checkpoint only);
    ``process``: they also process until their first epoch, or until ``end`` (an
    available-now run's end offsets, the ones its epoch gets)."""
    assert spec.early_start_pid == os.getpid(), "the spec must name this driver"
    application_id = spec.config["application_id"]
    started: list[tuple[str, str, tuple[str, ...]]] = []
    for worker, tasks in spec.assignment.items():
        if not tasks:
            continue
        key = worker_key(spec.executor_state_dir, application_id, worker)
        name = socket_name(key, spec.early_start_pid)
        start_host(key, name, spec.early_start_pid, spec.log_format, env)
        started.append((worker, name, tasks))
    _log.debug(
        "worker_hosts_started_early",
        workers=[w for w, _, _ in started],
        build=build,
        process=process,
    )
    thread = threading.Thread(
        target=_hand_over,
        args=(spec, started, build, process, end or EpochEnd()),
        name="early-start",
        daemon=True,
    )
    thread.start()
    return thread


def _hand_over(
    spec: JobSpec,
    started: list[tuple[str, str, tuple[str, ...]]],
    build: bool,
    process: bool,
    end: EpochEnd,
) -> None:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    waiting = list(started)
    while waiting and time.monotonic() < deadline:
        for item in list(waiting):
            worker, name, tasks = item
            try:
                reply: Any = request(
                    name, EarlyStartRequest(spec, worker, tasks, build, process, end), 10.0
                )
            except (OSError, ConnectionError) as exc:
                _log.warning("early_start_not_handed_over", worker=worker, error=str(exc))
                waiting.remove(item)
                continue
            if reply is None:
                continue  # not listening yet
            waiting.remove(item)
            if not isinstance(reply, OkReply):
                _log.warning("early_start_refused", worker=worker, reply=type(reply).__name__)
        if waiting:
            time.sleep(0.02)
    for worker, _, _ in waiting:
        _log.warning(
            "early_start_host_not_listening",
            worker=worker,
            detail=f"its host did not listen within {LISTEN_TIMEOUT_S:g}s; the first epoch "
            "call starts one",
        )
