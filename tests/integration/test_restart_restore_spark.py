"""Restarts: a restart reuses the local stores (checkpoint), and a restart
without local stores restores them from the changelog topics."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from processor_api.serdes import Serdes
from processor_api.state.inspect import read_local_store
from processor_api.state.manager import wipe_application_state
from tests.harness.runs import NO_SNAPSHOTS, BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

STORE = "PRODUCT_AGGREGATED_SALES"
PRODUCTS = [f"product{i}" for i in range(1, 7)]


def _events(start: int, count: int) -> list[tuple[str, int]]:
    return [(PRODUCTS[(start + i) % len(PRODUCTS)], 100 + start + i) for i in range(count)]


def _fold(events: list[tuple[str, int]]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for product, value in events:
        totals[product] += value
    return dict(totals)


def test_restart_reuses_local_stores_and_restores_wiped_ones(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"sales-in-{run_id}", f"sales-out-{run_id}"
    app_id = f"restart-{run_id}"
    state_dir = tmp_path / "state"
    kafka.create_topic(input_topic, 3)
    kafka.create_topic(output_topic, 3)
    # threshold 0: one notification per event, carrying the running total of its product
    kwargs = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    settings = settings_for(kafka.bootstrap_servers, app_id, state_dir, config=NO_SNAPSHOTS)
    sent: list[tuple[str, int]] = []

    def run_with(events: list[tuple[str, int]]):
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
                records = out.wait_for(lambda r: len(r) >= len(sent), timeout_s=90, while_alive=run)
                result = run.stop()
        latest = {}
        for key, value, *_ in sorted(records, key=lambda r: (r[2], r[3])):
            latest[key] = value["value"]  # one product = one partition: offset order
        store = read_local_store(state_dir, app_id, STORE, Serdes.string(), Serdes.long())
        return result, records, latest, store

    # run 1: fresh state
    first, records, latest, store = run_with(_events(0, 9))
    assert len(records) == 9 and first.records == 9
    assert latest == store == _fold(sent)
    assert first.restored == 0

    # run 2: same state dir and checkpoint, new input -> local stores used as they are
    second, records, latest, store = run_with(_events(9, 8))
    assert second.records == 8  # only the new events: input positions were committed
    assert len(records) == 17
    assert second.restored == 0
    assert latest == store == _fold(sent)

    # run 3: local stores gone (like run-topology --cleanup) -> restored from the changelog
    assert wipe_application_state(state_dir, app_id) == 3
    assert read_local_store(state_dir, app_id, STORE, Serdes.string(), Serdes.long()) == {}
    third, records, latest, store = run_with(_events(17, 7))
    assert third.records == 7
    assert len(records) == 24
    # every change logged by runs 1 and 2 was replayed: at most one changelog record per
    # product and commit (its last write before the commit), at least one per product written
    for run, events in ((first, _events(0, 9)), (second, _events(9, 8))):
        assert len({p for p, _ in events}) <= run.changelog_records <= len(events)
    assert third.restored == first.changelog_records + second.changelog_records
    assert latest == store == _fold(sent)
