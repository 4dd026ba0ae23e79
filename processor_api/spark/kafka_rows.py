"""Reading one planned range as Spark rows: the record source's schema and Arrow batches."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any, cast

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from processor_api.logging import get_logger
from processor_api.spark.source_options import KafkaSourceOptions

_log = get_logger("processor_api.spark.kafka_source")

#: Row schema of the source.
KAFKA_SCHEMA = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", LongType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField(
            "headers",
            ArrayType(
                StructType(
                    [
                        StructField("key", StringType(), True),
                        StructField("value", BinaryType(), True),
                    ]
                ),
                True,
            ),
            True,
        ),
    ]
)

#: The same schema as a DDL string.
KAFKA_SCHEMA_DDL = (
    "topic string, partition int, offset long, timestamp long, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)


# ---------------------------------------------------------------------------------- reading
class KafkaInputPartition(InputPartition):
    """One topic-partition's planned range ``[start, end)`` of one micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.start}..{self.end})"


def _arrow_schema() -> Any:
    """The Arrow schema Spark expects for :data:`KAFKA_SCHEMA` (same call Spark makes)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(KAFKA_SCHEMA, timezone="UTC")


_NO_HEADERS: tuple[()] = ()
_gc_frozen = False


def _freeze_gc_once() -> None:
    """Take the imported modules out of later collections (once per Python worker).

    pyspark's worker daemon runs ``gc.collect()`` after every Spark task; with pyspark,
    pandas and pyarrow loaded it takes 200-265 ms unless the long-lived objects are frozen.
    """
    global _gc_frozen
    if not _gc_frozen:
        _gc_frozen = True
        gc.freeze()


class _BatchBuilder:
    """Accumulates consumed records column-wise and emits ``pyarrow.RecordBatch``es."""

    def __init__(self, topic: str, partition: int) -> None:
        import pyarrow as pa

        self._pa = pa
        self._schema = _arrow_schema()
        self._topic = topic
        self._partition = partition
        self.clear()

    def clear(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any) -> None:
        ts_type, ts = message.timestamp()
        self.offsets.append(message.offset())
        self.timestamps.append(-1 if ts_type == TIMESTAMP_NOT_AVAILABLE else int(ts))
        self.keys.append(message.key())
        self.values.append(message.value())
        self.headers.append(cast(list[tuple[str, bytes | None]], message.headers() or _NO_HEADERS))

    def flush(self) -> Any:
        pa, schema, n = self._pa, self._schema, len(self.offsets)
        columns = [
            pa.array([self._topic] * n, type=schema.field("topic").type),
            pa.array([self._partition] * n, type=schema.field("partition").type),
            pa.array(self.offsets, type=schema.field("offset").type),
            pa.array(self.timestamps, type=schema.field("timestamp").type),
            pa.array(self.keys, type=schema.field("key").type),
            pa.array(self.values, type=schema.field("value").type),
            pa.array(self.headers, type=schema.field("headers").type),
        ]
        self.clear()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    options: KafkaSourceOptions, topic: str, partition: int, start: int, end: int
) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch``es (schema :data:`KAFKA_SCHEMA`) of ``topic[partition]``'s
    records with offsets in ``[start, end)``, in offset order.

    Reads with :class:`processor_api.kafka.reader.PartitionReader` (see there for how a range ends
    and fails). Usable without Spark.
    """
    from processor_api.kafka.reader import PartitionReader

    if end <= start:
        return
    builder = _BatchBuilder(topic, partition)
    started = time.monotonic()
    count = 0
    with PartitionReader(
        options.bootstrap_servers,
        "source-reader",
        isolation_level=options.isolation_level,
        fail_on_data_loss=options.fail_on_data_loss,
        fetch={"queued.max.messages.kbytes": 16384},
        kafka=options.kafka,
        batch_size=options.arrow_batch_rows,
        stall_timeout_s=options.read_timeout_s,
    ) as reader:
        for messages in reader.read(topic, partition, start, end):
            for message in messages:
                builder.add(message)
            count += len(messages)
            if len(builder) >= options.arrow_batch_rows:
                yield builder.flush()
        if len(builder):
            yield builder.flush()
    _log.debug(
        "source_range_read",
        topic=topic,
        partition=partition,
        start=start,
        end=end,
        records=count,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
