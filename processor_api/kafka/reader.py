"""One bounded partition reader: exactly the offsets ``[start, end)`` of a topic-partition.

:class:`PartitionReader` is used by every bounded read of the runtime: the tasks (their planned
input ranges), the Spark source, the changelog restore, the commit-marker reader and
``read-store``; :func:`read_to_end` reads several partitions to their current end (global
stores). A range ends when a record at or past ``end`` arrives, when the consumer's position
reaches ``end`` (offsets taken by transaction markers, aborted records under
``read_committed`` or compacted-away records are skipped by the broker and never delivered, so
they are not waited for), or when partition-EOF is reported at or past ``end``. No progress for
``stall_timeout_s`` raises :class:`~processor_api.errors.StalledReadError` naming topic,
partition and offset.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from processor_api.errors import SourceReadError, StalledReadError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.logging import get_logger

_log = get_logger("processor_api.reader")

_FATAL_CODES = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
)


#: Fetch sizes for reads of whole partitions (restore, task input, ``read-store``).
def _offset(message: Message) -> int:
    """A consumed message's offset (confluent-kafka types it optional: only a message that
    was never stored in a partition has none)."""
    return cast(int, message.offset())


LARGE_FETCH = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760}


class PartitionReader:
    """Reads bounded ranges ``[start, end)`` of partitions with one consumer.

    The consumer never joins a group and never commits; it is assigned to one partition per
    :meth:`read` and may be reused for the next range.
    ``client`` names the client in logs; ``fetch`` (tuning) and the user's consumer settings
    (``kafka``, which win) go on top of the defaults, and the settings the reader relies on
    cannot be overridden. ``fail_on_data_loss=False`` starts a range whose first offsets are
    gone (retention, compaction) at the earliest offset the broker has instead of failing.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        client: str,
        *,
        isolation_level: str,
        fail_on_data_loss: bool = True,
        fetch: dict[str, Any] | None = None,
        kafka: KafkaClientConfig | None = None,
        batch_size: int = 10_000,
        stall_timeout_s: float = 60.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.batch_size = batch_size
        self.stall_timeout_s = stall_timeout_s
        self._consumer: Consumer | None = Consumer(
            client_config(
                bootstrap_servers,
                client,
                role="consumer",
                kafka=kafka,
                defaults={"fetch.wait.max.ms": 100, **(fetch or {})},
                **{
                    "group.id": f"processor-api-{client}-{uuid.uuid4().hex}",  # never joined
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
                    "isolation.level": isolation_level,
                    "allow.auto.create.topics": False,
                },
            )
        )

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[list[Any]]:
        """Yield lists of confluent-kafka ``Message``s of ``topic[partition]`` in ``[start, end)``.

        Messages come in offset order, each list at most ``batch_size`` long.
        """
        if self._consumer is None:
            raise RuntimeError("the partition reader is closed")
        return _read_bounded(
            self._consumer,
            topic,
            partition,
            start,
            end,
            batch_size=self.batch_size,
            stall_timeout_s=self.stall_timeout_s,
            source=self.bootstrap_servers,
        )

    def read_to_end(self, starts: Mapping[tuple[str, int], int]) -> Iterator[PartitionBatch]:
        """Read every partition of ``starts`` from its start offset to its current end
        (see :func:`read_to_end`)."""
        if self._consumer is None:
            raise RuntimeError("the partition reader is closed")
        return read_to_end(
            self._consumer,
            starts,
            batch_size=self.batch_size,
            stall_timeout_s=self.stall_timeout_s,
            source=self.bootstrap_servers,
        )

    def close(self) -> None:
        """Close the consumer (idempotent)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_bounded(
    consumer: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    batch_size: int = 10_000,
    stall_timeout_s: float = 60.0,
    source: str = "",
) -> Iterator[list[Any]]:
    """:meth:`PartitionReader.read`; ``source`` names the broker in errors."""
    if end <= start:
        return
    tp = TopicPartition(topic, partition)
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    eof_at: int | None = None
    last_progress = time.monotonic()
    try:
        while position < end:
            budget = max(1, min(end - position, batch_size))
            out: list[Any] = []
            done = False
            for message in consumer.consume(num_messages=budget, timeout=0.2):
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        eof_at = _offset(message)
                        if eof_at >= end:
                            done = True
                            break
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        raise SourceReadError(
                            f"offset {position} is no longer on the broker (retention or "
                            f"compaction removed it, or the broker lost data); planned range "
                            f"{start}..{end}: {error.str()}",
                            topic=topic,
                            partition=partition,
                            offset=position,
                        )
                    if error.fatal() or code in _FATAL_CODES:
                        raise SourceReadError(
                            f"reading {start}..{end} failed: {error.str()}",
                            topic=topic,
                            partition=partition,
                            offset=position,
                        )
                    _log.debug(
                        "read_transient_error", topic=topic, partition=partition, error=error.str()
                    )
                    continue
                offset = _offset(message)
                if offset >= end:
                    done = True
                    break
                if offset < position:
                    continue
                out.append(message)
                position = offset + 1
            if out:
                last_progress = time.monotonic()
                yield out
            if done or position >= end:
                break
            try:
                current = consumer.position([tp])[0].offset
            except KafkaException:
                current = None
            if current is not None and current > position:
                # skipped offsets (control records, aborted or compacted records)
                position = current
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                broker_end = (
                    f"; the broker reports its end at {eof_at}" if eof_at is not None else ""
                )
                raise StalledReadError(
                    f"no record at or after offset {position} arrived within "
                    f"{stall_timeout_s:g}s while reading the planned range {start}..{end}"
                    f"{' from ' + source if source else ''}{broker_end}",
                    topic=topic,
                    partition=partition,
                    offset=position,
                )
    finally:
        try:
            consumer.unassign()
        except KafkaException:
            pass


@dataclass(frozen=True)
class PartitionBatch:
    """Messages of one partition read by :func:`read_to_end`, in offset order; ``end`` is
    set (the partition's end offset) once the partition is read to its end."""

    topic: str
    partition: int
    messages: list[Any]
    end: int | None = None


def read_to_end(
    consumer: Consumer,
    starts: Mapping[tuple[str, int], int],
    *,
    batch_size: int = 10_000,
    stall_timeout_s: float = 60.0,
    source: str = "",
) -> Iterator[PartitionBatch]:
    """Read every partition of ``starts`` from its start offset to its current end.

    The end is where the consumer reports partition EOF: the high watermark, or the last
    stable offset under ``read_committed``, when the fetch reaches it (offsets of transaction
    markers and compacted records on the way are skipped). All partitions are read at once
    with one assignment; the consumer is unassigned afterwards and may be reused. A partition
    that neither delivers nor reaches its end for ``stall_timeout_s`` raises
    :class:`~processor_api.errors.SourceReadError`.
    """
    if not starts:
        return
    positions = dict(starts)
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in positions.items()])
    pending = set(positions)
    last_progress = time.monotonic()
    try:
        while pending:
            grouped: dict[tuple[str, int], list[Any]] = {}
            ended: dict[tuple[str, int], int] = {}
            for message in consumer.consume(num_messages=batch_size, timeout=0.01):
                key = (message.topic(), message.partition())
                if key not in pending:
                    continue
                error = message.error()
                if error is None:
                    offset = _offset(message)
                    if offset >= positions[key]:
                        grouped.setdefault(key, []).append(message)
                        positions[key] = offset + 1
                    continue
                code = error.code()
                if code == KafkaError._PARTITION_EOF:
                    ended[key] = max(_offset(message), positions[key])
                elif error.fatal() or code in _FATAL_CODES:
                    raise SourceReadError(
                        f"reading to the end failed: {error.str()}",
                        topic=key[0],
                        partition=key[1],
                        offset=positions[key],
                    )
                else:
                    _log.debug(
                        "read_transient_error", topic=key[0], partition=key[1], error=error.str()
                    )
            for key in grouped.keys() | ended.keys():
                end = ended.get(key)
                yield PartitionBatch(key[0], key[1], grouped.get(key, []), end)
                if end is not None:
                    pending.discard(key)
                    consumer.pause([TopicPartition(key[0], key[1])])
            if grouped or ended:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                topic, partition = min(pending)
                raise StalledReadError(
                    f"neither a record nor the end of the partition arrived within "
                    f"{stall_timeout_s:g}s{' from ' + source if source else ''}",
                    topic=topic,
                    partition=partition,
                    offset=positions[(topic, partition)],
                )
    finally:
        try:
            # a paused partition stays paused when it is assigned again: resume first
            consumer.resume([TopicPartition(t, p) for t, p in positions])
            consumer.unassign()
        except KafkaException:
            pass


