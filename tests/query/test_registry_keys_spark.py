"""A store keyed by an Avro record, read by key against a running application (local Spark,
the embedded broker, the test registry server): the key is given as JSON (``{"id": 3}``), the
driver serializes it with the store's key serde bound to the run's registry, and the answer
is the value ``TopologyTestDriver`` holds after the same input, key and value as JSON."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor_api.cli.tools import main as processor_api_main
from processor_api.kafka.partitioner import default_partition
from processor_api.query import BadQueryError, QueryClient, TaskUnavailableError
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.schemas import USER_AVRO
from tests.harness.scrape import wait_for
from tests.harness.topics import produce, uid
from tests.query.registry_topologies import STORE, USER_KEY_AVRO, build_avro_keyed

pytestmark = pytest.mark.integration

TOPOLOGY = "tests.query.registry_topologies:build_avro_keyed"
PARTITIONS = 2
BASE_MS = 1_700_000_000_000
#: (key id, user name): three records for ids 0-5, the last one wins the name
RECORDS = [(i % 6, f"user {i}") for i in range(18)]


def _all_ready(client: QueryClient, expected: dict[int, dict]) -> bool | None:
    """True once every key's live value is the expected one (None while not, or while a
    task is not available yet)."""
    try:
        got = {e["key"]["id"]: e["value"] for e in client.all(STORE)}
    except TaskUnavailableError:
        return None
    return True if got == expected else None


def test_a_json_key_of_an_avro_keyed_store_answers_the_test_drivers_value(
    kafka, spark, schema_registry, tmp_path, capsys
):
    run_id = uid()
    app_id, topic = f"avrokey{run_id}", f"avrokey-in-{run_id}"
    registry = schema_registry.new_url()
    kafka.create_topic(topic, PARTITIONS)
    client = SchemaRegistryClient({"url": registry})
    key_ser = AvroSerializer(client, USER_KEY_AVRO)
    value_ser = AvroSerializer(client, USER_AVRO)
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    rows = []
    for n, (user_id, name) in enumerate(RECORDS):
        key = key_ser({"id": user_id}, key_ctx)
        value = value_ser({"id": user_id, "name": name}, value_ctx)
        rows.append((key, value, default_partition(key, PARTITIONS), BASE_MS + n))
    produce(kafka.bootstrap_servers, topic, rows)

    with TopologyTestDriver(build_avro_keyed(topic), {"schema.registry.url": registry}) as driver:
        pipe = driver.create_input_topic(topic)
        for n, (user_id, name) in enumerate(RECORDS):
            pipe.pipe_input({"id": user_id}, {"id": user_id, "name": name}, BASE_MS + n)
        expected = {kv.key["id"]: kv.value for kv in driver.get_key_value_store(STORE).all()}
    assert expected[3] == {"id": 3, "name": "USER 15", "records": 3}

    settings = settings_for(
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        epoch_interval_s=600.0,
        query_port=0,
        config={"commit.interval.ms": "200", "schema.registry.url": registry},
    )
    run = BackgroundRun(TOPOLOGY, settings, spark=spark, topology_kwargs={"input_topic": topic})
    with run:
        port = wait_for("the query port", lambda: run.runner.query_port, alive=run)
        url = f"http://127.0.0.1:{port}"
        queries = QueryClient(url)
        wait_for("every key in the store", lambda: _all_ready(queries, expected), alive=run)

        for user_id in (3, 4):
            entry = queries.get(STORE, {"id": user_id})
            assert entry is not None
            assert (entry["key"], entry["value"]) == ({"id": user_id}, expected[user_id])
            partition = default_partition(key_ser({"id": user_id}, key_ctx), PARTITIONS)
            assert entry["task"] == f"0_{partition}"
            committed = queries.get(STORE, {"id": user_id}, committed=True)
            assert committed is not None and committed["value"] == expected[user_id]
        assert queries.get(STORE, {"id": 77}) is None

        # a key that does not fit the key schema: 400 naming the store, the key and the field
        with pytest.raises(BadQueryError) as bad:
            queries.get(STORE, {"user": 3})
        assert f"store {STORE!r}" in str(bad.value)
        assert """key '{"user": 3}'""" in str(bad.value)
        assert "field 'user' is not in Avro record 'UserKey' (its fields: id)" in str(bad.value)

        # the command, for people: the key as JSON text
        capsys.readouterr()
        assert processor_api_main(["query", "--url", url, STORE, '{"id": 3}']) == 0
        assert json.loads(capsys.readouterr().out)["value"] == expected[3]
        run.stop()
