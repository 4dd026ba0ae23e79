"""A Spark task waiting for its epoch hears from the host every few seconds, and a host whose
loop stands still fails the call within a bound instead of holding it forever.

Before ``EpochAlive``, the call of an epoch without a time limit (``--available-now``,
bounded epochs) waited for the host's reply with no deadline: a task stuck in a processor
held the Spark task, and the run, without a word.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from processor_api import Processor, ProcessorContext, Record, Serdes, Topology
from processor_api.errors import TaskTimeoutError
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime import worker_host
from processor_api.runtime.host_client import (
    close_hosts,
    exchange,
    receive_message,
    send_message,
    socket_name,
)
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import EpochAlive, EpochEnd, EpochReply
from processor_api.spark.epoch_function import ANSWER_GRACE_S, loop_patience_s
from tests.harness.task_runs import epoch_request, one_task_epoch, worker_of
from tests.harness.topics import produce, uid

WAIT_S = 10.0
STRINGS = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}


def _fake_host(task_dir: Path, messages: list[Any]) -> threading.Thread:
    """A listener under the name a worker computes for ``task_dir``: it reads one request
    and sends ``messages`` in order."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + socket_name(task_dir, os.getppid()))
    listener.listen(1)

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                receive_message(connection)
                try:
                    for message in messages:
                        send_message(connection, message)
                    # hold the connection until the client has read or given up
                    connection.recv(1)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up before the last message (it may, on a stuck host)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


#: The reply the fake hosts send after their signs of life.
REPLY = EpochReply(
    metadata_json="{}",
    processed=10,
    outputs=10,
    changelog_records=0,
    restored=0,
    commits=1,
    inits=1,
    rebuilt=True,
)


def test_signs_of_life_are_passed_over_until_the_reply(tmp_path: Path) -> None:
    thread = _fake_host(tmp_path, [EpochAlive(0.1), EpochAlive(0.2), REPLY])
    reply = exchange(
        tmp_path,
        "console",
        epoch_request(1, EpochEnd(end_offsets={("in", 0): 10})),
        timeout_s=WAIT_S,
        stuck_after_s=5.0,
    )
    thread.join(WAIT_S)
    assert reply == REPLY


def test_a_loop_standing_still_too_long_fails_the_call_naming_the_host(tmp_path: Path) -> None:
    thread = _fake_host(tmp_path, [EpochAlive(0.1), EpochAlive(7.5), REPLY])
    with pytest.raises(
        TaskTimeoutError,
        match=re.escape(
            f"the host of worker {tmp_path.name} ({tmp_path.parent}) is stuck in EpochRequest: "
        )
        + r"its loop has not turned for 8s \(more than 5s\)",
    ):
        exchange(
            tmp_path,
            "console",
            epoch_request(1, EpochEnd(end_offsets={("in", 0): 10})),
            timeout_s=WAIT_S,
            stuck_after_s=5.0,
        )
    thread.join(WAIT_S)


def test_the_host_sends_signs_of_life_only_while_the_epoch_runs(monkeypatch) -> None:
    monkeypatch.setattr(worker_host, "ALIVE_INTERVAL_S", 0.02)
    host_side, spark_side = socket.socketpair()
    with host_side, spark_side:
        spark_side.settimeout(WAIT_S)
        last_turn = [0.0]
        with worker_host._signs_of_life(host_side, lambda: last_turn[0]):
            first = receive_message(spark_side)
            second = receive_message(spark_side)
        assert isinstance(first, EpochAlive) and isinstance(second, EpochAlive)
        assert second.loop_idle_s >= first.loop_idle_s > 0
        # the sender is joined when the block ends: nothing more can come
        spark_side.setblocking(False)
        with pytest.raises(BlockingIOError):
            spark_side.recv(1)


class StuckUntilReleased(Processor):
    """Stands still in ``process`` until the file ``release`` exists."""

    def __init__(self, release: str) -> None:
        self.release = Path(release)

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        while not self.release.exists():
            threading.Event().wait(0.05)
        self.context.forward(record)


def build_stuck(input_topic: str, output_topic: str, release: str) -> Topology:
    return (
        Topology()
        .add_source("in", input_topic, **STRINGS)
        .add_processor("stuck", lambda: StuckUntilReleased(release), "in")
        .add_sink("out", output_topic, "stuck", **STRINGS)
    )


@pytest.mark.integration
def test_an_available_now_epoch_stuck_in_a_processor_fails_within_the_bound(
    kafka, tmp_path: Path
) -> None:
    run_id = uid()
    app, source, sink = f"alive-{run_id}", f"in-{run_id}", f"out-{run_id}"
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, source, [(b"k", b"v")])
    release = tmp_path / "release"
    task_timeout_ms = 1000
    spec = JobSpec(
        run_id=run_id,
        topology_ref=f"{__name__}:build_stuck",
        topology_kwargs={"input_topic": source, "output_topic": sink, "release": str(release)},
        topology_pickle=None,
        bootstrap_servers=kafka.bootstrap_servers,
        state_dir=str(tmp_path / "state"),
        config={"application_id": app, "task_timeout_ms": task_timeout_ms},
        task_ids=("0_0",),
        flush_timeout_s=10,
        reset_policies={source: "earliest"},
    )
    request = one_task_epoch(spec, None, 1, EpochEnd(end_offsets={(source, 0): 1}))
    directory = worker_of(spec)
    outcome: list[BaseException | Any] = []

    def call() -> None:
        try:
            outcome.append(
                exchange(
                    directory,
                    "console",
                    request,
                    timeout_s=task_timeout_ms / 1000 + ANSWER_GRACE_S,
                    stuck_after_s=loop_patience_s(task_timeout_ms / 1000),
                )
            )
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        # the host speaks every ALIVE_INTERVAL_S; the call must end soon after the bound
        caller.join(worker_host.ALIVE_INTERVAL_S * 2 + 30)
        assert not caller.is_alive(), "the call still waits for a host stuck in a processor"
        assert len(outcome) == 1 and isinstance(outcome[0], TaskTimeoutError), outcome
        assert "its loop has not turned" in str(outcome[0])
        assert "worker w0" in str(outcome[0]) and str(directory.parent) in str(outcome[0])
    finally:
        release.touch()
        close_hosts(spec.state_dir, app, ["0_0"])
