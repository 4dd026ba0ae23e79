"""The ``processor_api_kafka`` PySpark streaming source against a real broker and local Spark.

Tests that drive the reader directly (planning, replay, transactions, timeouts) need only the
broker; the streaming-query tests share the session's SparkSession.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

# Spark's Python workers must run this interpreter (the one with pandas/pyarrow), not whatever
# ``python3`` is on PATH; read when the session fixture creates the SparkContext.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.errors.exceptions.captured import StreamingQueryException  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from processor_api.errors import ConfigError, SourceReadError  # noqa: E402
from processor_api.spark.kafka_source import (  # noqa: E402
    SOURCE_NAME,
    KafkaDataSource,
    KafkaSourceOptions,
    KafkaStreamReader,
    offsets_from_json,
    plan_ranges,
    read_range,
)
from tests.harness.topics import uid  # noqa: E402

pytestmark = pytest.mark.integration


def _reader(kafka, topic: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(
        KafkaSourceOptions.from_options(
            {"bootstrap.servers": kafka.bootstrap_servers, "topics": topic, **options}
        )
    )


def _rows(reader: KafkaStreamReader, start: dict, end: dict) -> list[dict]:
    return [
        row
        for part in reader.partitions(start, end)
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]


class _Recorder:
    """Produces records and remembers where each one landed."""

    def __init__(self, bootstrap: str, **config: object) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
        self.sent: list[tuple] = []

    def produce(self, topic, partition, key, value, timestamp, headers=None) -> None:
        def delivered(err, msg):
            assert err is None, err
            self.sent.append(
                (topic, partition, msg.offset(), timestamp, key, value, list(headers or []))
            )

        self.producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            timestamp=timestamp,
            headers=headers,
            on_delivery=delivered,
        )

    def flush(self) -> None:
        assert self.producer.flush(10) == 0


def _as_tuple(row) -> tuple:
    headers = [(h["key"], h["value"]) for h in row["headers"]]
    return (
        row["topic"],
        row["partition"],
        row["offset"],
        row["timestamp"],
        row["key"],
        row["value"],
        headers,
    )


# ------------------------------------------------------------------------------- pure planning
def test_plan_ranges_without_limit_takes_everything():
    start = {("a", 0): 5, ("a", 1): 0, ("b", 0): 3}
    available = {("a", 0): 9, ("a", 1): 0, ("b", 0): 1}  # b[0]: end before position stays put
    assert plan_ranges(start, available) == {("a", 0): 9, ("a", 1): 0, ("b", 0): 3}


def test_plan_ranges_is_max_min_fair_and_exact():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    available = {("t", 0): 2, ("t", 1): 200, ("t", 2): 1007}
    ends = plan_ranges(start, available, 50)
    taken = {tp: ends[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 50
    assert taken[("t", 0)] == 2  # small partition drains completely
    assert abs(taken[("t", 1)] - taken[("t", 2)]) <= 1  # the rest is shared equally


def test_plan_ranges_rotates_when_budget_is_smaller_than_busy_partitions():
    start = {("t", p): 0 for p in range(3)}
    available = {("t", p): 100 for p in range(3)}
    served: set[tuple[str, int]] = set()
    for _ in range(3):
        ends = plan_ranges(start, available, 1)
        assert sum(ends[tp] - start[tp] for tp in start) == 1
        served |= {tp for tp in start if ends[tp] > start[tp]}
        start = ends
    assert served == set(start)  # nobody starves


def test_options_are_validated():
    base = {"bootstrap.servers": "127.0.0.1:1", "topics": "a,b"}
    assert KafkaSourceOptions.from_options(base).topics == ("a", "b")
    for bad in (
        {"topics": "a"},
        {"bootstrap.servers": "x:1"},
        {**base, "isolation.level": "read_dirty"},
        {**base, "max.records.per.batch": "0"},
        {**base, "starting.offsets": "middle"},
        {**base, "end.offsets": '{"c": {"0": 1}}'},
        {**base, "end.offsets": "[1]"},
        {**base, "no.such.option": "1"},
    ):
        with pytest.raises(ConfigError):
            KafkaSourceOptions.from_options(bad)
    parsed = KafkaSourceOptions.from_options({**base, "end.offsets": '{"a": {"0": 4, "2": 1}}'})
    assert parsed.end_offsets == {("a", 0): 4, ("a", 2): 1}


# --------------------------------------------------------------------- reader + real broker only
def test_planned_range_replays_identically_and_honours_the_limit(kafka):
    topic = uid("src-replay")
    kafka.create_topic(topic, 2)
    rec = _Recorder(kafka.bootstrap_servers)
    for i in range(12):
        rec.produce(topic, i % 2, b"k%d" % i, b"v%d" % i, 1_000 + i)
    rec.flush()
    reader = _reader(kafka, topic, **{"max.records.per.batch": "5"})
    start = reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadMaxRows(5)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert sum(offsets_from_json(end).values()) == 5
    first, again = _rows(reader, start, end), _rows(reader, start, end)
    assert len(first) == 5 and first == again
    rest = reader.latestOffset(end, ReadAllAvailable())
    assert offsets_from_json(rest) == {(topic, 0): 6, (topic, 1): 6}
    everything = first + _rows(reader, end, rest)
    assert sorted(map(_as_tuple, everything)) == sorted(rec.sent)
    assert reader.latestOffset(rest, ReadAllAvailable()) == rest  # nothing new: same offset


def test_read_committed_stops_at_control_records_and_the_last_stable_offset(kafka):
    topic = uid("src-txn")
    kafka.create_topic(topic, 1)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"tx-{topic}"}
    )
    producer.init_transactions()
    for batch in (b"a", b"b"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, key=batch, value=b"%d" % i, partition=0)
        producer.commit_transaction()
    producer.begin_transaction()  # left open: beyond the last stable offset
    producer.produce(topic, key=b"open", value=b"x", partition=0)
    producer.flush(10)
    try:
        reader = _reader(kafka, topic, **{"isolation.level": "read_committed"})
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        # 2 x (3 records + commit marker): the planned range ends on a control record
        assert offsets_from_json(end) == {(topic, 0): 8}
        began = time.monotonic()
        rows = _rows(reader, start, end)
        assert time.monotonic() - began < 5
        assert [(r["key"], r["offset"]) for r in rows] == [
            (b"a", 0),
            (b"a", 1),
            (b"a", 2),
            (b"b", 4),
            (b"b", 5),
            (b"b", 6),
        ]
    finally:
        producer.abort_transaction()


def test_unreachable_offsets_fail_with_coordinates(kafka):
    topic = uid("src-timeout")
    kafka.create_topic(topic, 1)
    rec = _Recorder(kafka.bootstrap_servers)
    rec.produce(topic, 0, b"k", b"v", 1)
    rec.flush()
    options = KafkaSourceOptions.from_options(
        {"bootstrap.servers": kafka.bootstrap_servers, "topics": topic, "read.timeout.ms": "1500"}
    )
    with pytest.raises(SourceReadError) as info:
        list(read_range(options, topic, 0, 0, 5))  # only offset 0 exists
    error = info.value
    assert (error.topic, error.partition, error.offset) == (topic, 0, 1)
    assert "broker reports its end at 1" in str(error)


def test_partitions_missing_from_the_start_offset_are_registered_then_read(kafka):
    """A partition unknown to the checkpointed offset (e.g. added to the topic later) is first
    recorded at its earliest offset, then read from there in the next micro-batch."""
    topic = uid("src-newpart")
    kafka.create_topic(topic, 2)
    rec = _Recorder(kafka.bootstrap_servers)
    for p in (0, 1):
        for i in range(3):
            rec.produce(topic, p, b"k", b"%d" % i, 10 + i)
    rec.flush()
    reader = _reader(kafka, topic)
    old = {topic: {"0": 0}}  # as if checkpointed when the topic had one partition
    registered = reader.latestOffset(old, ReadAllAvailable())
    assert offsets_from_json(registered) == {(topic, 0): 3, (topic, 1): 0}
    assert {(r["partition"], r["offset"]) for r in _rows(reader, old, registered)} == {
        (0, 0),
        (0, 1),
        (0, 2),
    }
    nxt = reader.latestOffset(registered, ReadAllAvailable())
    assert offsets_from_json(nxt) == {(topic, 0): 3, (topic, 1): 3}
    assert {(r["partition"], r["offset"]) for r in _rows(reader, registered, nxt)} == {
        (1, 0),
        (1, 1),
        (1, 2),
    }


# ------------------------------------------------------------------------------ Spark queries
@pytest.fixture(scope="module")
def source_spark(spark):
    spark.dataSource.register(KafkaDataSource)
    return spark


def _run_available_now(spark, checkpoint, options: dict[str, str]) -> list[list[tuple]]:
    """Run a ``Trigger.AvailableNow`` query; the rows of each non-empty micro-batch, in order."""
    batches: dict[int, list[tuple]] = {}

    def collect(frame, batch_id):
        batches[batch_id] = [_as_tuple(row.asDict(recursive=True)) for row in frame.collect()]

    query = (
        spark.readStream.format(SOURCE_NAME)
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(60), "AvailableNow query did not finish within 60 s"
    finally:
        query.stop()
    assert query.exception() is None
    return [rows for _, rows in sorted(batches.items()) if rows]


def test_stream_reads_every_field(kafka, source_spark, tmp_path):
    topic = uid("src-fields")
    kafka.create_topic(topic, 3)
    rec = _Recorder(kafka.bootstrap_servers)
    for i in range(30):
        headers = [("trace", b"t%d" % i), ("dup", b"1"), ("dup", None)] if i % 3 else None
        key = None if i == 4 else b"key-%d" % i
        value = None if i == 7 else bytes([i, 0, 255])  # a tombstone, and non-UTF-8 bytes
        rec.produce(topic, i % 3, key, value, 1_700_000_000_000 + i * 1_000, headers)
    rec.flush()

    batches = _run_available_now(
        source_spark,
        tmp_path / "ckpt",
        {"bootstrap.servers": kafka.bootstrap_servers, "topics": topic},
    )
    rows = [row for batch in batches for row in batch]
    assert len(rows) == 30
    assert sorted(rows) == sorted(rec.sent)


def test_stream_max_records_per_batch_covers_everything_once(kafka, source_spark, tmp_path):
    topic = uid("src-limit")
    kafka.create_topic(topic, 3)
    rec = _Recorder(kafka.bootstrap_servers)
    for p, count in ((0, 15), (1, 7), (2, 3)):
        for i in range(count):
            rec.produce(topic, p, b"k%d" % i, b"v", 100 + i)
    rec.flush()

    batches = _run_available_now(
        source_spark,
        tmp_path / "ckpt",
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "topics": topic,
            "max.records.per.batch": "4",
        },
    )
    assert [len(b) for b in batches] == [4, 4, 4, 4, 4, 4, 1]
    rows = [row for batch in batches for row in batch]
    assert sorted(rows) == sorted(rec.sent)  # no duplicate, no gap
    for p in range(3):  # each partition is read in offset order across batches
        offsets = [row[2] for row in rows if row[1] == p]
        assert offsets == list(range(len(offsets)))


def test_stream_reads_past_tansu_list_offsets_in_one_batch(kafka, source_spark, tmp_path):
    """15 records in two produce batches: Tansu's ListOffsets says 11, the source must plan 15."""
    topic = uid("src-tansu")
    kafka.create_topic(topic, 1)
    rec = _Recorder(kafka.bootstrap_servers, **{"linger.ms": 100})
    for size in (10, 5):
        for i in range(size):
            rec.produce(topic, 0, b"k%d" % i, b"v", 1_000 + i)
        rec.flush()

    batches = _run_available_now(
        source_spark,
        tmp_path / "ckpt",
        {"bootstrap.servers": kafka.bootstrap_servers, "topics": topic},
    )
    assert len(batches) == 1
    assert [row[2] for row in batches[0]] == list(range(15))


