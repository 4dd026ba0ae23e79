"""Warm failover on Spark: a run without local state restores from snapshots + changelog tail.

Run 1 snapshots after every commit; run 2 takes none (snapshots off: a run with them on would
snapshot its stores when it closes), so its changes are only in
the changelogs; then the local state is wiped and run 3 must replay exactly run 2's changelog
records (the tail after the snapshots), not the whole changelogs, with exact results; and
``read-store``'s reader, given the snapshot location, reads the same from snapshots and tails.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from processor_api.cli.app_status import application_status
from processor_api.serdes import Serdes
from processor_api.spark.runner import TopologyRunner
from processor_api.state.inspect import read_local_store
from processor_api.state.manager import wipe_application_state
from processor_api.state.snapshot_files import StoreSnapshotDir, open_location
from processor_api.state.snapshots import SnapshotSettings
from processor_api.store_queries import open_store_reader
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

STORE = "PRODUCT_AGGREGATED_SALES"
PRODUCTS = [f"product{i}" for i in range(1, 7)]
PARTITIONS = 3
HOUR = 3_600_000  # no snapshot is due within a run


def _events(start: int, count: int) -> list[tuple[str, int]]:
    return [(PRODUCTS[(start + i) % len(PRODUCTS)], 100 + start + i) for i in range(count)]


def _committed_changelog_offsets(bootstrap: str, app_id: str) -> dict[int, int]:
    """Per task (partition), the changelog offset of the store its last commit covers."""
    status = application_status(bootstrap, app_id)
    offsets = {
        int(task.task_id.split("_")[1]): changelog.committed_offset
        for task in status.tasks
        for changelog in task.changelogs
        if changelog.store == STORE
    }
    assert len(offsets) == PARTITIONS, status
    return offsets


def _wait_for_snapshots(location: Path, wanted: dict[int, int], timeout_s: float = 60) -> None:
    """Until every task's newest snapshot holds its changelog partition up to ``wanted``."""
    filesystem, root = open_location(str(location))
    deadline = time.monotonic() + timeout_s
    newest: dict[int, int | None] = {}
    while time.monotonic() < deadline:
        for partition in wanted:
            manifests = StoreSnapshotDir(filesystem, f"{root}/0_{partition}/{STORE}").manifests()
            newest[partition] = manifests[0][1].offset if manifests and manifests[0][1] else None
        if newest == wanted:
            return
        time.sleep(0.2)
    pytest.fail(f"snapshots hold changelog offsets {newest}, expected {wanted} within {timeout_s}s")


def test_a_run_without_local_state_restores_from_snapshots_and_the_tail(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"snap-in-{run_id}", f"snap-out-{run_id}"
    app_id = f"snap-{run_id}"
    state_dir = tmp_path / "state"
    snapshots = tmp_path / "snapshots"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    kwargs = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    sent: list[tuple[str, int]] = []

    def run_with(events: list[tuple[str, int]], snapshot_interval_ms: int):
        settings = settings_for(
            kafka.bootstrap_servers,
            app_id,
            state_dir,
            config={
                "commit.interval.ms": 200,
                "state.snapshot.interval.ms": snapshot_interval_ms,
                "state.snapshot.location": str(snapshots),
            },
        )
        produce(
            kafka.bootstrap_servers,
            input_topic,
            [(p.encode(), json.dumps({"product": p, "value": v}).encode()) for p, v in events],
        )
        sent.extend(events)
        with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, json.loads) as out:
            with BackgroundRun(
                "topologies.sales_aggregation:build_topology",
                settings,
                spark=spark,
                topology_kwargs=kwargs,
            ) as run:
                out.wait_for(lambda r: len(r) >= len(sent), timeout_s=90, while_alive=run)
                return run.stop()

    first = run_with(_events(0, 30), snapshot_interval_ms=0)
    _wait_for_snapshots(snapshots, _committed_changelog_offsets(kafka.bootstrap_servers, app_id))

    second = run_with(_events(30, 12), snapshot_interval_ms=-1)  # its changes: the tail
    assert second.restored == 0 and second.changelog_records > 0

    assert wipe_application_state(state_dir, app_id) == PARTITIONS
    third = run_with(_events(42, 6), snapshot_interval_ms=HOUR)
    assert third.restored == second.changelog_records  # not first's: those are in snapshots
    assert first.changelog_records > 0

    store = read_local_store(state_dir, app_id, STORE, Serdes.string(), Serdes.long())
    totals: Counter[str] = Counter()
    for product, value in sent:
        totals[product] += value
    assert store == dict(totals)

    # read-store: from the snapshots and the tail, the same committed contents
    settings = SnapshotSettings(location=str(snapshots), interval_ms=HOUR)
    with capture_logs() as logs:
        reader = open_store_reader(
            kafka.bootstrap_servers,
            app_id,
            "topologies.sales_aggregation:build_topology",
            STORE,
            topology_kwargs=kwargs,
            snapshots=settings,
        )
        from_snapshots = {entry.key: entry.value for _, entry in reader.read()}
    reads = [e for e in logs if e["event"] == "store_partition_read"]
    assert len(reads) == PARTITIONS and all(e["snapshot_offset"] > 0 for e in reads), reads
    assert from_snapshots == dict(totals)


