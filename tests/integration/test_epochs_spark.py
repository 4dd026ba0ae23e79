"""Tasks in long-running epochs (``runtime/epoch_runner.py``): the poll loop inside a Spark
epoch, commits every ``commit.interval.ms``, outputs as they are made.

On the shared test session (``local[2]``): a run has two workers (one per core), each running
its share of the tasks in one poll loop on one slot, so 2 or 3 input partitions run
continuous epochs; asking for more workers than slots (``num.stream.threads``) runs bounded
epochs, with a warning. ``init()`` once per task across many epochs:
``test_task_lifetime_spark.py``.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from structlog.testing import capture_logs

from processor_api.kafka.names import commit_marker_topic
from tests.harness.processes import task_host_workers
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, committed_records, produce, uid

pytestmark = pytest.mark.integration

LONG_EPOCH_S = 600.0
#: exactly-once with a transaction every 200 ms
FAST_EOS = {
    "processing_guarantee": "exactly_once_v2",
    "config": {"commit.interval.ms": "200"},
}  # no epoch of these runs ends by time: outputs must not wait for one


def _echo_run(
    kafka, spark, tmp_path, run_id: str, *, again: bool = False, partitions: int = 2, **overrides
):
    """A continuous echo run of one task per partition (``again``: the topics exist, from a
    first run)."""
    topics = {"input_topic": f"ep-in-{run_id}", "output_topic": f"ep-out-{run_id}"}
    if not again:
        kafka.create_topic(topics["input_topic"], partitions)
        kafka.create_topic(topics["output_topic"], partitions)
    settings = settings_for(
        kafka.bootstrap_servers,
        f"ep-{run_id}",
        tmp_path / "state",
        epoch_interval_s=LONG_EPOCH_S,
        **overrides,
    )
    run = BackgroundRun(
        "tests.integration.topologies_for_tests:build_echo",
        settings,
        spark=spark,
        topology_kwargs=topics,
    )
    return run, topics


def test_at_least_once_outputs_are_visible_long_before_the_epoch_ends(kafka, spark, tmp_path):
    run_id = uid()
    run, topics = _echo_run(kafka, spark, tmp_path, run_id)
    with (
        run,
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, bytes.decode
        ) as out,
    ):
        for wave in range(3):  # each wave is processed while the first epoch still runs
            records = [(f"k{i}".encode(), f"w{wave}-{i}".encode(), i % 2) for i in range(20)]
            produce(kafka.bootstrap_servers, topics["input_topic"], records)
            out.wait_for(lambda r, n=20 * (wave + 1): len(r) >= n, timeout_s=60, while_alive=run)
        assert run.runner._progress.result.batches == 0, "an epoch ended: outputs waited for it"
        result = run.stop()
    assert sorted(v for _, v in out.pairs()) == sorted(
        f"w{wave}-{i}" for wave in range(3) for i in range(20)
    )
    assert result.records == 60


def test_exactly_once_commits_a_transaction_every_commit_interval(kafka, spark, tmp_path):
    run_id = uid()
    run, topics = _echo_run(
        kafka,
        spark,
        tmp_path,
        run_id,
        **FAST_EOS,
    )
    markers = commit_marker_topic(f"ep-{run_id}")
    with (
        run,
        TopicReader(
            kafka.bootstrap_servers,
            topics["output_topic"],
            bytes.decode,
            bytes.decode,
            isolation="read_committed",
        ) as out,
    ):
        for wave in range(4):
            records = [(f"k{i}".encode(), f"w{wave}-{i}".encode(), i % 2) for i in range(10)]
            produce(kafka.bootstrap_servers, topics["input_topic"], records)
            # committed (read_committed sees it) within the epoch that is still running
            out.wait_for(lambda r, n=10 * (wave + 1): len(r) >= n, timeout_s=60, while_alive=run)
        assert run.runner._progress.result.batches == 0
        result = run.stop()
    kept, _ = committed_records(kafka.bootstrap_servers, markers)
    # one marker per commit that had something to commit: several within the one epoch
    per_task = Counter(r.key for r in kept)
    assert all(count >= 2 for count in per_task.values()) and len(per_task) == 2, per_task
    assert sorted(v for _, v in out.pairs()) == sorted(
        f"w{wave}-{i}" for wave in range(4) for i in range(10)
    )
    assert result.records == 40


def test_more_tasks_than_slots_run_continuously_two_workers_sharing_them(kafka, spark, tmp_path):
    """3 tasks on 2 slots: two workers, one of them running two tasks in one loop; outputs
    come while the first epoch still runs (no epoch ends), every task's records once."""
    run, topics = _echo_run(kafka, spark, tmp_path, uid(), partitions=3)
    with (
        capture_logs() as events,
        run,
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, bytes.decode
        ) as out,
    ):
        for wave in range(2):
            records = [(f"k{i}".encode(), f"w{wave}-{i}".encode(), i % 3) for i in range(30)]
            produce(kafka.bootstrap_servers, topics["input_topic"], records)
            out.wait_for(lambda r, n=30 * (wave + 1): len(r) >= n, timeout_s=90, while_alive=run)
        assert run.runner._progress.result.batches == 0, "an epoch ended: outputs waited for it"
        result = run.stop()
    assert not [e for e in events if e.get("event") == "bounded_epochs"]
    (started,) = [e for e in events if e.get("event") == "query_started"]
    assert (started["tasks"], started["workers"]) == (3, 2)
    assert sorted(v for _, v in out.pairs()) == sorted(
        f"w{wave}-{i}" for wave in range(2) for i in range(30)
    )
    assert result.records == 60


