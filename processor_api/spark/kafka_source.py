"""A PySpark streaming data source that reads Kafka topics with confluent-kafka.

Register it once per session and read with the format name ``processor_api_kafka``::

    spark.dataSource.register(KafkaDataSource)
    df = (
        spark.readStream.format("processor_api_kafka")
        .option("bootstrap.servers", "127.0.0.1:9092")
        .option("topics", "orders,payments")
        .load()
    )

Options
-------
``bootstrap.servers`` (required)
    ``host:port[,host:port...]``.
``topics`` (required)
    Comma-separated topic names. Every topic must exist when the query starts.
``starting.offsets``
    ``earliest`` (default: the log start offset), ``latest`` (the true end offset at the
    query's first planning), or JSON ``{"topic": {"0": 42}}`` (partitions not named start at
    earliest). Only used when the query has no checkpoint yet.
``end.offsets``
    JSON ``{"topic": {"0": 100, "1": 7}}``: a fixed upper bound per partition for a bounded run
    ("everything that is there now", captured by the caller with
    :func:`processor_api.kafka.offsets.end_offsets`). ``latestOffset`` never goes past it for
    the partitions it names; partitions it does not name are unbounded (the runner leaves its
    repartition topics out, as they grow while the run goes on).
``max.records.per.batch``
    Upper bound on the records of one micro-batch (summed over partitions), spread max-min
    fairly over the partitions that have data (see :func:`plan_ranges`). Default: no bound.
    Honoured with processing-time triggers and with ``Trigger.AvailableNow`` (Spark 4.3 passes
    this default limit there too, measured).
``isolation.level``
    ``read_uncommitted`` (default) or ``read_committed``. With ``read_committed`` the planned
    end of a partition is its last stable offset and aborted records are not returned -- on
    Apache Kafka. Tansu (measured, 0.6.0) sends no aborted-transaction list in Fetch responses,
    so librdkafka cannot drop aborted records there: they are read; the LSO is honoured.
``read.timeout.ms``
    How long ``read`` waits without progress for a planned offset before it fails with
    :class:`~processor_api.errors.SourceReadError` naming topic, partition and offset
    (default 60000).
``metadata.timeout.ms``
    Bound on metadata and offset look-ups made while planning (default 30000).
``fail.on.data.loss``
    ``true`` (default): a planned start offset the broker no longer has (retention) fails the
    read; ``false``: log a warning and continue from the earliest offset the broker has.
``arrow.batch.rows``
    Rows per Arrow record batch handed to Spark (default 10000).
``kafka.<name>``
    Passed to every confluent-kafka client as ``<name>`` (e.g. ``kafka.security.protocol``).

Rows
----
``topic string, partition int, offset long, timestamp long, key binary, value binary,
headers array<struct<key:string,value:binary>>``. ``timestamp`` is the record timestamp in epoch
ms (-1 if the broker has none); ``key``/``value`` are null for a null key / tombstone; headers
keep order and duplicates, a header value may be null. In pandas (``applyInPandas*``) the
``headers`` cell is a numpy object array of ``{"key": str, "value": bytes | None}`` dicts.

Offsets
-------
A source offset is ``{"topic": {"partition": next_offset}}`` with partitions as decimal strings,
sorted, so equal positions give byte-identical JSON. ``partitions(start, end)`` returns one input
partition per topic-partition with ``start < end`` and ``read`` returns exactly the records with
offsets in ``[start, end)``: replaying a planned batch returns the same rows unless compaction or
retention removed some meanwhile. Offsets the broker skips (transaction markers, aborted records
under ``read_committed``, compacted-away records) end a range early instead of being waited for.

End offsets come from :func:`processor_api.kafka.offsets.end_offsets`, which is correct on Tansu
(whose ListOffsets(latest) is too low when the last produce request held several records).

Partitions added to a topic while the query runs are discovered by ``latestOffset``: a new
partition is first recorded at its earliest offset (no rows in that micro-batch) and read from
the next micro-batch on.

Process model (measured with pyspark 4.3, local mode): ``initialOffset``, ``latestOffset``,
``partitions`` and ``commit`` run on one long-lived Python process next to the driver; ``read``
runs in the executors' Python workers on a *pickled copy* of a reader created at query start, so
the reader holds no clients and no state that ``read`` relies on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from processor_api.errors import ConfigError, StreamsError
from processor_api.logging import get_logger
from processor_api.spark.kafka_rows import (
    KAFKA_SCHEMA,
    KAFKA_SCHEMA_DDL,
    KafkaInputPartition,
    _freeze_gc_once,
    read_range,
)
from processor_api.spark.source_options import (
    SOURCE_NAME,
    KafkaSourceOptions,
    Offsets,
    TopicPartitionKey,
    _beginning,
    _end,
    _partition_counts,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
)

_log = get_logger(__name__)


# ---------------------------------------------------------------------------- stream reader
class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over Kafka offsets and reads them (see the module docstring)."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._initial: dict[str, dict[str, int]] | None = None
        self._available_now_target: Offsets | None = None
        self._last_seen_ends: Offsets = {}

    # -- planning (driver side) ------------------------------------------------------------
    def _bound(self) -> Offsets | None:
        """Upper bounds per partition: ``end.offsets`` and/or the AvailableNow target.

        A partition named by neither is unbounded (e.g. a repartition topic the caller left
        out of ``end.offsets``); one named by both gets the smaller offset.
        """
        bounds = [
            b for b in (self.options.end_offsets, self._available_now_target) if b is not None
        ]
        if not bounds:
            return None
        merged: Offsets = dict(bounds[0])
        for bound in bounds[1:]:
            for tp, offset in bound.items():
                merged[tp] = min(offset, merged.get(tp, offset))
        return merged

    def _current_partitions(self) -> list[TopicPartitionKey]:
        counts = _partition_counts(self.options)
        return [(t, p) for t in self.options.topics for p in range(counts[t])]

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's API
        """Starting positions of a query without a checkpoint (computed once per reader)."""
        if self._initial is not None:
            return self._initial
        tps = self._current_partitions()
        mode = self.options.starting_offsets
        if mode == "latest":
            start = _end(self.options, tps)
        else:
            start = _beginning(self.options, tps)
            if mode == "json":
                given = self.options.starting_offsets_json or {}
                unknown = sorted(set(given) - set(tps))
                if unknown:
                    raise ConfigError(
                        "option 'starting.offsets' names partitions that do not exist: "
                        + ", ".join(f"{t}[{p}]" for t, p in unknown)
                    )
                start.update({tp: given[tp] for tp in tps if tp in given})
        bound = self._bound()
        if bound is not None:
            start = {tp: min(offset, bound.get(tp, offset)) for tp, offset in start.items()}
        self._initial = offsets_to_json(start)
        _log.info(
            "source_initial_offsets",
            topics=list(self.options.topics),
            partitions=len(start),
            mode=mode,
            records_bound=None
            if bound is None
            else sum(max(0, bound[tp] - start[tp]) for tp in start if tp in bound),
        )
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``ReadMaxRows(max.records.per.batch)`` if that option is set, else read everything."""
        if self.options.max_records_per_batch is not None:
            return ReadMaxRows(self.options.max_records_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Fix the target of a ``Trigger.AvailableNow`` run: the true end offsets right now."""
        counts = _partition_counts(self.options)
        tps = [(t, p) for t in self.options.topics for p in range(counts[t])]
        self._available_now_target = _end(self.options, tps)
        _log.info("source_available_now_target", partitions=len(tps))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        """End of the next micro-batch: true end offsets, capped by the bound and ``limit``."""
        begin = {
            tp: offset
            for tp, offset in offsets_from_json(start).items()
            if tp[0] in self.options.topics
        }
        current = self._current_partitions()
        new = [tp for tp in current if tp not in begin]
        known = [tp for tp in current if tp in begin]
        ends = _end(self.options, known)
        self._last_seen_ends = dict(ends)
        bound = self._bound()
        available: Offsets = {}
        for tp in known:
            end = ends[tp]
            if bound is not None and tp in bound:
                end = min(end, bound[tp])
            if end < begin[tp]:
                _log.warning(
                    "source_end_before_position",
                    topic=tp[0],
                    partition=tp[1],
                    position=begin[tp],
                    end=ends[tp],
                )
                end = begin[tp]
            available[tp] = end
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if not isinstance(limit, ReadMaxRows | ReadAllAvailable):
            _log.warning("source_read_limit_ignored", limit=repr(limit))
        result = plan_ranges(begin, available, max_rows)
        if new:
            first = _beginning(self.options, new)
            if bound is not None:
                first = {tp: min(offset, bound.get(tp, offset)) for tp, offset in first.items()}
            result.update(first)
            _log.info(
                "source_new_partitions",
                partitions=[f"{t}[{p}]" for t, p in new],
                start=[first[tp] for tp in new],
            )
        return offsets_to_json(result)

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        """The end offsets seen by the last ``latestOffset`` call (no extra broker round-trip)."""
        return offsets_to_json(self._last_seen_ends) if self._last_seen_ends else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One :class:`KafkaInputPartition` per topic-partition with ``start < end``.

        A partition in ``end`` but not in ``start`` was only just discovered; its entry in
        ``end`` is where reading will begin, so it contributes no rows yet.
        """
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        out: list[InputPartition] = []
        for tp in sorted(finish):
            first = begin.get(tp)
            if first is None or first >= finish[tp]:
                continue
            out.append(KafkaInputPartition(tp[0], tp[1], first, finish[tp]))
        return out

    def commit(self, end: dict) -> None:
        """Nothing to do: the query's checkpoint, not a consumer group, holds the position."""

    # -- reading (executor side, on a pickled copy) -----------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of exactly the planned ``[start, end)`` of one partition."""
        if not isinstance(partition, KafkaInputPartition):
            raise StreamsError(f"unexpected input partition {partition!r}")
        _freeze_gc_once()
        return read_range(
            self.options, partition.topic, partition.partition, partition.start, partition.end
        )


class KafkaDataSource(DataSource):
    """PySpark data source ``processor_api_kafka`` (streaming reads only)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = KafkaSourceOptions.from_options(options)

    @classmethod
    def name(cls) -> str:
        """Format name for ``spark.readStream.format``."""
        return SOURCE_NAME

    def schema(self) -> StructType:
        """:data:`KAFKA_SCHEMA`."""
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """A :class:`KafkaStreamReader`; the schema must be :data:`KAFKA_SCHEMA`."""
        if [(f.name, f.dataType) for f in schema.fields] != [
            (f.name, f.dataType) for f in KAFKA_SCHEMA.fields
        ]:
            raise ConfigError(
                f"the {SOURCE_NAME} source has the fixed schema {KAFKA_SCHEMA_DDL}; "
                f"got {schema.simpleString()}"
            )
        return KafkaStreamReader(self.parsed)


# ------------------------------------------------------------------------- offset ranges
#: Format name of the source that plans like ``processor_api_kafka`` but emits only ranges.
RANGE_SOURCE_NAME = "processor_api_kafka_ranges"

#: Row schema of the range source: one row per topic-partition with records in the batch.
RANGE_SCHEMA_DDL = "topic string, partition int, start long, end long"


class _RangesPartition(InputPartition):
    """Every planned range of one micro-batch (one small Spark task emits them all)."""

    def __init__(self, ranges: list[tuple[str, int, int, int]]) -> None:
        super().__init__(None)
        self.ranges = ranges


class KafkaRangeStreamReader(KafkaStreamReader):
    """Plans micro-batches exactly as :class:`KafkaStreamReader`; reads no record.

    The tasks read their ranges themselves (``runtime/task_runner.py``): what Spark checkpoints,
    shuffles and groups is one small row per topic-partition, and a replayed micro-batch
    replays the same ranges.
    """

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        planned = super().partitions(start, end)
        if not planned:
            return []
        ranges = [(p.topic, p.partition, p.start, p.end) for p in planned]  # type: ignore[attr-defined]
        return [_RangesPartition(ranges)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The planned ranges as ``(topic, partition, start, end)`` rows."""
        if not isinstance(partition, _RangesPartition):
            raise StreamsError(f"unexpected input partition {partition!r}")
        yield from partition.ranges


class KafkaRangeDataSource(KafkaDataSource):
    """PySpark data source ``processor_api_kafka_ranges``: the planned offset ranges only."""

    @classmethod
    def name(cls) -> str:
        """Format name for ``spark.readStream.format``."""
        return RANGE_SOURCE_NAME

    # pyspark's DataSource.schema may return a DDL string as well as a StructType
    def schema(self) -> str:  # type: ignore[override]
        """:data:`RANGE_SCHEMA_DDL`."""
        return RANGE_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """A :class:`KafkaRangeStreamReader`."""
        return KafkaRangeStreamReader(self.parsed)