def _newest_snapshots(location: Path, partitions: int) -> dict[int, int | None]:
    """Per task (partition), the changelog offset of its store's newest snapshot."""
    filesystem, root = open_location(str(location))
    newest: dict[int, int | None] = {}
    for partition in range(partitions):
        manifests = StoreSnapshotDir(filesystem, f"{root}/0_{partition}/{STORE}").manifests()
        newest[partition] = manifests[0][1].offset if manifests and manifests[0][1] else None
    return newest


def test_a_run_shorter_than_the_snapshot_interval_leaves_a_snapshot(kafka, spark, tmp_path):
    """Issue 37 item 7: the tasks snapshot their stores when they close at the end of the run,
    so a later run without the local state restores from them, not from the changelogs."""
    run_id = uid()
    input_topic, output_topic = f"snapclose-in-{run_id}", f"snapclose-out-{run_id}"
    app_id = f"snapclose-{run_id}"
    state_dir = tmp_path / "state"
    snapshots = tmp_path / "snapshots"
    kafka.create_topic(input_topic, PARTITIONS)
    kafka.create_topic(output_topic, PARTITIONS)
    kwargs = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    settings = settings_for(
        kafka.bootstrap_servers,
        app_id,
        state_dir,
        available_now=True,
        checkpoint_dir=str(tmp_path / "checkpoint"),  # kept: only the local state is lost
        config={
            "commit.interval.ms": 200,
            "state.snapshot.interval.ms": HOUR,  # never due within the run
            "state.snapshot.location": str(snapshots),
        },
    )
    sent: list[tuple[str, int]] = []

    def run(events: list[tuple[str, int]]):
        produce(
            kafka.bootstrap_servers,
            input_topic,
            [(p.encode(), json.dumps({"product": p, "value": v}).encode()) for p, v in events],
        )
        sent.extend(events)
        return TopologyRunner(
            "topologies.sales_aggregation:build_topology",
            settings,
            topology_kwargs=kwargs,
            spark=spark,
        ).run()

    first = run(_events(0, 60))
    assert first.records == 60 and first.changelog_records > 0
    # the hosts answered the close once their snapshots were uploaded: no waiting here
    committed = _committed_changelog_offsets(kafka.bootstrap_servers, app_id)
    assert _newest_snapshots(snapshots, PARTITIONS) == committed

    assert wipe_application_state(state_dir, app_id) == PARTITIONS
    second = run(_events(60, 6))
    assert second.records == 6
    assert second.restored == 0  # the snapshots hold every committed write: no tail to replay

    store = read_local_store(state_dir, app_id, STORE, Serdes.string(), Serdes.long())
    totals: Counter[str] = Counter()
    for product, value in sent:
        totals[product] += value
    assert store == dict(totals)
    assert _newest_snapshots(snapshots, PARTITIONS) == _committed_changelog_offsets(
        kafka.bootstrap_servers, app_id
    )
