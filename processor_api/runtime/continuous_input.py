"""Tasks' input as a stream: one consumer per worker over every partition of its tasks.

A :class:`WorkerInput` is what Kafka Streams' stream thread does with its main consumer: one
consumer, never in a group and never committing, assigned the input partitions of every task
the worker runs. :meth:`WorkerInput.fetch` takes what arrived (waiting at most the given time
for the first record, never for a full batch) and hands each message to the task that owns its
partition (onto that task's list for the topic). A task takes the consumer's messages as they
are (``MessageBatch``): no object is made per record between the consumer and the task's
``Record``. Each task sees its share through a :class:`ContinuousInput`: its partition of every
input topic, assigned at the task's committed position (or the source's reset policy when it
has none). A task's input knows per partition how far it has read (``read_end``: past records,
transaction markers and skipped offsets, as the consumer's position and partition-EOF tell) and
the broker's end as the last fetch response saw it, so the task's lag per input is known
without a broker round trip (``max.task.idle.ms`` needs it). End offsets (``--available-now``,
bounded epochs) pause a partition once reached; records at or past them are not handed out.

Progress is committed by each task's guarantee (commit markers, group offsets), never by the
consumer. A (topic, partition) belongs to one task: sub-topologies share no input topic.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from processor_api.engine.records import MessageBatch
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

#: Records taken from the consumer per fetch (Kafka Streams' ``max.poll.records`` is 1,000;
#: Python pays per call, so more per call, still handed out as soon as they are there).
POLL_RECORDS = 5_000
#: With interactive queries on, a wait for records looks whether a query came this often (s).
WAKE_SLICE_S = 0.002
#: Input silent this long (no record, no end of partition) makes the worker ask the broker
#: whether it is there: a consumer says nothing while its broker is gone.
PROBE_AFTER_S = 5.0
#: How long that question waits for an answer.
PROBE_TIMEOUT_S = 2.0


class WorkerInput:
    """The one consumer of a worker's tasks (see the module docs)."""

    def __init__(
        self,
        bootstrap_servers: str,
        client_name: str,
        *,
        isolation_level: str,
        kafka: KafkaClientConfig | None = None,
        poll_records: int = POLL_RECORDS,
    ) -> None:
        self.poll_records = poll_records
        self.isolation_level = isolation_level
        self._consumer: Consumer | None = Consumer(
            client_config(
                bootstrap_servers,
                client_name,
                role="consumer",
                kafka=kafka,
                defaults={"fetch.wait.max.ms": 50, **LARGE_FETCH},
                **{
                    "group.id": f"processor-api-{client_name}-{uuid.uuid4().hex}",  # never joined
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error",
                    "isolation.level": isolation_level,
                    "allow.auto.create.topics": False,
                },
            )
        )
        #: Per (topic, partition): the task's list of messages fetched and not handed out.
        self._targets: dict[tuple[str | None, int | None], list[Any]] = {}
        self._owners: dict[tuple[str | None, int | None], ContinuousInput] = {}
        self._answered_at = time.monotonic()  # the broker last answered (a fetch, a probe)
        self._probed_at = 0.0
        self.unreachable_since: float | None = None
        #: Set (from any thread) to end a wait for records early; None: waits are not woken.
        self.woken: threading.Event | None = None
        self._log = get_logger("processor_api.worker_input", client=client_name)

    @property
    def consumer(self) -> Consumer:
        """The consumer (raises once closed)."""
        if self._consumer is None:
            raise RuntimeError("the worker's input is closed")
        return self._consumer

    def attach(self, view: ContinuousInput, partitions: list[TopicPartition]) -> None:
        """Assign ``partitions`` (with their start offsets) to ``view``'s task, replacing
        what the task had."""
        self.detach(view)
        for tp in partitions:
            self._owners[(tp.topic, tp.partition)] = view
            self._targets[(tp.topic, tp.partition)] = view.pending_list(tp.topic)
        if partitions:
            self.consumer.incremental_assign(partitions)

    def detach(self, view: ContinuousInput) -> None:
        """Unassign every partition of ``view``'s task (records fetched for them are dropped)."""
        owned = [key for key, owner in self._owners.items() if owner is view]
        for key in owned:
            del self._owners[key]
            del self._targets[key]
        if owned and self._consumer is not None:
            self._consumer.incremental_unassign(
                [TopicPartition(str(t), int(p or 0)) for t, p in owned]
            )

    def fetch(self, timeout_s: float) -> int:
        """Take what arrived (at most ``poll_records``; waits up to ``timeout_s`` for the first
        record only) and hand each record to its task; how many messages came."""
        consumer = self.consumer
        messages = consumer.consume(self.poll_records, 0)
        if not messages and timeout_s > 0:
            first = self._wait(consumer, timeout_s)
            if first is not None:
                messages = [first, *consumer.consume(self.poll_records - 1, 0)]
        now = time.monotonic()
        if messages:
            self._answered_at, self.unreachable_since = now, None
        elif now - max(self._answered_at, self._probed_at) >= PROBE_AFTER_S:
            self._probe(consumer)
        targets = self._targets
        for message in messages:
            topic, partition = message.topic(), message.partition()
            target = targets.get((topic, partition))
            if target is not None:
                target.append(message)
                continue
            error = message.error()
            if error is not None and (error.fatal() or error.code() in _FATAL_CODES):
                raise SourceReadError(
                    f"reading failed: {error.str()}",
                    topic=str(topic),
                    partition=-1 if partition is None else int(partition),
                )
            if error is not None:
                self._log.debug("read_transient_error", error=error.str())
            # else: a record of a partition unassigned meanwhile: its task reads it again
        return len(messages)

    def _wait(self, consumer: Consumer, timeout_s: float) -> Any:
        """The first record within ``timeout_s``; with ``woken`` in short slices, so that
        setting it ends the wait (librdkafka's poll cannot be woken from Python)."""
        woken = self.woken
        if woken is None:
            return consumer.poll(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not woken.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            first = consumer.poll(min(left, WAKE_SLICE_S))
            if first is not None:
                return first
        return None

    def _probe(self, consumer: Consumer) -> None:
        """Ask for the cluster's metadata (all topics: naming one may create it on some
        brokers); no answer within :data:`PROBE_TIMEOUT_S` means the broker is unreachable."""
        self._probed_at = time.monotonic()
        try:
            consumer.list_topics(timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            if self.unreachable_since is None:
                self.unreachable_since = self._answered_at
                self._log.debug("broker_unreachable", error=str(exc))
            return
        self._answered_at, self.unreachable_since = time.monotonic(), None

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        self._owners.clear()
        self._targets.clear()
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass


class ContinuousInput:
    """One task's input partitions on its worker's consumer (see the module docs).

    Without a ``shared`` :class:`WorkerInput` the task gets a consumer of its own (one task
    run alone: tests, tools), closed with it.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        task_id: str,
        partition: int,
        *,
        isolation_level: str,
        kafka: KafkaClientConfig | None = None,
        poll_records: int = POLL_RECORDS,
        shared: WorkerInput | None = None,
    ) -> None:
        self.task_id = task_id
        self.partition = partition
        self._owns_shared = shared is None
        self._shared = shared or WorkerInput(
            bootstrap_servers,
            f"task-{task_id}",
            isolation_level=isolation_level,
            kafka=kafka,
            poll_records=poll_records,
        )
        #: Per topic, the messages the worker fetched for this task, not handed out yet.
        self._pending: dict[str, list[Any]] = {}
        self.read_end: dict[str, int] = {}
        self._eof: dict[str, bool] = {}
        self._bounds: dict[str, int] = {}
        self._paused: set[str] = set()
        self._topics: list[str] = []
        self._closed = False
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
        self._pending = {}
        assignment = []
        for topic, offset in positions.items():
            if offset is None:
                offset = OFFSET_END if reset.get(topic) == "latest" else OFFSET_BEGINNING
            else:
                self.read_end[topic] = offset
            assignment.append(TopicPartition(topic, self.partition, offset))
        self._eof = dict.fromkeys(self._topics, False)
        self._paused.clear()
        self._shared.attach(self, assignment)

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
    def pending_list(self, topic: str) -> list[Any]:
        """The list the worker appends ``topic``'s fetched messages to (one per topic for
        the task's life: the worker keeps a reference)."""
        pending = self._pending.get(topic)
        if pending is None:
            pending = self._pending[topic] = []
        return pending

    @property
    def pending(self) -> bool:
        """Whether the worker fetched messages for this task that it has not handed out."""
        return any(self._pending.values())

    def poll(self, timeout_s: float) -> MessageBatch:
        """The records that arrived, per topic in offset order; when none were fetched
        for the task yet, fetches first (waiting up to ``timeout_s`` for the first record
        only), unless the task shares its worker's consumer and may not wait: the worker's
        loop fetches once for all its tasks then."""
        self._require()
        if not self.pending and (self._owns_shared or timeout_s > 0):
            self._shared.fetch(timeout_s)
        batch: dict[str, list[Any]] = {}
        overshot: set[str] = set()
        for topic, pending in self._pending.items():
            if pending:
                messages = pending.copy()
                pending.clear()  # the worker appends to this list: emptied, not replaced
                records = self._records_of(topic, messages, overshot)
                if records:
                    batch[topic] = records
        for topic in overshot:  # fetched past its end: read again from there later
            self._require().seek(TopicPartition(topic, self.partition, self._bounds[topic]))
        self._advance_skipped()
        self._pause_reached()
        return MessageBatch(batch)

    @property
    def topics(self) -> list[str]:
        """The input topics assigned."""
        return list(self._topics)

    @property
    def unreachable_since(self) -> float | None:
        """Since when (monotonic) the broker has not answered, while it does not; else None."""
        return self._shared.unreachable_since

    def _records_of(self, topic: str, messages: list[Any], overshot: set[str]) -> list[Any]:
        """The records among ``messages`` (of ``topic``, in offset order) below the topic's
        bound; error events (partition-EOF, ...) are taken in order on the way."""
        records = [message for message in messages if message.error() is None]
        if len(records) != len(messages):  # events: their order against the records matters
            records = []
            for message in messages:
                error = message.error()
                if error is None:
                    records.append(message)
                    self._eof[topic] = False
                else:
                    self._on_error(topic, message, error)
        elif records:
            self._eof[topic] = False
        if not records:
            return records
        bound = self._bounds.get(topic)
        last = records[-1].offset()
        if bound is not None and last >= bound:
            # fetched in order from the task's position: everything below the bound was
            # handed out before (or is not there), so the topic has reached it, even when
            # nothing was read below it (a bound at the partition's first offset)
            records = [message for message in records if message.offset() < bound]
            if bound > self.read_end.get(topic, -1):
                self.read_end[topic] = bound
            overshot.add(topic)
            if not records:
                return records
            last = records[-1].offset()
        if last + 1 > self.read_end.get(topic, -1):
            self.read_end[topic] = last + 1
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
        """Give the task's partitions back (and close the consumer if it is the task's
        own); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending = {}
        if self._owns_shared:
            self._shared.close()
        else:
            self._shared.detach(self)

    def _require(self) -> Consumer:
        if self._closed:
            raise RuntimeError(f"task {self.task_id}: its input is closed")
        return self._shared.consumer
