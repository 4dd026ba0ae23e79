"""Helpers for the integration tests: real Tansu broker (``kafka``) + real Spark (``spark``).

* :func:`uid` makes topic / application ids unique per test;
* :func:`produce` writes records and waits for the broker's acknowledgement;
* :class:`TopicReader` consumes a topic from the beginning in a background thread and lets a
  test wait for a condition on what arrived;
* :class:`BackgroundRun` runs a :class:`TopologyRunner` in continuous mode in a thread and stops
  it with ``request_stop()``;
* :func:`run_cli` runs ``python -m processor_api.cli`` in a subprocess from the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from processor_api.errors import MissingTopicError
from processor_api.kafka.admin import client_config, topic_partitions
from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.spark.runner import RunResult, RunSettings, TopologyRunner

REPO_ROOT = Path(__file__).resolve().parents[2]
# How long a stopped run may take to wind down: the runner waits for the micro-batch in flight
# (bounded by spark_runner.STOP_GRACE_S = 60 s).
STOP_TIMEOUT_S = 90.0


def uid() -> str:
    return uuid.uuid4().hex[:10]


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int]],
    timestamp: int | None = None,
) -> int:
    """Produce ``(key, value)`` or ``(key, value, partition)`` records; wait for every ack."""
    tracker = DeliveryTracker(make_producer(bootstrap))
    count = 0
    for record in records:
        key, value, *partition = record
        tracker.produce(
            topic, key, value, partition=partition[0] if partition else None, timestamp=timestamp
        )
        count += 1
    tracker.flush_and_check(30)
    return count


class TopicReader:
    """Reads ``topic`` from offset 0 in a daemon thread; ``records`` is what arrived so far.

    Each entry: ``(key, value, partition, offset, arrived_monotonic)`` with key and value
    deserialized by ``key_fn`` / ``value_fn`` (raw bytes by default).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        key_fn: Callable[[bytes | None], Any] = lambda b: b,
        value_fn: Callable[[bytes | None], Any] = lambda b: b,
    ) -> None:
        self.topic = topic
        self._key_fn, self._value_fn = key_fn, value_fn
        self._consumer = Consumer(
            client_config(
                bootstrap,
                "test-reader",
                **{
                    "group.id": f"test-reader-{uid()}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "isolation.level": "read_uncommitted",
                    "fetch.wait.max.ms": 50,
                },
            )
        )
        self._lock = threading.Lock()
        self._records: list[tuple] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._bootstrap = bootstrap
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"read-{topic}")

    def __enter__(self) -> TopicReader:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _assign(self) -> bool:
        """Assign every partition from offset 0 once the topic exists (the runner may create
        it). No subscribe(): a metadata request naming a missing topic can auto-create it."""
        try:
            count = topic_partitions(self._bootstrap, [self.topic])[self.topic]
        except MissingTopicError:
            return False
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(count)]
        )
        return True

    def _loop(self) -> None:
        while not self._stop.is_set() and not self._assign():
            time.sleep(0.2)
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() not in (
                    KafkaError._PARTITION_EOF,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                ):
                    with self._lock:
                        self._errors.append(error.str())
                continue
            entry = (
                self._key_fn(message.key()),
                self._value_fn(message.value()),
                message.partition(),
                message.offset(),
                time.monotonic(),
            )
            with self._lock:
                self._records.append(entry)

    @property
    def records(self) -> list[tuple]:
        with self._lock:
            return list(self._records)

    def pairs(self) -> list[tuple[Any, Any]]:
        return [(key, value) for key, value, *_ in self.records]

    def wait_for(
        self,
        condition: Callable[[list[tuple]], bool],
        timeout_s: float,
        while_alive: BackgroundRun | None = None,
    ) -> list[tuple]:
        """Wait until ``condition(records)`` holds; fail with what arrived otherwise.

        With ``while_alive``, fail at once (with the run's error) if that run ends first.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            records = self.records
            if condition(records):
                return records
            if while_alive is not None and not while_alive.is_alive():
                while_alive.check()
                pytest.fail(
                    f"the run ended before the expected records on {self.topic} "
                    f"arrived; got {[(r[0], r[1]) for r in records]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"expected records on {self.topic} did not arrive within {timeout_s:g}s; "
                    f"got {len(records)}: {[(r[0], r[1]) for r in records][:50]}; "
                    f"consumer errors: {self._errors[:5]}"
                )
            time.sleep(0.1)


class BackgroundRun:
    """``TopologyRunner(...).run()`` in a thread (continuous mode); stopped on exit."""

    def __init__(
        self,
        topology: str,
        settings: RunSettings,
        *,
        spark: Any,
        topology_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.runner = TopologyRunner(
            topology, settings, topology_kwargs=topology_kwargs, spark=spark
        )
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self.stop_s: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="topology-run")

    def _run(self) -> None:
        try:
            self.result = self.runner.run()
        except BaseException as exc:  # reported by check()
            self.error = exc

    def __enter__(self) -> BackgroundRun:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> RunResult:
        """request_stop(), wait for run() to return, re-raise its error."""
        began = time.monotonic()
        self.runner.request_stop()
        self._thread.join(STOP_TIMEOUT_S)
        self.stop_s = time.monotonic() - began
        if self._thread.is_alive():
            pytest.fail(f"the run did not stop within {STOP_TIMEOUT_S:g}s of request_stop()")
        self.check()
        assert self.result is not None
        return self.result

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the run failed: {self.error!r}") from self.error

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if self._thread.is_alive():
            self.runner.request_stop()
            self._thread.join(STOP_TIMEOUT_S)


def settings_for(bootstrap: str, app_id: str, state_dir: Path, **overrides: Any) -> RunSettings:
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "application_id": app_id,
        "state_dir": str(state_dir),
        "trigger_interval_s": 0.5,
        "log_format": "console",
    }
    values.update(overrides)
    return RunSettings(**values)


def run_cli(
    args: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m processor_api.cli ARGS`` from the repository root; stdout/stderr captured."""
    environment = dict(os.environ)
    paths = [
        str(REPO_ROOT),
        *[
            p
            for p in environment.get("PYTHONPATH", "").split(os.pathsep)
            if p and p != str(REPO_ROOT)
        ],
    ]
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "processor_api.cli", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# --------------------------------------------------------------------------------------------
# word count on local Spark, run once per session: checked by test_word_count_spark and used
# as the reference of test_local_cluster (same input topic)

