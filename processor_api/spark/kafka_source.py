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

import gc
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from processor_api.errors import ConfigError, MissingTopicError, StreamsError
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: Format name for ``spark.readStream.format(...)``.
SOURCE_NAME = "processor_api_kafka"

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

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


# --------------------------------------------------------------------------- offset helpers
def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Canonical JSON-able form ``{"topic": {"partition": offset}}``, topics and partitions sorted."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, Any]] | None) -> Offsets:
    """Inverse of :func:`offsets_to_json` (partition keys may be ints or decimal strings)."""
    out: Offsets = {}
    for topic, partitions in (data or {}).items():
        if not isinstance(partitions, Mapping):
            raise ConfigError(
                f"offsets for topic {topic!r} must be an object of partition -> offset, "
                f"got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                out[(str(topic), int(partition))] = int(offset)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"bad offset {offset!r} for {topic}[{partition}]: expected integers"
                ) from exc
    return out


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    available: Mapping[TopicPartitionKey, int],
    max_records: int | None = None,
) -> Offsets:
    """End offsets of one micro-batch: at most ``max_records`` in total, spread max-min fairly.

    ``start`` is where each partition stands, ``available`` how far it could go (a partition
    missing from ``available``, or with ``available <= start``, stays at ``start``). Without
    ``max_records`` every partition goes to ``available``. With it, partitions with little data
    take all of it and the rest share the remainder equally; the records left over by integer
    division go one each to partitions picked in a rotation that depends on ``start``, so no
    partition starves when ``max_records`` is smaller than the number of busy partitions. The
    result always covers every key of ``start`` and is deterministic.
    """
    ends: Offsets = {tp: int(offset) for tp, offset in start.items()}
    lag = {tp: max(0, int(available.get(tp, s)) - s) for tp, s in ends.items()}
    busy = sorted(tp for tp, n in lag.items() if n > 0)
    if max_records is None or sum(lag.values()) <= max_records:
        for tp in busy:
            ends[tp] += lag[tp]
        return ends
    if max_records < 1:
        raise ConfigError(f"max_records must be >= 1, got {max_records}")
    grant = dict.fromkeys(busy, 0)
    budget = max_records
    open_ = list(busy)
    while budget > 0 and open_:
        share = budget // len(open_)
        if share == 0:
            # fewer records left than open partitions: one each, rotating with the position
            rotation = sum(start[tp] for tp in busy) % len(open_)
            for tp in (open_[rotation:] + open_[:rotation])[:budget]:
                grant[tp] += 1
            budget = 0
            break
        still_open = []
        for tp in open_:
            take = min(share, lag[tp] - grant[tp])
            grant[tp] += take
            budget -= take
            if grant[tp] < lag[tp]:
                still_open.append(tp)
        open_ = still_open
    for tp, n in grant.items():
        ends[tp] += n
    return ends


# --------------------------------------------------------------------------------- options
def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name!r} must be true or false, got {raw!r}")


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"option {name!r} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise ConfigError(f"option {name!r} must be >= 1, got {value}")
    return value


def _json_offsets(name: str, raw: str) -> Offsets:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"option {name!r} must be a JSON object {{topic: {{partition: offset}}}}")
    return offsets_from_json(data)


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Parsed, validated source options (picklable; see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "earliest"
    starting_offsets_json: Offsets | None = None
    end_offsets: Offsets | None = None
    max_records_per_batch: int | None = None
    isolation_level: str = "read_uncommitted"
    read_timeout_s: float = 60.0
    metadata_timeout_s: float = 30.0
    fail_on_data_loss: bool = True
    arrow_batch_rows: int = 10_000
    client_config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Parse Spark's (case-insensitive) option map; raises ``ConfigError`` naming the option."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        known = {
            "bootstrap.servers",
            "topics",
            "starting.offsets",
            "end.offsets",
            "max.records.per.batch",
            "isolation.level",
            "read.timeout.ms",
            "metadata.timeout.ms",
            "fail.on.data.loss",
            "arrow.batch.rows",
            "path",
        }
        unknown = sorted(k for k in opts if k not in known and not k.startswith("kafka."))
        if unknown:
            raise ConfigError(
                f"unknown option(s) for the {SOURCE_NAME} source: {', '.join(unknown)}"
                f" (known: {', '.join(sorted(known - {'path'}))}, kafka.<client config>)"
            )
        bootstrap = opts.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigError(f"the {SOURCE_NAME} source needs option 'bootstrap.servers'")
        topics = tuple(dict.fromkeys(t.strip() for t in opts.get("topics", "").split(",")))
        topics = tuple(t for t in topics if t)
        if not topics:
            raise ConfigError(f"the {SOURCE_NAME} source needs option 'topics' (comma-separated)")

        starting = opts.get("starting.offsets", "earliest").strip()
        starting_json = None
        if starting.startswith("{"):
            starting_json = _json_offsets("starting.offsets", starting)
            starting = "json"
        elif starting not in ("earliest", "latest"):
            raise ConfigError(
                f"option 'starting.offsets' must be earliest, latest or JSON, got {starting!r}"
            )
        end = _json_offsets("end.offsets", opts["end.offsets"]) if "end.offsets" in opts else None
        for bound_name, bound in (("starting.offsets", starting_json), ("end.offsets", end)):
            stray = sorted({t for t, _ in bound or {}} - set(topics))
            if stray:
                raise ConfigError(
                    f"option {bound_name!r} names topic(s) not in 'topics': {', '.join(stray)}"
                )
        isolation = opts.get("isolation.level", "read_uncommitted").strip()
        if isolation not in _ISOLATION_LEVELS:
            raise ConfigError(
                f"option 'isolation.level' must be one of {', '.join(_ISOLATION_LEVELS)}, "
                f"got {isolation!r}"
            )
        max_records = (
            _positive_int("max.records.per.batch", opts["max.records.per.batch"])
            if opts.get("max.records.per.batch", "").strip()
            else None
        )
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            starting_offsets=starting,
            starting_offsets_json=starting_json,
            end_offsets=end,
            max_records_per_batch=max_records,
            isolation_level=isolation,
            read_timeout_s=_positive_int("read.timeout.ms", opts.get("read.timeout.ms", "60000"))
            / 1000,
            metadata_timeout_s=_positive_int(
                "metadata.timeout.ms", opts.get("metadata.timeout.ms", "30000")
            )
            / 1000,
            fail_on_data_loss=_bool("fail.on.data.loss", opts.get("fail.on.data.loss", "true")),
            arrow_batch_rows=_positive_int(
                "arrow.batch.rows", opts.get("arrow.batch.rows", "10000")
            ),
            client_config={
                k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")
            },
        )

    def kafka_config(self) -> dict[str, Any]:
        """librdkafka config with ``bootstrap.servers`` and the ``kafka.*`` pass-through."""
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers}


