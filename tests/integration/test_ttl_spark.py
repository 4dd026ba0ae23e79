"""A store with a time to live on Spark: counts restart after the key was idle for the TTL
of stream time, the same as in the test driver, also after the state dir is wiped and the
store restored from its changelog (expired entries were deleted there with tombstones); and
``read-store`` reads the store from its changelog as the test driver's store ends."""

from __future__ import annotations

import json
import shutil

import pytest

from processor_api import read_store
from processor_api.cli.read_store import main as read_store_main
from processor_api.serdes import Serdes
from processor_api.spark.runner import TopologyRunner
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import settings_for
from tests.harness.topics import TopicReader, produce, uid
from tests.integration.topologies_for_tests import build_forgetful_count

pytestmark = pytest.mark.integration

# (key, timestamp): "a" idles 1,900 ms (> 1,000) before its third record, "b" never
FIRST = [("a", 100), ("b", 150), ("a", 300), ("b", 900), ("b", 1_500), ("b", 2_100), ("a", 2_200)]
SECOND = [("a", 2_300), ("b", 2_400), ("a", 5_000), ("b", 5_100)]


TOPOLOGY = "tests.integration.topologies_for_tests:build_forgetful_count"


def _driven(
    records: list[tuple[str, int]], topics: dict[str, str]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The test driver's output and, after the last record, its store's entries."""
    with TopologyTestDriver(build_forgetful_count(**topics)) as driver:
        source = driver.create_input_topic(topics["input_topic"])
        for key, timestamp in records:
            source.pipe_input(key, "x", timestamp)
        output = driver.create_output_topic(topics["output_topic"])
        store = driver.get_key_value_store("recent-counts")
        return (
            [(kv.key, kv.value) for kv in output.read_key_values_to_list()],
            [(kv.key, kv.value) for kv in store.all()],
        )


def _expected(records: list[tuple[str, int]], topics: dict[str, str]) -> list[tuple[str, int]]:
    return _driven(records, topics)[0]


def _run(kafka, spark, tmp_path, run_id, topics) -> None:
    settings = settings_for(
        kafka.bootstrap_servers,
        f"ttl-{run_id}",
        tmp_path / "state",
        checkpoint_dir=str(tmp_path / "checkpoint"),
        available_now=True,
    )
    TopologyRunner(
        TOPOLOGY,
        settings,
        topology_kwargs=topics,
        spark=spark,
    ).run()


def test_counts_restart_after_the_ttl_also_after_a_restore(kafka, spark, tmp_path):
    run_id = uid()
    topics = {"input_topic": f"ttl-in-{run_id}", "output_topic": f"ttl-out-{run_id}"}
    kafka.create_topic(topics["input_topic"], 1)  # one task: stream time over every key
    kafka.create_topic(topics["output_topic"], 1)

    def send(records):
        produce(kafka.bootstrap_servers, topics["input_topic"],
                [(k.encode(), b"x", 0, ts) for k, ts in records])  # fmt: skip

    send(FIRST)
    _run(kafka, spark, tmp_path, run_id, topics)
    shutil.rmtree(tmp_path / "state")  # the store comes back from its changelog
    send(SECOND)
    _run(kafka, spark, tmp_path, run_id, topics)

    expected = _expected(FIRST + SECOND, topics)
    assert [count for key, count in expected if key == "a"] == [1, 2, 1, 2, 1]
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
    ) as out:
        got = out.wait_for(lambda r: len(r) >= len(expected), timeout_s=60)
    assert [(r.key, r.value) for r in got] == expected


def test_read_store_reads_a_ttl_store_as_the_driver_ends_it(
    kafka, spark, tmp_path, capsys, cli_logging
):
    """The store's changelog holds each value behind its write time; ``read_store`` and
    ``read-store`` return the values, without what the TTL expired by the last commit."""
    run_id = uid()
    topics = {"input_topic": f"ttl-read-in-{run_id}", "output_topic": f"ttl-read-out-{run_id}"}
    kafka.create_topic(topics["input_topic"], 1)
    kafka.create_topic(topics["output_topic"], 1)
    # "gone" is last written at 200, more than the TTL (1,000) before the stream time (2,100)
    records = [("gone", 200), ("a", 1_000), ("b", 1_500), ("a", 1_900), ("b", 2_100)]
    produce(kafka.bootstrap_servers, topics["input_topic"],
            [(k.encode(), b"x", 0, ts) for k, ts in records])  # fmt: skip
    _run(kafka, spark, tmp_path, run_id, topics)

    store = _driven(records, topics)[1]
    assert store == [("a", 2), ("b", 2)]
    args = {"topology_kwargs": topics}
    entries = read_store(
        kafka.bootstrap_servers, f"ttl-{run_id}", TOPOLOGY, "recent-counts", **args
    )
    assert [(e.key, e.value) for e in entries] == store
    code = read_store_main(
        [
            "--bootstrap-servers", kafka.bootstrap_servers, "--application-id", f"ttl-{run_id}",
            "--topology", TOPOLOGY, "--topology-arg", f"input_topic={topics['input_topic']}",
            "--topology-arg", f"output_topic={topics['output_topic']}", "recent-counts",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [json.loads(line) for line in captured.out.splitlines()] == [
        {"key": key, "value": value, "partition": 0} for key, value in store
    ]
