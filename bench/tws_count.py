"""Spark's own ``transformWithStateInPandas`` counting records per key (throughput contender).

``python -m bench.tws_count --bootstrap HOST:PORT --topic T --end-offsets JSON --records N
--checkpoint DIR [--master local[2]] [--records-per-batch 200000]``

Input comes from the benchmark's Python data source (``bench/tws_source.py``, format
``bench_kafka``; until the micro-batch runtime was removed, the library's
``processor_api_kafka``, whose rows also carried topic, partition, offset, timestamp and
headers) bounded by ``end.offsets``, at most ``--records-per-batch`` records per micro-batch;
``groupBy(key).transformWithStateInPandas`` keeps one ``ValueState`` count per
key in the RocksDB state store provider (what transformWithState requires), emits one row per
key and micro-batch (``key, added, total``), and a ``foreachBatch`` sink sums ``added`` so the
run can check that every record was counted. ``Trigger.AvailableNow``: it stops by itself.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle


class CountProcessor(StatefulProcessor):
    """One ValueState ``count`` per key: ``count += len(rows)``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "value long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802, ANN001
        added = 0
        for frame in rows:
            added += len(frame)
        total = (self.count.get()[0] if self.count.exists() else 0) + added
        self.count.update((total,))
        yield pd.DataFrame({"key": [key[0]], "added": [added], "total": [total]})

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--end-offsets", required=True, help='JSON {"topic": {"0": n}}')
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=3, help="spark.sql.shuffle.partitions")
    parser.add_argument(
        "--records-per-batch",
        type=int,
        default=200_000,
        help="records of one micro-batch of this query at most",
    )
    args = parser.parse_args()

    started = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from bench.tws_source import BenchKafkaSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    python_path = os.pathsep.join(dict.fromkeys([os.getcwd(), *(p for p in sys.path if p)]))
    os.environ["PYTHONPATH"] = python_path  # the JVM and its Python workers inherit it
    spark = (
        SparkSession.builder.master(args.master)
        .appName("bench-transformWithStateInPandas")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.executorEnv.PYTHONPATH", python_path)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    session_ready = time.monotonic()
    spark.dataSource.register(BenchKafkaSource)
    source = (
        spark.readStream.format(BenchKafkaSource.name())
        .option("bootstrap.servers", args.bootstrap)
        .option("topic", args.topic)
        .option("end.offsets", json.dumps(json.loads(args.end_offsets)[args.topic]))
        .option("max.records.per.batch", str(args.records_per_batch))
        .load()
    )
    counted = {"added": 0, "rows": 0, "batches": 0}

    def on_batch(frame, batch_id: int) -> None:  # noqa: ANN001
        row = frame.agg(F.sum("added").alias("added"), F.count("*").alias("rows")).collect()[0]
        counted["added"] += int(row["added"] or 0)
        counted["rows"] += int(row["rows"] or 0)
        counted["batches"] += 1

    query = (
        source.select(F.col("key").cast("string").alias("key"), "value")
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=CountProcessor(),
            outputStructType="key string, added long, total long",
            outputMode="Update",
            timeMode="None",
        )
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    done = time.monotonic()
    error = query.exception()
    spark.stop()
    print(
        json.dumps(
            {
                "records": counted["added"],
                "key_rows": counted["rows"],
                "batches": counted["batches"],
                "session_s": round(session_ready - started, 3),
                "query_s": round(done - session_ready, 3),
                "error": None if error is None else str(error)[:500],
            }
        )
    )
    if error is not None or counted["added"] != args.records:
        sys.exit(1)


if __name__ == "__main__":
    main()