RESTORE_BATCH = 10_000
RESTORE_STALL_TIMEOUT_S = 60.0
PROGRESS_EVERY_S = 2.0


def read_changelog(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    apply_batch: Callable[[list[tuple]], None],
    *,
    isolation_level: str = "read_committed",
    with_timestamps: bool = False,
    kafka: KafkaClientConfig | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> int:
    """Replay offsets ``[start, end)`` of one changelog partition into ``apply_batch``.

    Records are handed over in batches (bulk store writes) of ``(key, value)``, or of
    ``(key, value, timestamp)`` with ``with_timestamps`` (versioned stores); progress is
    logged every few seconds with the record count and rate, and ``on_batch(next_offset,
    records)`` is called after each batch is applied. Returns how many were replayed.
    """
    if end <= start:
        return 0
    count = 0
    started = last_report = time.monotonic()
    with PartitionReader(
        bootstrap_servers,
        "restore",
        isolation_level=isolation_level,
        fail_on_data_loss=False,  # a compacted changelog may start past ``start``
        fetch=LARGE_FETCH,
        kafka=kafka,
        batch_size=RESTORE_BATCH,
        stall_timeout_s=RESTORE_STALL_TIMEOUT_S,
    ) as reader:
        for messages in reader.read(topic, partition, start, end):
            if with_timestamps:
                apply_batch([(m.key(), m.value(), m.timestamp()[1]) for m in messages])
            else:
                apply_batch([(m.key(), m.value()) for m in messages])
            count += len(messages)
            if on_batch is not None and messages:
                on_batch(messages[-1].offset() + 1, len(messages))
            now = time.monotonic()
            if now - last_report >= PROGRESS_EVERY_S:
                _log.info(
                    "restore_progress",
                    topic=topic,
                    partition=partition,
                    records=count,
                    offset=messages[-1].offset() + 1,
                    end_offset=end,
                    rate_per_s=round(count / (now - started)),
                )
                last_report = now
    return count
