"""A task's input as a stream: one consumer on the task's partitions, polled by its loop.

:class:`ContinuousInput` is what Kafka Streams' stream thread does with its main consumer, for
one task: the partition of every input topic is assigned at the task's committed position
(or the source's reset policy when it has none), and :meth:`poll` returns what arrived,
waiting at most the given time for the first record and never for a full batch. It knows per
partition how far it has read (``read_end``: past records, transaction markers and skipped
offsets, as the consumer's position and partition-EOF tell) and the broker's end as the last
fetch response saw it, so the task's lag per input is known without a broker round trip
(``max.task.idle.ms`` needs it). End offsets (``--available-now``, bounded epochs) pause a
partition once reached; records at or past them are not handed out.

The consumer never joins a group and never commits: progress is committed by the task's
guarantee (commit markers, group offsets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from processor_api.engine.records import InputRecord
from processor_api.errors import SourceReadError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.reader import LARGE_FETCH
from processor_api.logging import get_logger

_FATAL_CODES = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
)

#: Records taken from the consumer per poll (Kafka Streams' ``max.poll.records`` is 1,000;
#: Python pays per call, so more per call, still handed out as soon as they are there).
POLL_RECORDS = 5_000
#: Input silent this long (no record, no end of partition) makes the task ask the broker
#: whether it is there: a consumer says nothing while its broker is gone.
PROBE_AFTER_S = 5.0
#: How long that question waits for an answer.
PROBE_TIMEOUT_S = 2.0


class ContinuousInput:
    """The consumer of one task's input partitions (see the module docs)."""

    def __init__(
        self,
        bootstrap_servers: str,
        task_id: str,
        partition: int,
        *,
        isolation_level: str,
        kafka: KafkaClientConfig | None = None,
        poll_records: int = POLL_RECORDS,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self.task_id = task_id
        self.partition = partition
        self.poll_records = poll_records
        self._consumer: Consumer | None = Consumer(
            client_config(
                bootstrap_servers,
                f"task-{task_id}",
                role="consumer",
                kafka=kafka,
                defaults={"fetch.wait.max.ms": 50, **LARGE_FETCH},
                **{
                    "group.id": f"processor-api-task-{task_id}-{uuid.uuid4().hex}",  # never joined
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error",
                    "isolation.level": isolation_level,
                    "allow.auto.create.topics": False,
                },
            )
        )
        self.read_end: dict[str, int] = {}
        self._eof: dict[str, bool] = {}
        self._bounds: dict[str, int] = {}
        self._paused: set[str] = set()
        self._topics: list[str] = []
        self._answered_at = time.monotonic()  # the broker last answered (a fetch, a probe)
        self._probed_at = 0.0
        self._unreachable_since: float | None = None
        self._log = get_logger("processor_api.task_input", task=task_id)

    # ------------------------------------------------------------------ position
    def assign(self, positions: Mapping[str, int | None], reset: Mapping[str, str]) -> None:
        """Read every topic of ``positions`` on the task's partition from its offset (None:
        the topic's reset policy in ``reset``, ``earliest`` or ``latest``)."""
        consumer = self._require()
        if self._paused:
            consumer.resume([TopicPartition(t, self.partition) for t in self._paused])
        self._topics = list(positions)
        self.read_end = {}
        assignment = []
        for topic, offset in positions.items():
            if offset is None:
                offset = OFFSET_END if reset.get(topic) == "latest" else OFFSET_BEGINNING
            else:
                self.read_end[topic] = offset
            assignment.append(TopicPartition(topic, self.partition, offset))
        self._eof = dict.fromkeys(self._topics, False)
        self._paused.clear()
        consumer.assign(assignment)

    def set_bounds(self, end_offsets: Mapping[str, int] | None) -> None:
        """Stop handing out records of a topic at its end offset (None: no bounds)."""
        consumer = self._require()
        self._bounds = dict(end_offsets or {})
        if self._paused:
            consumer.resume([TopicPartition(t, self.partition) for t in self._paused])
            self._paused.clear()
        self._pause_reached()

    @property
    def has_bounds(self) -> bool:
        """Whether some topic has an end offset (the epoch ends once they are reached)."""
        return bool(self._bounds)

    # ---------------------------------------------------------------------- poll
    def poll(self, timeout_s: float) -> list[InputRecord]:
        """The records that arrived, in offset order per partition: at most ``poll_records``;
        waits up to ``timeout_s`` for the first one only."""
        consumer = self._require()
        messages = consumer.consume(self.poll_records, 0)
        if not messages and timeout_s > 0:
            first = consumer.poll(timeout_s)
            if first is not None:
                messages = [first, *consumer.consume(self.poll_records - 1, 0)]
        now = time.monotonic()
        if messages:
            self._answered_at, self._unreachable_since = now, None
        elif now - max(self._answered_at, self._probed_at) >= PROBE_AFTER_S:
            self._probe(consumer)
        overshot: set[str] = set()
        records = self._to_records(messages, overshot)
        for topic in overshot:  # fetched past its end: read again from there later
            self._require().seek(TopicPartition(topic, self.partition, self._bounds[topic]))
        self._advance_skipped()
        self._pause_reached()
        return records

    @property
    def topics(self) -> list[str]:
        """The input topics assigned."""
        return list(self._topics)

    @property
    def unreachable_since(self) -> float | None:
        """Since when (monotonic) the broker has not answered, while it does not; else None."""
        return self._unreachable_since

    def _probe(self, consumer: Consumer) -> None:
        """Ask for the cluster's metadata (all topics: naming one may create it on some
        brokers); no answer within :data:`PROBE_TIMEOUT_S` means the broker is unreachable."""
        self._probed_at = time.monotonic()
        try:
            consumer.list_topics(timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            if self._unreachable_since is None:
                self._unreachable_since = self._answered_at
                self._log.debug("broker_unreachable", error=str(exc))
            return
        self._answered_at, self._unreachable_since = time.monotonic(), None

    def _to_records(self, messages: list[Any], overshot: set[str]) -> list[InputRecord]:
        records: list[InputRecord] = []
        append = records.append
        bounds = self._bounds
        read_end = self.read_end
        not_available = TIMESTAMP_NOT_AVAILABLE
        for message in messages:
            error = message.error()
            topic = message.topic()
            if error is not None:
                self._on_error(topic, message, error)
                continue
            offset = message.offset()
            bound = bounds.get(topic)
            if bound is not None and offset >= bound:
                # fetched in order from the task's position: everything below the bound was
                # handed out before (or is not there), so the topic has reached it, even when
                # nothing was read below it (a bound at the partition's first offset)
                if bound > read_end.get(topic, -1):
                    read_end[topic] = bound
                overshot.add(topic)
                continue
            kind, timestamp = message.timestamp()
            headers = message.headers()
            append(
                InputRecord(
                    topic,
                    self.partition,
                    offset,
                    -1 if kind == not_available else timestamp,
                    message.key(),
                    message.value(),
                    () if headers is None else tuple(headers),
                )
            )
            read_end[topic] = offset + 1
            self._eof[topic] = False
        return records

    def _on_error(self, topic: str, message: Any, error: KafkaError) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            end = int(message.offset())
            bound = self._bounds.get(topic)
            if bound is not None:
                end = min(end, bound)
            if end > self.read_end.get(topic, -1):
                self.read_end[topic] = end
            self._eof[topic] = True
            return
        offset = self.read_end.get(topic)
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise SourceReadError(
                f"offset {offset} is no longer on the broker (retention or compaction removed "
                f"it, or the broker lost data): {error.str()}",
                topic=topic,
                partition=self.partition,
                offset=offset,
            )
        if error.fatal() or code in _FATAL_CODES:
            raise SourceReadError(
                f"reading failed: {error.str()}", topic=topic, partition=self.partition,
                offset=offset,
            )  # fmt: skip
        self._log.debug("read_transient_error", topic=topic, error=error.str())

    def _advance_skipped(self) -> None:
        """Offsets the broker skips (transaction markers, aborted or compacted records) move
        the consumer's position without a record."""
        consumer = self._require()
        try:
            positions = consumer.position([TopicPartition(t, self.partition) for t in self._topics])
        except KafkaException:
            return
        for tp in positions:
            if tp.offset >= 0 and tp.offset > self.read_end.get(tp.topic, -1):
                bound = self._bounds.get(tp.topic)
                self.read_end[tp.topic] = tp.offset if bound is None else min(tp.offset, bound)

    def _pause_reached(self) -> None:
        reached = [
            topic
            for topic, bound in self._bounds.items()
            if topic not in self._paused and self.read_end.get(topic, -1) >= bound
        ]
        if reached:
            self._require().pause([TopicPartition(t, self.partition) for t in reached])
            self._paused.update(reached)

    # ----------------------------------------------------------------------- lag
    def lags(self) -> dict[str, int | None]:
        """Per topic, records the broker has past what was read (0 at a bound or at
        partition-EOF; None when no fetch response told yet)."""
        consumer = self._require()
        lags: dict[str, int | None] = {}
        for topic in self._topics:
            read = self.read_end.get(topic)
            bound = self._bounds.get(topic)
            if bound is not None and read is not None and read >= bound:
                lags[topic] = 0
                continue
            if self._eof.get(topic):
                lags[topic] = 0
                continue
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, self.partition), cached=True
            )
            if high is None or high < 0 or read is None:
                lags[topic] = None
            else:
                end = high if bound is None else min(high, bound)
                lags[topic] = max(0, end - read)
        return lags

    def reached(self) -> bool:
        """Whether every bounded topic was read up to its end offset."""
        return all(self.read_end.get(t, -1) >= bound for t, bound in self._bounds.items())

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass

    def _require(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError(f"task {self.task_id}: its input is closed")
        return self._consumer
