"""Two executor processes: word count on ``local-cluster[2,1,1024]`` through
``run-topology`` gives the same result as on local Spark.

``local-cluster`` starts a standalone master and two workers inside the driver JVM; each worker
launches one executor JVM from ``$SPARK_HOME`` (the runner's compiled copy of pyspark's install,
see ``processor_api.spark.spark_home``, or pyspark's own) and keeps its stdout/stderr in
``$SPARK_HOME/work/<app-id>/<executor-id>/``. The test tags its
executors with a JVM system property to find that directory, checks that both executors ran
epochs of tasks that processed records (``task_epoch_done``, a debug event of the executors'
Python workers), then deletes it.

``--available-now`` on two slots for six tasks: each task's epoch ends once it reached the end
offsets captured at the pass's start, so the tasks take turns on the slots (continuous runs
short of slots run bounded epochs, tested in ``test_epochs_spark.py``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from processor_api.logging import LEVEL_ENV
from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from tests.harness.local_cluster import executor_dirs, remove_executor_dirs
from tests.harness.logs import parse_log_line
from tests.harness.processes import run_cli
from tests.harness.topics import TopicReader, uid
from tests.harness.word_count import WORD_COUNT, WORD_COUNT_LINES
from topologies.word_count import split_words

pytestmark = pytest.mark.integration


def _epoch_done(event: dict | None) -> bool:
    return event is not None and event.get("event") == "task_epoch_done"


def _counts_by_word(records: list[tuple]) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}
    for word, count, *_ in records:
        counts.setdefault(word, []).append(count)
    return counts


def test_local_cluster_gives_the_same_result_as_local(
    kafka, word_count_local, tmp_path, local_cluster
):
    # the reference: the same input through the shared local[2] session (session fixture)
    local = word_count_local
    expected = Counter(word for line in WORD_COUNT_LINES for word in split_words(line))
    total = sum(expected.values())
    long = Serdes.long()
    run_id = uid()
    topics = {
        "input_topic": local.input_topic,
        "repartition_topic": f"lc-rep-{run_id}",
        "output_topic": f"lc-out-{run_id}",
    }

    # local-cluster: two executor JVMs, run-topology in a subprocess
    cluster_app = f"lc-cluster-{run_id}"
    marker = f"-Dprocessor_api.test.run={run_id}"
    args = [
        WORD_COUNT,
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--application-id",
        cluster_app,
        "--state-dir",
        str(tmp_path / "cluster"),
        "--master",
        "local-cluster[2,1,1024]",
        "--available-now",
        "--spark-conf",
        f"spark.executor.extraJavaOptions={marker}",
        # the executors' Python processes log debug events; Spark itself stays quiet
        "--spark-conf",
        f"spark.executorEnv.{LEVEL_ENV}=debug",
    ]
    for key, value in topics.items():
        args += ["--topology-arg", f"{key}={value}"]
    try:
        result = run_cli(args, timeout_s=300)
        executors = executor_dirs(marker)
        assert result.returncode == 0, result.stderr[-5000:]
        # both executor processes ran tasks (their Python workers log to the executor's stderr)
        assert len(executors) == 2, f"executor dirs with {marker}: {executors}"
        for directory in executors:
            text = (directory / "stderr").read_text(errors="replace")
            epochs = [e for e in map(parse_log_line, text.splitlines()) if _epoch_done(e)]
            assert any(e.get("records", 0) > 0 for e in epochs), (
                f"{directory} ran no epoch that processed records "
                f"({len(epochs)} epochs):\n{text[-2000:]}"
            )
            # Spark's own INFO lines are off in the executors too (log4j2 at ERROR)
            spark_lines = [line for line in text.splitlines() if " INFO " in line]
            assert not spark_lines, f"{directory} logged Spark INFO lines: {spark_lines[:3]}"
    finally:
        remove_executor_dirs(marker)
    with TopicReader(
        kafka.bootstrap_servers, topics["output_topic"], bytes.decode, long.deserialize
    ) as out:
        cluster_records = out.wait_for(lambda r: len(r) >= total, timeout_s=30)

    # same outputs: per word the counts 1..n, in order; same final stores; both = Counter
    assert len(cluster_records) == total
    assert _counts_by_word(cluster_records) == _counts_by_word(local.records)
    finals = {word: counts[-1] for word, counts in _counts_by_word(cluster_records).items()}
    assert finals == dict(expected)
    stores = [
        read_local_store(directory, app, "counts-store", Serdes.string(), long)
        for directory, app in ((local.state_dir, local.app_id), (tmp_path / "cluster", cluster_app))
    ]
    assert stores[0] == stores[1] == dict(expected)
