"""Word count on local Spark, run once per session (fixture ``word_count_local``): checked by
``test_word_count_spark`` and the reference of ``test_local_cluster`` (same input topic)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor_api.serdes import Serdes
from processor_api.spark.runner import RunResult
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, TopicRecord, produce, uid
from topologies.word_count import split_words

WORD_COUNT = "topologies.word_count:build_topology"
WORD_COUNT_LINES = [
    "all streams lead to kafka",
    "hello kafka streams",
    "join kafka summit",
    "Kafka, Streams; and Spark!",
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be",
    "",
    "streams streams streams",
    "whether tis nobler in the mind to suffer",
]


@dataclass
class WordCountRun:
    """What the local word count run saw: topics, output records, repartition records..."""

    input_topic: str
    topics: dict[str, str]
    app_id: str
    state_dir: Path
    records: list[TopicRecord]
    repartitioned: list[TopicRecord]
    result: RunResult


def run_word_count(kafka: Any, spark: Any, state_dir: Path) -> WordCountRun:
    """:data:`WORD_COUNT_LINES` on a new 3-partition topic (one line per partition in turn),
    a continuous run until every count arrived, then ``request_stop()``."""
    run_id = uid()
    topics = {
        "input_topic": f"wc-input-{run_id}",
        "repartition_topic": f"wc-repartition-{run_id}",
        "output_topic": f"wc-output-{run_id}",
    }
    app_id = f"wc-{run_id}"
    kafka.create_topic(topics["input_topic"], 3)
    # every line on an explicit partition, so all three tasks of sub-topology 0 get input
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"line-{i}".encode(), line.encode(), i % 3) for i, line in enumerate(WORD_COUNT_LINES)],
    )
    total_words = sum(len(split_words(line)) for line in WORD_COUNT_LINES)
    settings = settings_for(kafka.bootstrap_servers, app_id, state_dir)
    with (
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
        ) as out,
        TopicReader(
            kafka.bootstrap_servers, topics["repartition_topic"], bytes.decode, bytes.decode
        ) as repartition,
    ):
        with BackgroundRun(WORD_COUNT, settings, spark=spark, topology_kwargs=topics) as run:
            out.wait_for(lambda r: len(r) >= total_words, timeout_s=120, while_alive=run)
            result = run.stop()
        records = out.records
        repartitioned = repartition.wait_for(lambda r: len(r) >= total_words, timeout_s=10)
    return WordCountRun(
        topics["input_topic"], topics, app_id, state_dir, records, repartitioned, result
    )
