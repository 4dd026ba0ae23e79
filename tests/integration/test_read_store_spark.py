"""A store's committed state read from Kafka, without the application.

On the embedded broker and the shared local SparkSession. A stopped exactly-once run of the
ledger topology (``read_store_topologies``) is read through ``processor_api.read_store``, the
``read-store`` command and ``read_store_df``, and compared with the same records run through
``TopologyTestDriver`` partition by partition; records written to a changelog after its last
commit marker (an aborted transaction, a plain record) are not read although the broker shows
them; a read while a run in epochs commits every 300 ms always finds every partition at one
of its task's commits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer

from processor_api import Serdes, read_store
from processor_api.errors import MissingTopicError
from processor_api.kafka.names import changelog_topic
from processor_api.spark.runner import TopologyRunner
from processor_api.state.json_entries import entry_fields
from processor_api.store_queries import open_store_reader
from processor_api.testing import TopologyTestDriver
from tests.harness.processes import REPO_ROOT, cli_environment
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import produce, read_topic, uid
from tests.integration.read_store_topologies import SEEN, TOTAL, build_ledger

pytestmark = pytest.mark.integration

LEDGER = "tests.integration.read_store_topologies:build_ledger"
PARTITIONS = 2
KEYS = [f"k{i:02d}" for i in range(12)]


def _records(count: int, seed: int) -> list[tuple[str, str, int, int]]:
    """``(key, value, partition, timestamp)``: keys spread over both partitions, every 7th
    record of a key deletes it."""
    out = []
    for n in range(count):
        key = KEYS[(n * 5 + seed) % len(KEYS)]
        value = "del" if n % 7 == 6 else f"v{n}"
        out.append((key, value, KEYS.index(key) % PARTITIONS, 1_700_000_000_000 + n * 250))
    return out


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str, int, int]]) -> None:
    produce(bootstrap, topic, [(k.encode(), v.encode(), p, ts) for k, v, p, ts in records])


def _expected(records: list[tuple[str, str, int, int]]) -> dict[str, dict[int, list[Any]]]:
    """Per store and partition, the entries (as flat fields) the driver's stores end with."""
    out: dict[str, dict[int, list[Any]]] = defaultdict(dict)
    for partition in range(PARTITIONS):
        with TopologyTestDriver(build_ledger(input_topic="in")) as driver:
            source = driver.create_input_topic("in", Serdes.string(), Serdes.string())
            for key, value, p, timestamp in records:
                if p == partition:
                    source.pipe_input(key, value, timestamp=timestamp)
            stores = {
                "counts": driver.get_key_value_store("counts").all(),
                "per-second": driver.get_window_store("per-second").all(),
                "visits": driver.get_session_store("visits").fetch(None, None),
            }
            for name, entries in stores.items():
                out[name][partition] = [entry_fields(e) for e in entries]
    return out


