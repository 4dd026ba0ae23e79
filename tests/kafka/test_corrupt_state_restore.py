"""Issue 21: a task's damaged local store is restored through its real changelog partition
on the embedded broker, to exactly what it held before the damage."""

from __future__ import annotations

import functools

import pytest
from structlog.testing import capture_logs

from processor_api.kafka import reader as reader_module
from processor_api.kafka.names import changelog_topic
from processor_api.kafka.producer import DeliveryTracker, make_producer
from tests.harness.corrupt_state import CORRUPTIONS, STORE, task_stores
from tests.harness.topics import uid

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("corruption", ["truncated_sst", "garbage_checkpoint", "other_application"])
def test_a_damaged_store_is_restored_from_its_changelog_to_its_contents_before(
    kafka, tmp_path, corruption
):
    app = uid("corrupt-restore")
    changelog = changelog_topic(app, STORE)
    kafka.create_topic(changelog, 1)
    task_dir = tmp_path / app / "0_0"
    tracker = DeliveryTracker(make_producer(kafka.bootstrap_servers))
    stores = task_stores(task_dir, app)
    stack = stores.stacks[STORE]
    end = 0
    for batch in range(3):  # three committed batches, overwrites and deletes included
        stack.store.put_all([(f"key-{i}", batch * 10_000 + i) for i in range(batch, 3_000, 2)])
        stack.store.delete(f"key-{batch * 3}")
        stack.flush()
        changes = stack.changelog.drain_changes()
        tracker.produce_many(changelog, 0, [(c.key, c.value, c.timestamp) for c in changes])
        tracker.flush_and_check(10)
        end = tracker.acked_end_offsets()[(changelog, 0)]
        stores.commit({STORE: end})
    before = dict(stack.store.all())
    stores.close()

    damaged = CORRUPTIONS[corruption](task_dir)
    read = functools.partial(
        reader_module.read_changelog, kafka.bootstrap_servers, isolation_level="read_committed"
    )
    with capture_logs() as logs:
        stores = task_stores(task_dir, app)
        try:
            assert stores.restore({STORE: end}, read) == {STORE: end}
            assert dict(stores.stacks[STORE].store.all()) == before
        finally:
            stores.close()
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert (warning["event"], warning["task"], warning["file"]) == (
        "corrupt_local_state_wiped",
        "0_0",
        str(damaged),
    )