def test_stream_end_offsets_bound_a_processing_time_query(kafka, source_spark, tmp_path):
    """``end.offsets`` captured at start: records produced later are never read."""
    topic = uid("src-bound")
    kafka.create_topic(topic, 2)
    rec = _Recorder(kafka.bootstrap_servers)
    for i in range(8):
        rec.produce(topic, i % 2, b"early", b"%d" % i, 1 + i)
    rec.flush()
    bound = {topic: {"0": 4, "1": 4}}
    for i in range(6):
        rec.produce(topic, i % 2, b"late", b"%d" % i, 100 + i)
    rec.flush()

    ends = {topic: {str(p): 1 + max(r[2] for r in rec.sent if r[1] == p) for p in (0, 1)}}
    seen: list[tuple] = []
    batch_ids: list[int] = []

    def collect(frame, batch_id):
        batch_ids.append(batch_id)
        seen.extend(_as_tuple(row.asDict(recursive=True)) for row in frame.collect())

    def bounded_idle_triggers() -> list[dict]:
        """Triggers that saw the late records (the source's latest offsets are past the
        bound) and planned nothing: the bound held while there was more to read."""
        return [
            progress
            for progress in query.recentProgress
            for source in progress["sources"]
            if progress["numInputRows"] == 0
            and json.loads(source["endOffset"]) == bound
            and json.loads(source.get("latestOffset") or "null") == ends
        ]

    # a progress report for every trigger, also those without data (Spark's default: at most
    # one every 10 s); read when the query starts
    interval = "spark.sql.streaming.noDataProgressEventInterval"
    source_spark.conf.set(interval, "0")
    try:
        query = (
            source_spark.readStream.format(SOURCE_NAME)
            .option("bootstrap.servers", kafka.bootstrap_servers)
            .option("topics", topic)
            .option("end.offsets", json.dumps(bound))
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
    finally:
        source_spark.conf.unset(interval)
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 8 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.1)
        # several more triggers, each offered records past the bound, read none of them
        while len(bounded_idle_triggers()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert query.exception() is None
        assert len(bounded_idle_triggers()) >= 3, query.recentProgress
    finally:
        query.stop()
    assert sorted(row[4] for row in seen) == [b"early"] * 8
    assert sorted(seen) == sorted(r for r in rec.sent if r[4] == b"early")


def test_unknown_topic_fails_the_query_with_its_name(kafka, source_spark, tmp_path):
    missing = uid("src-missing")
    query = (
        source_spark.readStream.format(SOURCE_NAME)
        .option("bootstrap.servers", kafka.bootstrap_servers)
        .option("topics", missing)
        .load()
        .writeStream.foreachBatch(lambda frame, batch_id: None)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    # the source's error, raised in prepareForTriggerAvailableNow, fails the query
    error = (
        f"MissingTopicError: source topic(s) '{missing}' do not exist on {kafka.bootstrap_servers}"
    )
    with pytest.raises(StreamingQueryException, match=re.escape(error)):
        query.awaitTermination(60)
    query.stop()
    topics = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(timeout=5)
    assert missing not in topics.topics  # looking for it did not auto-create it
