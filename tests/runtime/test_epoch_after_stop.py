"""An epoch that begins after its run was asked to stop ends at once and leaves the task as
it was (issue 20: epochs from Spark's ``rate-micro-batch`` source).

With a JVM source Spark plans the next epoch within milliseconds of the previous one's end,
so the driver's stop (end the running epochs, wait for the batch, stop the query) can meet an
epoch that had just begun. Before, the host ran that epoch like any other: it processed what
had arrived since the stop, and the query's stop then cancelled the call, so that work was
dropped and the task rebuilt by the next run. A real worker host, a real broker, no Spark.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.host_client import HOST_FILE, close_hosts, exchange, request
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import EndEpochRequest, EpochEnd, EpochReply
from processor_api.state.manager import task_directory
from tests.harness.task_runs import one_task_epoch, the_reply, worker_of
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

#: Longer than any wait below: an epoch that ends reached its end some other way.
EPOCH_S = 120.0
WAIT_S = 60.0


def _spec(kafka, tmp_path: Path, app: str, source: str, sink: str) -> JobSpec:
    return JobSpec(
        run_id=uid(),
        topology_ref="tests.integration.topologies_for_tests:build_echo",
        topology_kwargs={"input_topic": source, "output_topic": sink},
        topology_pickle=None,
        bootstrap_servers=kafka.bootstrap_servers,
        state_dir=str(tmp_path / "state"),
        config={"application_id": app},
        task_ids=("0_0",),
        flush_timeout_s=10,
        reset_policies={source: "earliest"},
    )


class _Epoch:
    """One epoch call in a thread, as a Spark task makes it."""

    def __init__(self, spec: JobSpec, state_json: str | None, epoch: int) -> None:
        self.request = one_task_epoch(spec, state_json, epoch, EpochEnd(duration_s=EPOCH_S))
        self.directory = worker_of(spec)
        self.outcome: list[Any] = []
        self._thread = threading.Thread(target=self._call, daemon=True)
        self._thread.start()

    def _call(self) -> None:
        try:
            self.outcome.append(
                exchange(self.directory, "console", self.request, timeout_s=EPOCH_S + 60)
            )
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.outcome.append(exc)

    def reply(self, within_s: float) -> EpochReply:
        self._thread.join(within_s)
        assert not self._thread.is_alive(), f"epoch {self.request.epoch} still runs"
        (reply,) = self.outcome
        return the_reply(reply)


def _ask_to_stop(spec: JobSpec) -> None:
    directory = task_directory(spec.state_dir, spec.config["application_id"], "0_0")
    name = (directory / HOST_FILE).read_text().strip()
    assert request(name, EndEpochRequest(spec.run_id), timeout_s=10.0) is not None


def _wait_until_processed(spec: JobSpec, outputs: int) -> None:
    """Until the echo's output topic holds ``outputs`` records (the epoch runs)."""
    sink = spec.topology_kwargs["output_topic"]
    with TopicReader(spec.bootstrap_servers, sink, bytes.decode, bytes.decode) as out:
        out.wait_for(lambda records: len(records) >= outputs, timeout_s=WAIT_S)


def test_an_epoch_begun_after_the_stop_ends_at_once_and_leaves_the_task(kafka, tmp_path):
    app, source, sink = uid("after-stop"), uid("in"), uid("out")
    for topic in (source, sink, commit_marker_topic(app)):
        kafka.create_topic(topic, 1)
    produce(kafka.bootstrap_servers, source, [(b"k", b"before")])
    spec = _spec(kafka, tmp_path, app, source, sink)
    try:
        running = _Epoch(spec, None, epoch=1)
        _wait_until_processed(spec, outputs=1)
        _ask_to_stop(spec)
        first = running.reply(within_s=WAIT_S)
        assert first.processed == 1 and first.commits >= 1

        produce(kafka.bootstrap_servers, source, [(b"k", b"after the stop")])
        late = _Epoch(spec, first.metadata_json, epoch=2).reply(within_s=WAIT_S)
        assert (late.processed, late.commits, late.restored, late.rebuilt) == (0, 0, 0, False)
        assert late.metadata_json == first.metadata_json
        assert late.inits == first.inits == 1

        # the stop belongs to its run: the next run's epoch works as any other
        next_run = _spec(kafka, tmp_path, app, source, sink)
        later = _Epoch(next_run, first.metadata_json, epoch=3)
        _wait_until_processed(next_run, outputs=2)
        _ask_to_stop(next_run)
        assert later.reply(within_s=WAIT_S).processed == 1
    finally:
        close_hosts(spec.state_dir, app, ["0_0"])
