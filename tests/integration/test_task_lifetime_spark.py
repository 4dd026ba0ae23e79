"""A task lives across epochs on Spark, as a Kafka Streams task lives across polls: ``init()``
runs once per task lifetime however many epochs there are, again only when the task is
rebuilt (here: the state dir deleted between two runs), and the schedules it registers resume
their persisted due times: no punctuation skipped or repeated. The driver's setup check runs
``init()`` and ``close()`` of task 0_0 once more before each run, in the driver's process (this
one): counted apart.

Both runs are continuous, in epochs of one second; the input comes in waves, each once an
ended epoch has processed the one before, so every wave is processed in an epoch of its own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter, defaultdict

import pytest

from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.serdes import Serdes
from processor_api.spark.runner import RunResult
from tests.harness.runs import NO_SNAPSHOTS, BackgroundRun, settings_for
from tests.harness.topics import TopicReader, uid

pytestmark = pytest.mark.integration

PARTITIONS = 2  # a task slot each on the shared local[2] session: continuous epochs
INTERVAL_MS = 5_000
EPOCH_S = 1.0  # short epochs: each run spans several
WAVE = 500  # records per wave: one wave per epoch at least
WAVE_TIMEOUT_S = 60.0


def _records(first: int, count: int) -> list[tuple[bytes, bytes, int]]:
    """Record ``i`` goes to partition ``i % 2`` with key ``k<i % 7>`` and timestamp ``(i + 1) * 100`` (librdkafka turns 0 into now)."""
    return [
        (f"k{i % 7}".encode(), f"v{i}".encode(), i % PARTITIONS)
        for i in range(first, first + count)
    ]


def _expected_ticks(timestamps: list[int]) -> list[int]:
    """Stream-time punctuation of one task (Kafka Streams' rule)."""
    due, stream_time, fired = 0, -1, []
    for timestamp in timestamps:
        stream_time = max(stream_time, timestamp)
        if stream_time >= due:
            fired.append(stream_time)
            due = (stream_time // INTERVAL_MS + 1) * INTERVAL_MS
    return fired


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    tracker = DeliveryTracker(make_producer(bootstrap))
    for i, (key, value, partition) in zip(
        range(first, first + count), _records(first, count), strict=True
    ):
        tracker.produce(topic, key, value, partition=partition, timestamp=(i + 1) * 100)
    tracker.flush_and_check(30)


def _wait_processed(run: BackgroundRun, records: int) -> None:
    """Wait until the run's ended epochs processed ``records`` records."""
    deadline = time.monotonic() + WAVE_TIMEOUT_S
    while (processed := run.runner._progress.result.records) < records:
        run.check()
        assert run.is_alive(), f"the run ended after {processed} of {records} records"
        assert time.monotonic() < deadline, (
            f"ended epochs processed {processed} of {records} records in {WAVE_TIMEOUT_S:g}s"
        )
        time.sleep(0.1)


def _run_in_waves(kafka, spark, tmp_path, app_id, topics, log_path, first, count) -> RunResult:
    """Records ``first`` .. ``first + count`` in waves of :data:`WAVE` through a continuous
    run, each wave once ended epochs processed the ones before; then the run is stopped."""
    settings = settings_for(
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        checkpoint_dir=str(tmp_path / "checkpoint"),
        epoch_interval_s=EPOCH_S,
        config=NO_SNAPSHOTS,  # the restore below replays the changelogs
    )
    with BackgroundRun(
        "tests.integration.topologies_for_tests:build_lifetime",
        settings,
        spark=spark,
        topology_kwargs={**topics, "log_path": str(log_path), "interval_ms": INTERVAL_MS},
    ) as run:
        for start in range(first, first + count, WAVE):
            _produce(kafka.bootstrap_servers, topics["input_topic"], start, WAVE)
            _wait_processed(run, start + WAVE - first)
        result = run.stop()
    waves = count // WAVE
    assert result.records == count, result
    # every wave came after the epoch that processed the one before had ended
    assert result.batches >= waves, f"{waves} waves in {result.batches} epochs"
    return result


def _lifecycle(log_path) -> tuple[Counter, Counter]:
    """``(what, task)`` counts of the lifecycle log: on the driver (this process: the run's
    setup check), and on the executors (the task hosts)."""
    driver: Counter = Counter()
    executors: Counter = Counter()
    for line in log_path.read_text().splitlines():
        what, task, pid = line.split()
        (driver if int(pid) == os.getpid() else executors)[(what, task)] += 1
    return driver, executors


def test_init_runs_once_per_task_lifetime_and_schedules_resume(kafka, spark, tmp_path):
    run_id = uid()
    topics = {
        "input_topic": f"life-in-{run_id}",
        "ticks_topic": f"life-ticks-{run_id}",
        "counts_topic": f"life-counts-{run_id}",
    }
    kafka.create_topic(topics["input_topic"], PARTITIONS)
    kafka.create_topic(topics["ticks_topic"], 1)
    kafka.create_topic(topics["counts_topic"], 1)
    log_path = tmp_path / "lifecycle.log"
    app_id = f"life-{run_id}"

    first_run, second_run = 6 * WAVE, 3 * WAVE
    _run_in_waves(kafka, spark, tmp_path, app_id, topics, log_path, 0, first_run)

    driver, events = _lifecycle(log_path)
    tasks = [f"0_{p}" for p in range(PARTITIONS)]
    # six waves, each in an epoch of its own: one init and one close per task
    assert {task: events[("init", task)] for task in tasks} == dict.fromkeys(tasks, 1)
    assert {task: events[("close", task)] for task in tasks} == dict.fromkeys(tasks, 1)
    # and the setup check's init() and close() on the driver, before the run started
    assert driver == {("init", "0_0"): 1, ("close", "0_0"): 1}

    # the local state goes; the Spark checkpoint (elsewhere) stays: tasks are rebuilt
    shutil.rmtree(tmp_path / "state")
    result = _run_in_waves(kafka, spark, tmp_path, app_id, topics, log_path, first_run, second_run)

    driver, events = _lifecycle(log_path)
    assert {task: events[("init", task)] for task in tasks} == dict.fromkeys(tasks, 2)
    assert driver == {("init", "0_0"): 2, ("close", "0_0"): 2}
    assert result.restored > 0

    total = first_run + second_run
    long = Serdes.long()
    expected = {
        f"0_{p}": _expected_ticks([(i + 1) * 100 for i in range(total) if i % PARTITIONS == p])
        for p in range(PARTITIONS)
    }
    with TopicReader(
        kafka.bootstrap_servers, topics["ticks_topic"], bytes.decode, long.deserialize
    ) as ticks:
        # both runs finished before reading: everything they produced is on the broker
        fired = ticks.wait_for(lambda r: len(r) >= sum(map(len, expected.values())), timeout_s=30)
    by_task: dict[str, list[int]] = defaultdict(list)
    for key, value, *_ in fired:
        by_task[key].append(value)
    assert dict(by_task) == expected

    with TopicReader(
        kafka.bootstrap_servers, topics["counts_topic"], bytes.decode, long.deserialize
    ) as counts:
        seen = counts.wait_for(lambda r: len(r) >= total, timeout_s=30)
    final = {key: value for key, value, *_ in seen}
    assert final == Counter(f"0_{i % PARTITIONS}/k{i % 7}" for i in range(total))