def test_more_workers_than_slots_run_bounded_epochs_with_one_warning(kafka, spark, tmp_path):
    run, topics = _echo_run(
        kafka, spark, tmp_path, uid(), partitions=3, config={"num.stream.threads": "3"}
    )  # 3 workers of one task each, 2 slots
    with (
        capture_logs() as events,
        run,
        TopicReader(
            kafka.bootstrap_servers, topics["output_topic"], bytes.decode, bytes.decode
        ) as out,
    ):
        for wave in range(2):
            records = [(f"k{i}".encode(), f"w{wave}-{i}".encode(), i % 3) for i in range(30)]
            produce(kafka.bootstrap_servers, topics["input_topic"], records)
            out.wait_for(lambda r, n=30 * (wave + 1): len(r) >= n, timeout_s=90, while_alive=run)
        result = run.stop()
    warnings = [e for e in events if e.get("event") == "bounded_epochs"]
    assert len(warnings) == 1 and warnings[0]["workers"] == 3 and warnings[0]["slots"] == 2
    assert result.batches >= 2  # epochs ended by themselves once caught up
    assert sorted(v for _, v in out.pairs()) == sorted(
        f"w{wave}-{i}" for wave in range(2) for i in range(30)
    )


def test_a_killed_spark_worker_stops_its_host_and_nothing_is_doubled(kafka, spark, tmp_path):
    """Exactly-once: the Python worker holding a task's epoch is killed; its host drops what
    it had not committed (the transaction aborts); the run fails, and a new run ends with
    every record exactly once in read_committed reads."""
    run_id = uid()
    run, topics = _echo_run(
        kafka,
        spark,
        tmp_path,
        run_id,
        **FAST_EOS,
    )
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"k{i}".encode(), f"a{i}".encode(), i % 2) for i in range(20)],
    )
    with run:
        with TopicReader(
            kafka.bootstrap_servers,
            topics["output_topic"],
            isolation="read_committed",
        ) as out:
            out.wait_for(lambda r: len(r) >= 20, timeout_s=60, while_alive=run)
        for worker in _spark_workers_of(f"ep-{run_id}"):
            os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while run.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not run.is_alive(), "the run went on without the killed worker's task"
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"k{i}".encode(), f"b{i}".encode(), i % 2) for i in range(20)],
    )
    again, _ = _echo_run(
        kafka,
        spark,
        tmp_path,
        run_id,
        again=True,
        **FAST_EOS,
    )
    with again:
        with TopicReader(
            kafka.bootstrap_servers,
            topics["output_topic"],
            bytes.decode,
            bytes.decode,
            isolation="read_committed",
        ) as out:
            out.wait_for(lambda r: len(r) >= 40, timeout_s=90, while_alive=again)
        again.stop()
    kept, _ = committed_records(kafka.bootstrap_servers, topics["output_topic"])
    values = Counter(r.value.decode() for r in kept)
    assert values == Counter([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])


