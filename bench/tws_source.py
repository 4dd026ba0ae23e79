"""The Kafka input of the transformWithStateInPandas contenders: a small PySpark data source.

``bench/tws_count.py`` (throughput) and ``bench/timers.py`` (timers) feed Spark's own
``transformWithStateInPandas`` from a Kafka topic. They used the library's streaming source
(``processor_api_kafka``, ``processor_api/spark/kafka_source.py``) until it went with the
micro-batch runtime; this is the part of it they need, kept with them. (Spark's own Kafka source
would need the ``spark-sql-kafka`` package, which the project does not install.)

``spark.dataSource.register(BenchKafkaSource)``, then ``spark.readStream.format("bench_kafka")``
with the options

* ``bootstrap.servers`` and ``topic`` (one topic, every partition read from offset 0);
* ``end.offsets``: JSON ``{"0": n, "1": m, ...}``, never read past these (absent: unbounded);
* ``max.records.per.batch``: the default read limit of a micro-batch, shared equally by the
  partitions that have records (absent: everything available).

Rows ``key binary, value binary``, as Arrow batches of up to 10,000 records read with the
library's :class:`~processor_api.kafka.reader.PartitionReader`. Offsets are
``{"<partition>": next offset}``. ``Trigger.AvailableNow`` reads up to the end offsets at the
query's start. As with the library's source, ``read`` runs on a pickled copy of the reader in
the executors' Python workers, so the reader keeps no clients.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

NAME = "bench_kafka"
SCHEMA = "key binary, value binary"
ARROW_BATCH_ROWS = 10_000

Offsets = dict[int, int]


def _to_json(offsets: Offsets) -> dict[str, int]:
    return {str(p): offsets[p] for p in sorted(offsets)}


def _from_json(offsets: dict[str, int]) -> Offsets:
    return {int(p): int(n) for p, n in offsets.items()}


def split_limit(begin: Offsets, available: Offsets, max_rows: int | None) -> Offsets:
    """End offsets of one micro-batch: at most ``max_rows`` records, shared equally by the
    partitions with records (a partition with fewer takes all of them, the rest share the
    remainder); without ``max_rows`` every partition goes to ``available``."""
    ends = dict(begin)
    lag = {p: available[p] - begin[p] for p in begin if available.get(p, 0) > begin[p]}
    if max_rows is None:
        return {p: ends[p] + lag.get(p, 0) for p in ends}
    budget = max_rows
    while budget > 0 and lag:
        share = max(1, budget // len(lag))
        for p in sorted(lag):
            take = min(share, lag[p], budget)
            ends[p] += take
            lag[p] -= take
            budget -= take
            if budget == 0:
                break
        lag = {p: n for p, n in lag.items() if n > 0}
    return ends


class _Range(InputPartition):
    """``[start, end)`` of one partition."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["bootstrap.servers"]
        self.topic = options["topic"]
        bound = options.get("end.offsets")
        self.bound: Offsets | None = _from_json(json.loads(bound)) if bound else None
        max_rows = options.get("max.records.per.batch")
        self.max_rows = int(max_rows) if max_rows else None
        self.target: Offsets | None = None  # Trigger.AvailableNow's

    def _ends(self) -> Offsets:
        """The partitions' true end offsets now, capped by ``end.offsets`` and the target."""
        from processor_api.kafka.admin import topic_partitions
        from processor_api.kafka.offsets import end_offsets

        count = topic_partitions(self.bootstrap, [self.topic])[self.topic]
        ends = end_offsets(self.bootstrap, [(self.topic, p) for p in range(count)])
        out = {p: ends[(self.topic, p)] for p in range(count)}
        for cap in (self.bound, self.target):
            if cap is not None:
                out = {p: min(n, cap.get(p, n)) for p, n in out.items()}
        return out

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's API
        return _to_json(dict.fromkeys(self._ends(), 0))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = self._ends()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        begin = _from_json(start)
        ends = self._ends()
        begin.update({p: 0 for p in ends if p not in begin})  # a partition added meanwhile
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return _to_json(split_limit(begin, ends, max_rows))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, finish = _from_json(start), _from_json(end)
        return [
            _Range(p, begin.get(p, 0), finish[p])
            for p in sorted(finish)
            if begin.get(p, 0) < finish[p]
        ]

    def commit(self, end: dict) -> None:
        """Nothing to do: the query's checkpoint holds the position."""

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from processor_api.kafka.reader import PartitionReader

        assert isinstance(partition, _Range), partition
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        with PartitionReader(
            self.bootstrap,
            "bench-tws-source",
            isolation_level="read_uncommitted",
            fetch={"queued.max.messages.kbytes": 16384},
            batch_size=ARROW_BATCH_ROWS,
        ) as reader:
            for messages in reader.read(
                self.topic, partition.partition, partition.start, partition.end
            ):
                keys.extend(m.key() for m in messages)
                values.extend(m.value() for m in messages)
                if len(keys) >= ARROW_BATCH_ROWS:
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                        names=["key", "value"],
                    )
                    keys, values = [], []
        if keys:
            yield pa.RecordBatch.from_arrays(
                [pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
                names=["key", "value"],
            )


class BenchKafkaSource(DataSource):
    """PySpark data source ``bench_kafka`` (streaming reads of one topic; see the module)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:  # type: ignore[override]
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        return _Reader(dict(self.options))
