"""Topics as a test sees them: unique names, producing records, reading them back.

* :func:`uid` makes topic / application ids unique per test;
* :func:`produce` writes records and waits for the broker's acknowledgement of every one;
* :class:`TopicReader` consumes a topic from offset 0 in a background thread: a test waits for
  a condition on what arrived (:meth:`TopicReader.wait_for`), for the reader to have read up to
  given offsets (:meth:`TopicReader.wait_until_read`) or for every partition's end
  (:meth:`TopicReader.read_to_end`);
* :func:`read_topic` reads a topic from offset 0 to its end like any consumer
  (``read_committed`` by default); :func:`committed_records` also tells which of those records
  belong to aborted transactions (see :mod:`tests.harness.wire`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from processor_api.errors import MissingTopicError
from processor_api.kafka.admin import TopicSpec, client_config, create_topics, topic_partitions
from processor_api.kafka.producer import DeliveryTracker, make_producer
from tests.harness.wire import topic_transaction_status


def uid(prefix: str | None = None) -> str:
    """10 random hex digits; ``prefix-<hex>`` with a prefix."""
    unique = uuid.uuid4().hex[:10]
    return f"{prefix}-{unique}" if prefix else unique


def create_topics_now(bootstrap: str, topics: dict[str, int]) -> None:
    """Create ``{name: partitions}``; an existing topic is an error."""
    create_topics(bootstrap, [TopicSpec(name, n, {}) for name, n in topics.items()], exist_ok=False)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, ...]],
    timestamp: int | None = None,
) -> int:
    """Produce ``(key, value)``, ``(key, value, partition)`` or ``(key, value, partition,
    timestamp)`` records (partition / timestamp None: the producer's choice, or ``timestamp``);
    wait for every acknowledgement. Returns how many were produced."""
    tracker = DeliveryTracker(make_producer(bootstrap))
    count = 0
    for key, value, *rest in records:
        partition = rest[0] if rest else None
        at = rest[1] if len(rest) > 1 else timestamp
        tracker.produce(topic, key, value, partition=partition, timestamp=at)
        count += 1
        if count % 5000 == 0:
            tracker.producer.poll(0)
    tracker.flush_and_check(60)
    return count


class TopicRecord(NamedTuple):
    """One record as read (key and value deserialized by the reader's functions)."""

    key: Any
    value: Any
    partition: int
    offset: int
    arrived: float  # monotonic seconds
    headers: list[tuple[str, bytes | None]] | None
    timestamp: int


class Liveness(Protocol):
    """What :meth:`TopicReader.wait_for` needs of a run (e.g. ``runs.BackgroundRun``)."""

    def is_alive(self) -> bool: ...

    def check(self) -> None: ...


def _identity(data: bytes | None) -> Any:
    return data


class TopicReader:
    """Reads ``topic`` from offset 0 in a daemon thread; ``records`` is what arrived so far.

    ``partitions``: only these (default: every partition, once the topic exists; the runner
    may create it). ``isolation``: the consumer's ``isolation.level``.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        key_fn: Callable[[bytes | None], Any] = _identity,
        value_fn: Callable[[bytes | None], Any] = _identity,
        *,
        isolation: str = "read_uncommitted",
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.topic = topic
        self._key_fn, self._value_fn = key_fn, value_fn
        self._bootstrap = bootstrap
        self._partitions = list(partitions) if partitions is not None else None
        self._consumer = Consumer(
            client_config(
                bootstrap,
                "test-reader",
                **{
                    "group.id": uid("test-reader"),
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": isolation,
                    "fetch.wait.max.ms": 50,
                },
            )
        )
        self._lock = threading.Lock()
        self._records: list[TopicRecord] = []
        self._errors: list[str] = []
        self._next: dict[int, int] = {}  # partition -> offset after the last record read
        self._at_end: dict[int, int] = {}  # partition -> its end, reached after the last record
        self._assigned = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"read-{topic}")

    def __enter__(self) -> TopicReader:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _assign(self) -> bool:
        """Assign the partitions from offset 0 once the topic exists. No subscribe(): a
        metadata request naming a missing topic can auto-create it."""
        if self._partitions is None:
            try:
                count = topic_partitions(self._bootstrap, [self.topic])[self.topic]
            except MissingTopicError:
                return False
            self._partitions = list(range(count))
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self._partitions]
        )
        self._assigned.set()
        return True

    def _loop(self) -> None:
        while not self._stop.is_set() and not self._assign():
            time.sleep(0.2)
        while not self._stop.is_set():
            for message in self._consumer.consume(10_000, timeout=0.1):
                partition = message.partition()
                error = message.error()
                if error is not None:
                    with self._lock:
                        if error.code() == KafkaError._PARTITION_EOF:
                            self._at_end[partition] = message.offset()
                        elif error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                            self._errors.append(error.str())
                    continue
                entry = TopicRecord(
                    self._key_fn(message.key()),
                    self._value_fn(message.value()),
                    partition,
                    message.offset(),
                    time.monotonic(),
                    message.headers(),
                    message.timestamp()[1],
                )
                with self._lock:
                    self._records.append(entry)
                    self._next[partition] = message.offset() + 1
                    self._at_end.pop(partition, None)

    @property
    def records(self) -> list[TopicRecord]:
        with self._lock:
            return list(self._records)

    def pairs(self) -> list[tuple[Any, Any]]:
        return [(record.key, record.value) for record in self.records]

    def _failure(self, records: list[TopicRecord]) -> str:
        return (
            f"got {len(records)}: {[(r.key, r.value) for r in records][:50]}; "
            f"consumer errors: {self._errors[:5]}"
        )

    def wait_for(
        self,
        condition: Callable[[list[TopicRecord]], bool],
        timeout_s: float,
        while_alive: Liveness | None = None,
    ) -> list[TopicRecord]:
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
                    f"arrived; got {[(r.key, r.value) for r in records]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"expected records on {self.topic} did not arrive within {timeout_s:g}s; "
                    + self._failure(records)
                )
            time.sleep(0.1)

    def wait_until_read(self, ends: dict[int, int], timeout_s: float) -> list[TopicRecord]:
        """Wait until every partition ``p`` is read up to offset ``ends[p]`` (e.g. the high
        watermarks once nothing writes any more): then ``records`` is all there is."""

        def done() -> bool:
            with self._lock:
                return all(
                    max(self._next.get(p, 0), self._at_end.get(p, 0)) >= end
                    for p, end in ends.items()
                )

        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{self.topic} was not read up to {ends} within {timeout_s:g}s; "
                    f"read up to {self._next}, at the end of {self._at_end}; "
                    + self._failure(self.records)
                )
            time.sleep(0.05)
        return self.records

    def read_to_end(self, timeout_s: float) -> list[TopicRecord]:
        """Wait until every partition is at its end (EOF; under ``read_committed`` the last
        stable offset) with no record read after it. Raises ``RuntimeError`` on a consumer
        error and ``TimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if self._errors:
                    raise RuntimeError(f"reading {self.topic}: {self._errors[0]}")
                partitions = self._partitions if self._assigned.is_set() else None
                if partitions is not None and set(self._at_end) >= set(partitions):
                    return list(self._records)
                done = sorted(self._at_end)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {self.topic}: partitions {done} of {partitions} reached their "
                    f"end within {timeout_s:g}s"
                )
            time.sleep(0.02)


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    isolation: str = "read_committed",
    partitions: Sequence[int] | None = None,
    timeout_s: float = 60.0,
) -> list[TopicRecord]:
    """Every record a consumer with ``isolation`` gets, from offset 0 to the end of each of
    ``partitions`` (default: all; a missing topic raises ``MissingTopicError``)."""
    if partitions is None:
        partitions = range(topic_partitions(bootstrap, [topic])[topic])
    with TopicReader(bootstrap, topic, isolation=isolation, partitions=partitions) as reader:
        return reader.read_to_end(timeout_s)


def committed_records(bootstrap: str, topic: str) -> tuple[list[TopicRecord], list[TopicRecord]]:
    """(records a Kafka-compliant ``read_committed`` reader gets, records Tansu's
    ``read_committed`` reader gets although their transaction was aborted)."""
    records = read_topic(bootstrap, topic)
    status = topic_transaction_status(bootstrap, topic)
    kept = [r for r in records if status.get((r.partition, r.offset)) != "aborted"]
    aborted = [r for r in records if status.get((r.partition, r.offset)) == "aborted"]
    return kept, aborted