def _read_by_partition(app: dict[str, Any], store: str) -> dict[int, list[dict[str, Any]]]:
    reader = open_store_reader(app["bootstrap"], app["app_id"], LEDGER, store, **_topology(app))
    out: dict[int, list[dict[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for partition, entry in reader.read():
        out[partition].append(entry_fields(entry))
    return out


def _topology(app: dict[str, Any]) -> dict[str, Any]:
    return {"topology_kwargs": {"input_topic": app["input_topic"]}}


@pytest.fixture(scope="module")
def stopped_app(kafka, spark, tmp_path_factory) -> dict[str, Any]:
    """The ledger run to the end of its input under exactly_once_v2, then stopped."""
    run_id = uid()
    app = {
        "bootstrap": kafka.bootstrap_servers,
        "app_id": f"ledger-{run_id}",
        "input_topic": f"ledger-in-{run_id}",
        "records": _records(300, seed=1),
    }
    kafka.create_topic(app["input_topic"], PARTITIONS)
    _produce(app["bootstrap"], app["input_topic"], app["records"])
    settings = settings_for(
        app["bootstrap"],
        app["app_id"],
        tmp_path_factory.mktemp("ledger-stopped"),
        available_now=True,
        processing_guarantee="exactly_once_v2",
    )
    TopologyRunner(
        LEDGER, settings, topology_kwargs={"input_topic": app["input_topic"]}, spark=spark
    ).run()
    app["expected"] = _expected(app["records"])
    return app


@pytest.mark.parametrize("store", ["counts", "per-second", "visits"])
def test_a_stopped_app_reads_as_its_stores_ended(stopped_app, store):
    assert _read_by_partition(stopped_app, store) == stopped_app["expected"][store]


def test_read_store_yields_key_values_of_every_partition(stopped_app):
    app = stopped_app
    entries = list(read_store(app["bootstrap"], app["app_id"], LEDGER, "counts", **_topology(app)))
    expected = [e for p in range(PARTITIONS) for e in app["expected"]["counts"][p]]
    assert [{"key": e.key, "value": e.value} for e in entries] == expected
    last = {k: v for k, v, *_ in app["records"]}
    deleted = {k for k, v in last.items() if v == "del"}
    assert deleted and not deleted & {e.key for e in entries}  # tombstones applied
    one = read_store(app["bootstrap"], app["app_id"], LEDGER, "counts", key="k03", **_topology(app))
    assert [(e.key, e.value) for e in one] == [(e.key, e.value) for e in entries if e.key == "k03"]


def _cli(app: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "processor_api.cli.read_store",
            "--bootstrap-servers",
            app["bootstrap"],
            "--application-id",
            app["app_id"],
            "--topology",
            LEDGER,
            "--topology-arg",
            f"input_topic={app['input_topic']}",
            *args,
        ],
        cwd=REPO_ROOT,
        env=cli_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_prints_json_lines_and_selects(stopped_app):
    app = stopped_app
    expected = [
        {**e, "partition": p} for p in range(PARTITIONS) for e in app["expected"]["counts"][p]
    ]
    result = _cli(app, "counts")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == expected

    result = _cli(app, "counts", "--key", "k05")
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        e for e in expected if e["key"] == "k05"
    ]
    result = _cli(app, "counts", "--from", "k02", "--to", "k04")
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        e for e in expected if "k02" <= e["key"] <= "k04"
    ]
    result = _cli(app, "counts", "--prefix", "k1")
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        e for e in expected if e["key"].startswith("k1")
    ]
    windows = _cli(app, "per-second", "--key", "k00")
    rows = [json.loads(line) for line in windows.stdout.splitlines()]
    expected_windows = [
        {**e, "partition": p}
        for p in range(PARTITIONS)
        for e in app["expected"]["per-second"][p]
        if e["key"] == "k00"
    ]
    assert rows == expected_windows and rows
    assert set(rows[0]) == {"key", "value", "window_start", "window_end", "partition"}


def test_the_command_prints_a_table(stopped_app):
    result = _cli(stopped_app, "visits", "--format", "table")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["partition", "key", "value", "session_start", "session_end"]
    count = sum(len(v) for v in stopped_app["expected"]["visits"].values())
    assert len(lines) == count + 2 and lines[-1] == f"({count} entries)"


def test_an_unknown_store_or_application_exits_2_naming_it(stopped_app):
    result = _cli(stopped_app, "no-such-store")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "read-store: error: the topology has no store 'no-such-store' to read from its "
        "changelog; its stores: counts, per-second, visits"
    )
    other = dict(stopped_app, app_id=f"never-ran-{uid()}")
    result = _cli(other, "counts")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"read-store: error: application '{other['app_id']}' has no state")
    assert f"'{other['app_id']}-task-commits'" in last and "has the application run?" in last
    result = _cli(stopped_app, "counts", "--key", "k01", "--prefix", "k")
    assert result.returncode == 2
    assert "select one of key, key range or prefix; got key and prefix" in result.stderr


