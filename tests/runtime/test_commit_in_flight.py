"""An at_least_once commit does not stop the loop: the task goes on processing while the
records of the batch it commits are acknowledged, and the commit still covers exactly its batch
(offsets, changelog, store writes), on the embedded broker behind a proxy that delays every
request, without Spark."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from structlog.testing import capture_logs

from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import changelog_topic, commit_marker_topic
from processor_api.logging import configure_logging, current_level
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochRequest
from processor_api.serdes import Serdes
from tests.harness.proxy import broker_behind_proxy
from tests.harness.task_runs import one_task
from tests.harness.topics import TopicReader, read_topic, uid
from topologies.count_per_key import build_topology

pytestmark = pytest.mark.integration

RECORDS = 300
KEYS = 20


@pytest.fixture(scope="module")
def slow_broker():
    """A broker of its own behind a proxy (the added latency must not slow other tests)."""
    with broker_behind_proxy() as (broker, proxy):
        yield broker, proxy


@pytest.fixture
def debug_logs():
    """``task_committed`` is a debug event: log at debug for the test, then as before."""
    level = current_level()
    configure_logging("console", "debug")
    yield
    configure_logging("console", level)


def _produce(producer: Producer, topic: str, first: int, last: int) -> None:
    """Record ``i`` (key ``k<i % KEYS>``, timestamp ``i``) every 10 ms, ``i`` = first..last."""
    for i in range(first, last + 1):
        producer.produce(topic, b"v", f"k{i % KEYS}".encode(), partition=0, timestamp=i)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)


def test_the_loop_processes_input_while_a_commit_waits_for_its_acknowledgements(
    slow_broker, tmp_path, debug_logs
):
    broker, proxy = slow_broker
    run_id = uid()
    app, source, sink = f"in-flight-{run_id}", f"in-{run_id}", f"out-{run_id}"
    for topic in (source, sink, commit_marker_topic(app), changelog_topic(app, "counts")):
        broker.create_topic(topic, 1)
    spec, runner = one_task(
        EpochTaskRunner,
        build_topology(input_topic=source, output_topic=sink),
        run_id=run_id,
        bootstrap=proxy.address,
        state_dir=tmp_path,
        config={"application_id": app, "commit_interval_ms": 300},
        input_topic=source,
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    end = EpochEnd(end_offsets={(source, 0): RECORDS})
    outcome: dict = {}

    def epoch() -> None:
        request = EpochRequest(spec, "0_0", None, 1, end)
        outcome["reply"] = runner.run_epoch(request, EpochControl(connected=lambda: True))

    try:
        with capture_logs() as logs:
            thread = threading.Thread(target=epoch, daemon=True)
            thread.start()
            _produce(producer, source, 1, 1)
            with TopicReader(broker.bootstrap_servers, sink) as out:
                out.wait_for(lambda records: len(records) >= 1, timeout_s=60)  # the task runs
            # from now on every request reaches the broker 0.3 s late, so do acknowledgements
            proxy.latency_s = 0.3
            _produce(producer, source, 2, RECORDS)
            thread.join(120)
    finally:
        proxy.latency_s = 0.0
        runner.close()
    reply = outcome["reply"]
    commits = [e for e in logs if e["event"] == "task_committed"]
    # Record i has timestamp i, so a commit's stream time is how many records its batch ends
    # at; ``processed`` is how many the task had processed when the commit completed.
    assert any(c["processed"] > c["stream_time"] for c in commits), [
        (c["processed"], c["stream_time"], c["changelog_records"], c["step_ms"]) for c in commits
    ]
    assert reply.processed == RECORDS
    direct = broker.bootstrap_servers
    assert committed_offsets(direct, app, [(source, 0)]) == {(source, 0): RECORDS}
    counts = Serdes.long().deserialize
    last: dict[str, int] = {}
    for record in read_topic(direct, changelog_topic(app, "counts")):
        last[record.key.decode()] = counts(record.value)
    assert last == {f"k{k}": RECORDS // KEYS for k in range(KEYS)}