# ------------------------------------------------------------------------- broker look-ups
def _partition_counts(options: KafkaSourceOptions) -> dict[str, int]:
    """Partition count of every configured topic, from all-topic metadata.

    All-topic metadata never names a topic, so it cannot make Tansu auto-create one.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from processor_api.kafka.admin import client_config

    admin = AdminClient(
        client_config(options.bootstrap_servers, "source-admin", **options.client_config)
    )
    try:
        metadata = admin.list_topics(timeout=options.metadata_timeout_s)
    except KafkaException as exc:
        raise StreamsError(
            f"no metadata from {options.bootstrap_servers} within "
            f"{options.metadata_timeout_s:g}s: {exc}"
        ) from exc
    counts = {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None or topic.error.code() == KafkaError.NO_ERROR
    }
    missing = tuple(t for t in options.topics if t not in counts)
    if missing:
        raise MissingTopicError(
            f"source topic(s) {', '.join(repr(t) for t in missing)} do not exist on "
            f"{options.bootstrap_servers}",
            topics=missing,
        )
    return {t: counts[t] for t in options.topics}


def _beginning(options: KafkaSourceOptions, tps: list[TopicPartitionKey]) -> Offsets:
    from processor_api.kafka.offsets import beginning_offsets

    if not tps:
        return {}
    return beginning_offsets(options.kafka_config(), tps, timeout_s=options.metadata_timeout_s)


def _end(options: KafkaSourceOptions, tps: list[TopicPartitionKey]) -> Offsets:
    from processor_api.kafka.offsets import end_offsets

    if not tps:
        return {}
    return end_offsets(
        options.kafka_config(),
        tps,
        isolation_level=options.isolation_level,
        timeout_s=options.metadata_timeout_s,
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
        self.headers.append(message.headers() or _NO_HEADERS)

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

    Reads with :func:`processor_api.kafka.reader.read_bounded` (see there for how a range ends
    and fails). Usable without Spark.
    """
    from processor_api.kafka.reader import bounded_consumer, read_bounded

    if end <= start:
        return
    consumer = bounded_consumer(
        options.bootstrap_servers,
        "source-reader",
        isolation_level=options.isolation_level,
        fail_on_data_loss=options.fail_on_data_loss,
        extra={"queued.max.messages.kbytes": 16384, **options.client_config},
    )
    builder = _BatchBuilder(topic, partition)
    started = time.monotonic()
    count = 0
    try:
        for messages in read_bounded(
            consumer,
            topic,
            partition,
            start,
            end,
            batch_size=options.arrow_batch_rows,
            stall_timeout_s=options.read_timeout_s,
            source=options.bootstrap_servers,
        ):
            for message in messages:
                builder.add(message)
            count += len(messages)
            if len(builder) >= options.arrow_batch_rows:
                yield builder.flush()
        if len(builder):
            yield builder.flush()
    finally:
        consumer.close()
    _log.debug(
        "source_range_read",
        topic=topic,
        partition=partition,
        start=start,
        end=end,
        records=count,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )


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

    The tasks read their ranges themselves (``spark/task_runner.py``): what Spark checkpoints,
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

    def schema(self) -> str:
        """:data:`RANGE_SCHEMA_DDL`."""
        return RANGE_SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """A :class:`KafkaRangeStreamReader`."""
        return KafkaRangeStreamReader(self.parsed)
