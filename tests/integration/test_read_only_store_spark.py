"""A read-only state store on Spark: filled by its processor from its topic, and restored from
that topic (its changelog: no changelog topic is created) up to the committed input position
after the local state is lost."""

from __future__ import annotations

import pytest

from processor_api.errors import MissingTopicError
from processor_api.kafka.admin import topic_partitions
from processor_api.kafka.names import changelog_topic
from processor_api.state.manager import wipe_application_state
from tests.harness.runs import NO_SNAPSHOTS, BackgroundRun, settings_for
from tests.harness.topics import TopicReader, produce, uid

pytestmark = pytest.mark.integration

TOPOLOGY = "tests.integration.topologies_for_tests:build_read_only_lookup"


def test_read_only_store_is_restored_from_its_source_topic(kafka, spark, tmp_path):
    run_id = uid()
    prices, orders, output = f"prices-{run_id}", f"orders-{run_id}", f"priced-{run_id}"
    app_id, state = f"read-only-{run_id}", tmp_path / "state"
    for topic in (prices, orders, output):
        kafka.create_topic(topic, 2)
    # co-partitioned by hand: product i lives in partition i % 2 of both topics
    produce(
        kafka.bootstrap_servers,
        prices,
        [(f"p{i}".encode(), f"{10 * i}".encode(), i % 2) for i in range(6)] + [(None, b"x", 0)],
    )
    settings = settings_for(kafka.bootstrap_servers, app_id, state, config=NO_SNAPSHOTS)
    kwargs = {"prices_topic": prices, "orders_topic": orders, "output_topic": output}

    def run_until(count: int):
        with TopicReader(kafka.bootstrap_servers, output, bytes.decode, bytes.decode) as out:
            with BackgroundRun(TOPOLOGY, settings, spark=spark, topology_kwargs=kwargs) as run:
                out.wait_for(lambda r: len(r) >= count, timeout_s=60, while_alive=run)
                result = run.stop()
        return dict(out.pairs()), result

    produce(kafka.bootstrap_servers, orders, [(f"p{i}".encode(), b"o1", i % 2) for i in range(6)])
    priced, first = run_until(6)
    assert priced == {f"p{i}": f"o1@{10 * i}" for i in range(6)}
    assert first.restored == 0

    assert wipe_application_state(state, app_id) == 2
    produce(kafka.bootstrap_servers, orders, [(f"p{i}".encode(), b"o2", i % 2) for i in range(6)])
    priced, second = run_until(12)
    assert priced == {f"p{i}": f"o2@{10 * i}" for i in range(6)}
    # every record of the prices topic up to the committed position is read back (the
    # keyless one is skipped, as it is not a store entry)
    assert second.restored == 7
    with pytest.raises(MissingTopicError, match="do not exist"):  # no changelog topic was created
        topic_partitions(kafka.bootstrap_servers, [changelog_topic(app_id, "prices")])