WORD_COUNT_LINES = [
    "all streams lead to kafka",
    "hello kafka streams",
    "join kafka summit",
    "Kafka, Streams; and Spark!",
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be",
    "",
    "streams streams streams",
    "whether tis nobler in the mind to suffer",
]


class WordCountRun:
    """What the local word count run saw: topics, output records, repartition records..."""

    def __init__(
        self,
        input_topic: str,
        topics: dict[str, str],
        app_id: str,
        state_dir: Path,
        records: list[tuple],
        repartitioned: list[tuple],
        result: RunResult,
    ) -> None:
        self.input_topic = input_topic
        self.topics = topics
        self.app_id = app_id
        self.state_dir = state_dir
        self.records = records
        self.repartitioned = repartitioned
        self.result = result


@pytest.fixture(scope="session")
def word_count_local(kafka, spark, tmp_path_factory) -> WordCountRun:
    from processor_api.serdes import Serdes
    from topologies.word_count import split_words

    run_id = uid()
    topics = {
        "input_topic": f"wc-input-{run_id}",
        "repartition_topic": f"wc-repartition-{run_id}",
        "output_topic": f"wc-output-{run_id}",
    }
    app_id = f"wc-{run_id}"
    state_dir = tmp_path_factory.mktemp("word-count-local")
    kafka.create_topic(topics["input_topic"], 3)
    # every line on an explicit partition, so all three tasks of sub-topology 0 get input
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"line-{i}".encode(), line.encode(), i % 3) for i, line in enumerate(WORD_COUNT_LINES)],
    )
    total_words = sum(len(split_words(line)) for line in WORD_COUNT_LINES)
    settings = settings_for(kafka.bootstrap_servers, app_id, state_dir)
    with (
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
        ) as out,
        TopicReader(
            kafka.bootstrap_servers, topics["repartition_topic"], bytes.decode, bytes.decode
        ) as repartition,
    ):
        with BackgroundRun(
            "topologies.word_count:build_topology", settings, spark=spark, topology_kwargs=topics
        ) as run:
            out.wait_for(lambda r: len(r) >= total_words, timeout_s=120, while_alive=run)
            result = run.stop()
        records = out.records
        repartitioned = repartition.wait_for(lambda r: len(r) >= total_words, timeout_s=10)
    return WordCountRun(
        topics["input_topic"], topics, app_id, state_dir, records, repartitioned, result
    )
