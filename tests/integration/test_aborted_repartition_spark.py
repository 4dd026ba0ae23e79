"""Exactly-once through a repartition topic holds by design, not by the broker.

Tansu shows records of aborted transactions to ``read_committed`` readers. Here the upstream
task of a word count fails once after its words went out, so its transaction aborts with
records on the repartition topic; the run is started again and the upstream task writes the
same words once more. The downstream count must not count the aborted ones: it keeps a
repartition record only if the upstream's commit marker says that writer committed that batch
(``processor_api/kafka/batch_stamps.py``). ``tests/reliability/test_crash.py`` does the same
with kill -9.
"""

from __future__ import annotations

from collections import Counter

import pytest

from processor_api.errors import StreamsError
from processor_api.serdes import Serdes
from processor_api.spark.runner import TopologyRunner
from tests.harness.runs import settings_for
from tests.harness.topics import TopicReader, produce, read_topic, uid
from topologies.word_count import split_words

pytestmark = pytest.mark.integration

LINES = [
    "all streams lead to kafka",
    "hello kafka streams",
    "join kafka summit",
    "kafka streams again",
    "hello again boom",  # partition 0's last line: the upstream task of partition 0 fails here
    "streams streams streams",
]


def test_records_of_an_aborted_upstream_transaction_are_not_counted(kafka, spark, tmp_path):
    run_id = uid()
    topics = {
        "input_topic": f"abort-in-{run_id}",
        "repartition_topic": f"abort-rep-{run_id}",
        "output_topic": f"abort-out-{run_id}",
    }
    kafka.create_topic(topics["input_topic"], 2)
    lines = [
        (f"line-{i}".encode(), line.encode(), 0 if i < 5 else 1) for i, line in enumerate(LINES)
    ]
    produce(kafka.bootstrap_servers, topics["input_topic"], lines)
    settings = settings_for(
        kafka.bootstrap_servers,
        f"abort-{run_id}",
        tmp_path / "state",
        available_now=True,
        processing_guarantee="exactly_once_v2",
    )
    runner = TopologyRunner(
        "tests.integration.topologies_for_tests:build_word_count_failing_once",
        settings,
        spark=spark,
        topology_kwargs={**topics, "flag_path": str(tmp_path / "failed-once")},
    )
    with pytest.raises(StreamsError, match="failing once, after sending this batch's words"):
        runner.run()

    # the precondition: the aborted transaction left words on the broker, which Tansu shows
    words = [w for _, line, _ in lines for w in split_words(line.decode())]
    partition_1_words = [w for _, line, p in lines if p == 1 for w in split_words(line.decode())]
    visible = read_topic(kafka.bootstrap_servers, topics["repartition_topic"], timeout_s=30)
    assert len(visible) > len(partition_1_words), "no record of the aborted transaction is visible"

    runner.run()
    expected = Counter(words)
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
    ) as out:
        records = out.wait_for(
            lambda r: {k: v for k, v, *_ in r} == expected or len(r) >= expected.total(),
            timeout_s=60,
        )
    latest = {key: value for key, value, *_ in records}
    assert latest == dict(expected)
    assert len(records) == expected.total()  # one update per word occurrence, none counted twice
    # and the aborted records really were read (and skipped) by the downstream task
    assert len(read_topic(kafka.bootstrap_servers, topics["repartition_topic"], timeout_s=30)) > (
        expected.total()
    )