def _spark_workers_of(app_id: str) -> list[int]:
    """The pyspark workers (one of them holds each task's epoch) of ``app_id``'s hosts."""
    workers = task_host_workers(app_id)
    assert workers, f"no pyspark worker holds a task of {app_id}"
    return workers


def test_a_backfill_joins_every_trade_with_the_quote_valid_at_its_time(kafka, spark, tmp_path):
    """Two co-partitioned inputs read in timestamp order across the poll loop: a task whose
    other input still has records on the broker fetches them instead of enforcing processing
    (a task that enforced processing there instead would join some trades with an older
    quote)."""
    run_id = uid()
    topics = {
        "trades_topic": f"ep-trades-{run_id}",
        "quotes_topic": f"ep-quotes-{run_id}",
        "output_topic": f"ep-enriched-{run_id}",
    }
    for topic in topics.values():
        kafka.create_topic(topic, 2)
    symbols = [f"s{i}" for i in range(8)]
    partition_of = {s: i % 2 for i, s in enumerate(symbols)}  # co-partitioned by symbol
    # a quote of one symbol every 8 ms (even times), a trade every 10 ms (odd times): no
    # trade shares its timestamp with a quote (Kafka Streams leaves the order of ties open)
    quotes = [(symbols[i % 8], f"q{i}", 1_000 + 8 * i) for i in range(3_000)]
    trades = [(symbols[(3 * i) % 8], f"t{i}", 1_001 + 10 * i) for i in range(2_000)]
    quotes = [(k, v, partition_of[k], ts) for k, v, ts in quotes]
    trades = [(k, v, partition_of[k], ts) for k, v, ts in trades]
    produce(kafka.bootstrap_servers, topics["trades_topic"],
            [(k.encode(), v.encode(), p, ts) for k, v, p, ts in trades])  # fmt: skip
    produce(kafka.bootstrap_servers, topics["quotes_topic"],
            [(k.encode(), v.encode(), p, ts) for k, v, p, ts in quotes])  # fmt: skip
    expected = {}
    for symbol, trade, _, at in trades:
        valid = [(ts, q) for s, q, _, ts in quotes if s == symbol and ts <= at]
        price = "none" if not valid else f"{max(valid)[1]}@{max(valid)[0]}"
        expected[trade] = f"{trade}:{price}"
    settings = settings_for(
        kafka.bootstrap_servers,
        f"ep-join-{run_id}",
        tmp_path / "state",
        available_now=True,
    )
    from processor_api.spark.runner import TopologyRunner

    result = TopologyRunner(
        "tests.integration.topologies_for_tests:build_trade_enrichment",
        settings,
        topology_kwargs=topics,
        spark=spark,
    ).run()
    assert result.records == len(trades) + len(quotes)
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, bytes.decode
    ) as out:
        seen = out.wait_for(lambda r: len(r) >= len(trades), timeout_s=60)
    got = {value.split(":")[0]: value for _, value, *_ in seen}
    wrong = {t: (got.get(t), want) for t, want in expected.items() if got.get(t) != want}
    assert not wrong, f"{len(wrong)} trades joined wrongly, e.g. {list(wrong.items())[:3]}"