def test_records_after_the_last_commit_are_not_read(stopped_app):
    """An aborted transaction and a plain record on the changelog after the last marker: the
    broker shows both to a read_committed consumer (Tansu shows aborted records), read-store
    stops at the marker's offset."""
    app = stopped_app
    changelog = changelog_topic(app["app_id"], "counts")
    producer = Producer(
        {"bootstrap.servers": app["bootstrap"], "transactional.id": f"ghost-{uid()}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(
        changelog, key=b"ghost-aborted", value=Serdes.long().serialize(99), partition=0
    )
    producer.flush(30)
    producer.abort_transaction(30)
    produce(app["bootstrap"], changelog, [(b"ghost-plain", Serdes.long().serialize(7), 0)])
    seen = {r.key for r in read_topic(app["bootstrap"], changelog, partitions=[0])}
    assert b"ghost-plain" in seen and b"ghost-aborted" in seen  # the broker shows them
    assert _read_by_partition(app, "counts") == app["expected"]["counts"]


def test_a_data_frame_has_one_spark_partition_per_changelog_partition(stopped_app, spark):
    from processor_api.spark import read_store_df

    app = stopped_app
    df = read_store_df(
        spark, app["bootstrap"], app["app_id"], LEDGER, "per-second", **_topology(app)
    )
    assert df.rdd.getNumPartitions() == PARTITIONS
    assert df.dtypes == [
        ("partition", "int"),
        ("key", "string"),
        ("value", "bigint"),
        ("window_start", "bigint"),
        ("window_end", "bigint"),
    ]
    rows = sorted(tuple(r) for r in df.collect())
    expected = sorted(
        (p, e["key"], e["value"], e["window_start"], e["window_end"])
        for p in range(PARTITIONS)
        for e in app["expected"]["per-second"][p]
    )
    assert rows == expected


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_read_during_a_running_query_finds_committed_states_only(
    kafka, spark, tmp_path, guarantee
):
    run_id = uid()
    app = {"bootstrap": kafka.bootstrap_servers, "app_id": f"ledger-live-{run_id}"}
    app["input_topic"] = f"ledger-live-in-{run_id}"
    kafka.create_topic(app["input_topic"], PARTITIONS)
    records = _records(1200, seed=3)
    final = _expected(records)["counts"]
    settings = settings_for(
        app["bootstrap"],
        app["app_id"],
        tmp_path,
        processing_guarantee=guarantee,
        config={"commit.interval.ms": "300"},  # reads meet many commits inside the epoch
    )

    def feed() -> None:
        for start in range(0, len(records), 40):
            _produce(app["bootstrap"], app["input_topic"], records[start : start + 40])
            time.sleep(0.05)

    feeder = threading.Thread(target=feed, daemon=True)
    reads: list[dict[int, list[dict[str, Any]]]] = []
    kwargs = {"input_topic": app["input_topic"]}
    with BackgroundRun(LEDGER, settings, spark=spark, topology_kwargs=kwargs) as run:
        feeder.start()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            run.check()
            try:
                state = _read_by_partition(app, "counts")
            except MissingTopicError:  # the run has not created its topics yet
                continue
            reads.append(state)
            if state == final:
                break
        run.stop()
    feeder.join()
    assert reads and reads[-1] == final
    for state in reads:
        for partition, entries in state.items():
            counts = {e["key"]: e["value"] for e in entries}
            counts.pop(SEEN, None)
            total = counts.pop(TOTAL, 0)
            assert total == sum(counts.values()), (partition, entries)
    for partition in range(PARTITIONS):
        seen = [_seen(state[partition]) for state in reads]
        assert seen == sorted(seen), seen  # never back to an older commit
    between = [s for s in reads if 0 < sum(_seen(s[p]) for p in s) < len(records)]
    assert len(between) >= 2, [[_seen(s[p]) for p in s] for s in reads]


def _seen(entries: list[dict[str, Any]]) -> int:
    return next((e["value"] for e in entries if e["key"] == SEEN), 0)
