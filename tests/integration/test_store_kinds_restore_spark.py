"""Every persistent store kind (key-value, timestamped, window, session, versioned) is restored
from its changelog on Spark after the state directory is lost.

One topology holds a processor per kind, all fed the same records; each forwards what its
store says after the record (running total, total@newest timestamp, the key's windows of the
last 10 s, the merged session, the version valid just before the record). Run 1 processes
half the records, the state directory is deleted, run 2 processes the rest: every key has
records in both runs, so run 2's output is right only if every store came back as it was.
The reference is the same topology in ``TopologyTestDriver`` over all records.
"""

from __future__ import annotations

import random
import shutil
from collections import defaultdict

import pytest

from processor_api import Serdes
from processor_api.spark.runner import TopologyRunner
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import NO_SNAPSHOTS, settings_for
from tests.harness.topics import TopicReader, produce, uid
from tests.integration.topologies_for_tests import STORE_KINDS, build_store_kinds

pytestmark = pytest.mark.integration

TOPOLOGY = "tests.integration.topologies_for_tests:build_store_kinds"
KEYS = [f"user-{i}" for i in range(6)]


def _records(count: int, start_ms: int, seed: int) -> list[tuple[str, int, int]]:
    """``(key, amount, timestamp)``: time moves forward ~400 ms a record, and one record in
    five is up to 3 s late (older sessions to merge, versions to insert into history)."""
    rnd = random.Random(seed)
    records, now = [], start_ms
    for _ in range(count):
        now += rnd.randint(100, 700)
        late = rnd.randint(0, 3000) if rnd.random() < 0.2 else 0
        records.append((rnd.choice(KEYS), rnd.randint(1, 50), now - late))
    return records


def _by_key(pairs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for key, value in pairs:
        out[key].append(value)
    return dict(out)


def _reference(records: list[tuple[str, int, int]]) -> dict[str, list[str]]:
    with TopologyTestDriver(build_store_kinds()) as driver:
        topic = driver.create_input_topic("kinds-input", Serdes.string(), Serdes.long())
        for key, amount, timestamp in records:
            topic.pipe_input(key, amount, timestamp=timestamp)
        out = driver.create_output_topic("kinds-output", Serdes.string(), Serdes.string())
        return _by_key((kv.key, kv.value) for kv in out.read_key_values_to_list())


def test_every_store_kind_is_restored_after_the_state_dir_is_lost(kafka, spark, tmp_path):
    run_id = uid()
    input_topic, output_topic = f"kinds-in-{run_id}", f"kinds-out-{run_id}"
    kafka.create_topic(input_topic, 2)
    kafka.create_topic(output_topic, 2)
    first = _records(60, 1_000_000, seed=1)
    # run 2 goes on where run 1 stopped: its sessions and windows extend run 1's
    second = _records(60, max(t for *_, t in first), seed=2)
    assert {k for k, *_ in first} == {k for k, *_ in second} == set(KEYS)
    state_dir = tmp_path / "state"
    settings = settings_for(
        kafka.bootstrap_servers,
        f"kinds-{run_id}",
        state_dir,
        available_now=True,
        checkpoint_dir=str(tmp_path / "checkpoint"),  # kept: only the local state is lost
        config=NO_SNAPSHOTS,  # restored from the changelogs
    )
    kwargs = {"input_topic": input_topic, "output_topic": output_topic}

    def run(records):
        produce(
            kafka.bootstrap_servers,
            input_topic,
            [(k.encode(), Serdes.long().serialize(a), None, t) for k, a, t in records],
        )
        return TopologyRunner(TOPOLOGY, settings, topology_kwargs=kwargs, spark=spark).run()

    one = run(first)
    assert one.records == len(first) and one.restored == 0
    shutil.rmtree(state_dir)
    two = run(second)
    assert two.records == len(second)
    assert two.restored > 0

    with TopicReader(kafka.bootstrap_servers, output_topic, bytes.decode, bytes.decode) as out:
        records = out.wait_for(
            lambda r: len(r) >= len(STORE_KINDS) * (len(first) + len(second)), timeout_s=60
        )
    ordered = sorted(records, key=lambda r: (r[2], r[3]))  # a key's records: offset order
    seen = _by_key((r[0], r[1]) for r in ordered)
    expected = _reference(first + second)
    for kind in (p.kind for p in STORE_KINDS):
        prefix = f"{kind}|"
        got = {k: [v for v in vs if v.startswith(prefix)] for k, vs in seen.items()}
        want = {k: [v for v in vs if v.startswith(prefix)] for k, vs in expected.items()}
        assert got == want, kind
