"""Safe restarts: the application's progress lives in Kafka as well as in
the Spark checkpoint, so deleting the state dir (with the checkpoint inside it, the default)
or the checkpoint alone never changes a result.

A word count with a repartition topic runs twice (available-now) with new lines in between;
the last count of every word must equal the count over all lines.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from processor_api.kafka.group import committed_offsets
from processor_api.kafka.offsets import end_offsets
from processor_api.serdes import Serdes
from processor_api.spark.runner import TopologyRunner
from tests.harness.runs import settings_for
from tests.harness.topics import TopicReader, produce, uid
from topologies.word_count import split_words

pytestmark = pytest.mark.integration

FIRST = ["all streams lead to kafka", "hello kafka streams", "join kafka summit"]
SECOND = ["kafka streams again", "hello again", "streams streams streams"]


def _topics(run_id: str) -> dict[str, str]:
    return {
        "input_topic": f"safe-in-{run_id}",
        "repartition_topic": f"safe-rep-{run_id}",
        "output_topic": f"safe-out-{run_id}",
    }


def _produce_lines(bootstrap: str, topic: str, lines: list[str], first: int) -> None:
    produce(
        bootstrap,
        topic,
        [
            (f"line-{first + i}".encode(), line.encode(), (first + i) % 3)
            for i, line in enumerate(lines)
        ],
    )


def _run(kafka, spark, settings, topics) -> None:
    TopologyRunner(
        "topologies.word_count:build_topology", settings, topology_kwargs=topics, spark=spark
    ).run()


@pytest.mark.parametrize(
    ("guarantee", "lost"),
    [
        ("at_least_once", "state_dir"),
        ("exactly_once_v2", "state_dir"),
        ("at_least_once", "checkpoint"),
        ("exactly_once_v2", "checkpoint"),
    ],
)
def test_losing_the_state_dir_or_the_checkpoint_never_changes_a_result(
    kafka, spark, tmp_path, guarantee, lost
):
    run_id = uid()
    topics = _topics(run_id)
    kafka.create_topic(topics["input_topic"], 3)
    app_id = f"safe-{run_id}"
    state_dir = tmp_path / "state"
    overrides = {"available_now": True, "processing_guarantee": guarantee}
    if lost == "checkpoint":
        overrides["checkpoint_dir"] = str(tmp_path / "checkpoint")
    settings = settings_for(kafka.bootstrap_servers, app_id, state_dir, **overrides)

    _produce_lines(kafka.bootstrap_servers, topics["input_topic"], FIRST, 0)
    _run(kafka, spark, settings, topics)
    # default checkpoint location: inside the state dir, so "state_dir" loses both
    shutil.rmtree(state_dir if lost == "state_dir" else tmp_path / "checkpoint")
    _produce_lines(kafka.bootstrap_servers, topics["input_topic"], SECOND, len(FIRST))
    _run(kafka, spark, settings, topics)

    expected = Counter(word for line in FIRST + SECOND for word in split_words(line))
    long = Serdes.long()
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, long.deserialize
    ) as out:
        records = out.wait_for(
            lambda r: {k: v for k, v, *_ in r} == expected or len(r) > 2 * expected.total(),
            timeout_s=30,
        )
    assert {key: value for key, value, *_ in records} == dict(expected)

    # the group shows the application's progress: every input record processed
    partitions = [(topics["input_topic"], p) for p in range(3)]
    assert committed_offsets(kafka.bootstrap_servers, app_id, partitions) == end_offsets(
        kafka.bootstrap_servers, partitions
    )
