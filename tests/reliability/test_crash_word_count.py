"""kill -9 inside an upstream transaction of a word count under exactly_once_v2.

The upstream task (split, paced: 5 ms per line) writes words to the repartition topic in the
transaction it commits every 100 ms inside its epoch; once a task of the run has committed
processed records, the run is killed while such words are on the broker with no transaction
marker after them yet. The next start aborts that transaction (the new producer fences it) and
processes the lines again. Tansu shows the aborted words to ``read_committed`` readers; the
downstream count must skip them by design (the stamps of ``processor_api/kafka/batch_stamps.py``
name the commit each word belongs to): every word's last count and the store equal a plain
count of the input.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.processes import CliRun, RunEnded, cli_args
from tests.harness.topics import TopicReader, create_topics_now, produce, uid
from tests.harness.wire import OutputWatch, high_watermarks
from topologies.word_count import split_words

pytestmark = pytest.mark.integration

PARTITIONS = 3
WORDS = [f"w{n:02d}" for n in range(40)]
RUN_TIMEOUT_S = 300.0
KILL_ATTEMPTS = 3


def _lines(count: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(5)) for _ in range(count)]


def _kill_inside_an_upstream_transaction(run: CliRun, bootstrap: str, repartition: str) -> int:
    """After a task's first commit of processed records (``task_committed``, a debug event),
    kill once words of an open transaction are on the repartition topic; returns how many
    words of an open transaction the kill left behind.

    The upstream task commits every 100 ms, so a transaction seen open may still commit in
    the moment between the look and the kill: then the kill left nothing to abort (0), and the
    caller starts the run again to try once more.
    """
    run.wait_event(
        lambda e: e.name == "task_committed" and e.event.get("processed", 0) > 0, RUN_TIMEOUT_S
    )
    groups = run.process_groups()
    watch = OutputWatch(bootstrap, repartition, high_watermarks(bootstrap, repartition, PARTITIONS))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and run.is_alive():
            if watch.count():
                run.kill9(first=groups)
                # the killed producer writes no marker any more: what is unmarked now stays so
                return watch.count()
            time.sleep(0.001)
    finally:
        watch.close()
    raise RunEnded("no open upstream transaction seen")


def test_kill_9_inside_an_upstream_transaction_never_counts_a_word_twice(kafka, tmp_path):
    run_id = uid()
    topics = {
        "input_topic": f"crash-lines-{run_id}",
        "repartition_topic": f"crash-words-{run_id}",
        "output_topic": f"crash-counts-{run_id}",
    }
    create_topics_now(kafka.bootstrap_servers, {topics["input_topic"]: PARTITIONS})
    lines = _lines(1500, seed=15)
    produce(
        kafka.bootstrap_servers,
        topics["input_topic"],
        [(f"l{i}".encode(), line.encode(), i % PARTITIONS) for i, line in enumerate(lines)],
    )
    app_id = f"crash-wc-{run_id}"
    args = cli_args(
        "tests.reliability.topologies_for_tests:build_paced_word_count",
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        tmp_path / "checkpoint",
        guarantee="exactly_once_v2",
        topology_args={**topics, "pause_ms": 5.0},  # ~2.5 s of upstream work per task
        extra=["--log-level", "debug"],
    )
    log = tmp_path / "run-topology.log"
    left_open = 0
    for _ in range(KILL_ATTEMPTS):
        with CliRun(args, log) as run:
            left_open = _kill_inside_an_upstream_transaction(
                run, kafka.bootstrap_servers, topics["repartition_topic"]
            )
        if left_open:
            break
    assert left_open > 0, f"every one of {KILL_ATTEMPTS} kills came just after a commit"
    with CliRun(args, log) as run:
        assert run.wait(RUN_TIMEOUT_S) == 0, run.tail()
        skipped = run.find("aborted_records_skipped")

    expected = Counter(word for line in lines for word in split_words(line))
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, Serdes.long().deserialize
    ) as out:
        records = out.read_to_end(60)
    assert {key: value for key, value, *_ in records} == dict(expected)
    store = read_local_store(
        tmp_path / "state", app_id, "counts-store", Serdes.string(), Serdes.long()
    )
    assert store == dict(expected)
    # the killed transaction's words were read downstream, and skipped
    assert sum(int(e["records"]) for e in skipped) > 0, "no aborted word reached the count"
