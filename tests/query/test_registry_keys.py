"""Keys of stores with Schema Registry key serdes, given as JSON in query URLs (no Spark).

The registry is the REST server of ``tests/harness/schema_registry.py`` (fixture
``schema_registry``), as for the registry serdes' own tests; an unreachable registry is a
loopback port nothing listens on. The driver binds a store's registry key serde as the
application's tasks bind it (subject ``<application>-<store>-changelog-key``, the run's
registry), so a JSON key serializes to the bytes a task wrote: proven against a
``TopologyTestDriver``'s store and ``confluent_kafka``'s own serializers.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from processor_api import Topology
from processor_api.cli.tools import main as processor_api_main
from processor_api.kafka.names import changelog_topic
from processor_api.kafka.partitioner import default_partition
from processor_api.processor import Processor, Record
from processor_api.query import QueryClient, RegistryUnavailableError, TaskUnavailableError
from processor_api.query.errors import BadQueryError
from processor_api.query.errors import RegistryUnavailableError as QueryRegistryUnavailable
from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint, QueryServer
from processor_api.runtime.query_link import TaskStoreReader
from processor_api.schemas import registry_serdes
from processor_api.serde import SerializationError
from processor_api.serdes import Serdes
from processor_api.state import Stores
from processor_api.state.json_entries import json_default
from processor_api.testing import TopologyTestDriver
from tests.harness.schemas import USER_AVRO, USER_JSON_SCHEMA, UserProto
from tests.query.registry_topologies import STORE, USER_KEY_AVRO, build_avro_keyed

APP = "keys-app"
TASKS = ("0_0", "0_1")
CHANGELOG = changelog_topic(APP, STORE)


@pytest.fixture
def dead_registry() -> str:
    """A registry URL nothing answers at (a loopback port just freed), with user info that
    an error must not show."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://user:secret@127.0.0.1:{port}"


def _dead(url: str) -> dict:
    # no retries: the first refused connection is the outage
    return {"url": url, "max.retries": 0}


def _route(topology: Topology, registry: dict | None, store: str = STORE):
    return StoreRoutes(topology, TASKS, application_id=APP, registry=registry).route(store)


def _key_store_topology(key_serde, store: str = "s") -> Topology:
    topology = Topology()
    topology.add_source("in", "in-topic", key_serde=key_serde, value_serde=Serdes.string())
    topology.add_processor("p", _Noop, "in")
    topology.add_state_store(
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store(store), key_serde, Serdes.string()
        ),
        "p",
    )
    return topology


class _Noop(Processor):
    def process(self, record: Record) -> None:
        pass


def test_a_json_key_finds_the_bytes_the_task_wrote(schema_registry):
    url = schema_registry.new_url()
    config = {"application.id": APP, "schema.registry.url": url}
    with TopologyTestDriver(build_avro_keyed("users-in"), config) as driver:
        source = driver.create_input_topic("users-in")
        for i in range(4):
            source.pipe_input({"id": i}, {"id": i, "name": f"user {i}"})
        store = driver.get_key_value_store(STORE)
        route = _route(build_avro_keyed("users-in"), {"url": url})
        data = route.key_bytes('{"id": 3}')
        assert store.bytes_store.get(data) is not None  # the very bytes the task wrote
        assert store.key_serde.deserialize(data) == {"id": 3}
        assert route.key_bytes('{"id": 99}') != data
    # confluent_kafka's own serializer, under the changelog's subject, writes the same bytes
    client = SchemaRegistryClient({"url": url})
    expected = AvroSerializer(client, USER_KEY_AVRO)(
        {"id": 3}, SerializationContext(CHANGELOG, MessageField.KEY)
    )
    assert data == expected
    # and a producer of the input topic with that schema too: the key's task is the record's
    produced = AvroSerializer(client, USER_KEY_AVRO)(
        {"id": 3}, SerializationContext("users-in", MessageField.KEY)
    )
    assert produced == data
    assert route.task_for(data) == TASKS[default_partition(produced, 2)]


def test_a_key_that_does_not_fit_the_schema_is_a_bad_query_naming_store_key_and_field(
    schema_registry,
):
    route = _route(build_avro_keyed(), {"url": schema_registry.new_url()})
    with pytest.raises(BadQueryError) as missing:
        route.key_bytes('{"idd": 7}')
    message = str(missing.value)
    assert f"store {STORE!r}" in message and """key '{"idd": 7}'""" in message
    assert "field 'idd' is not in Avro record 'UserKey' (its fields: id)" in message
    with pytest.raises(BadQueryError, match="no value and no default for id"):
        route.key_bytes("{}")
    with pytest.raises(BadQueryError, match="an integer is required on field id"):
        route.key_bytes('{"id": "seven"}')
    with pytest.raises(BadQueryError, match=r"key_from 'seven' does not fit .*avro"):
        route.key_bytes("seven", "key_from")
    # Avro's encoder would drop a field the schema does not have: named instead
    with pytest.raises(BadQueryError, match="field 'tenant' is not in Avro record 'UserKey'"):
        route.key_bytes('{"id": 7, "tenant": "a"}')


def test_json_schema_and_protobuf_keys_serialize_as_confluent_kafka_does(schema_registry):
    url = schema_registry.new_url()
    client = SchemaRegistryClient({"url": url})
    context = SerializationContext(changelog_topic(APP, "s"), MessageField.KEY)

    json_route = _route(
        _key_store_topology(Serdes.json_schema(USER_JSON_SCHEMA)), {"url": url}, "s"
    )
    assert json_route.key_bytes('{"id": 7, "name": "ann"}') == JSONSerializer(
        USER_JSON_SCHEMA, client
    )({"id": 7, "name": "ann"}, context)
    with pytest.raises(BadQueryError, match="'x' is not of type 'integer'"):
        json_route.key_bytes('{"id": "x", "name": "ann"}')

    proto_route = _route(_key_store_topology(Serdes.protobuf(UserProto)), {"url": url}, "s")
    conf = {"use.deprecated.format": False}
    assert proto_route.key_bytes('{"id": 7, "name": "ann"}') == ProtobufSerializer(
        UserProto, client, conf
    )(UserProto(id=7, name="ann"), context)
    with pytest.raises(BadQueryError, match='no field named "nom"'):
        proto_route.key_bytes('{"id": 7, "nom": "ann"}')
    # a message as the client sends it and an answer renders it: its JSON mapping (int64 as
    # text), which the driver parses back into the same bytes
    text = json.dumps(UserProto(id=7, name="ann"), default=json_default)
    assert json.loads(text) == {"id": "7", "name": "ann"}
    assert proto_route.key_bytes(text) == proto_route.key_bytes('{"id": 7, "name": "ann"}')


def test_a_registry_key_serde_in_a_run_without_a_registry_is_a_bad_query():
    route = _route(build_avro_keyed(), None)
    with pytest.raises(BadQueryError, match=rf"store {STORE!r}: avro serde .* names no registry"):
        route.key_bytes('{"id": 7}')


def test_an_unreachable_registry_answers_503_naming_its_url(dead_registry, capsys):
    shown = dead_registry.replace("user:secret@", "")
    router = HostRouter("127.0.0.1")
    routes = StoreRoutes(
        build_avro_keyed(), TASKS, application_id=APP, registry=_dead(dead_registry)
    )
    server = QueryServer(QueryEndpoint(routes, router), "127.0.0.1", 0, None)
    base = f"http://127.0.0.1:{server.port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(f"{base}/stores/{STORE}/keys/%7B%22id%22%3A7%7D", timeout=30)
        assert (http.value.code, http.value.headers["Retry-After"]) == (503, "1")
        body = json.loads(http.value.read())
        assert body["code"] == "registry_unavailable"
        assert f"schema registry {shown} did not answer" in body["error"]
        assert f"store {STORE!r}" in body["error"] and "secret" not in body["error"]
        # the client's error is a TaskUnavailableError: ask again later
        with pytest.raises(RegistryUnavailableError) as raised:
            QueryClient(base).get(STORE, {"id": 7})
        assert isinstance(raised.value, TaskUnavailableError)
        assert raised.value.retry_after_s == 1.0 and shown in str(raised.value)
        # the command: not available now (exit 3), naming the registry
        capsys.readouterr()
        assert processor_api_main(["query", "--url", base, STORE, '{"id": 7}']) == 3
        assert f"schema registry {shown} did not answer" in capsys.readouterr().err
    finally:
        server.close()
        router.close()


def test_a_worker_whose_registry_does_not_answer_answers_503(dead_registry, tmp_path):
    builder = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store(STORE),
        Serdes.avro(USER_KEY_AVRO, registry=_dead(dead_registry)),
        Serdes.avro(USER_AVRO, registry=_dead(dead_registry)),
    ).bound_to(CHANGELOG)
    stack = builder.build(tmp_path)
    reader = TaskStoreReader("0_0", {STORE: stack}, lambda name: stack.store, lambda name: 0)
    # framed with a schema id the worker's client has not seen: it must ask the registry
    key = base64.b64encode(b"\x00" + (1).to_bytes(4, "big") + b"\x0e").decode()
    status, body = reader.answer({"store": STORE, "kind": "key", "key": key})
    assert status == 503 and body["code"] == "registry_unavailable"
    assert dead_registry.replace("user:secret@", "") in body["error"]
    assert QueryRegistryUnavailable.code == body["code"]


def test_only_an_outage_is_registry_unavailable(schema_registry, dead_registry):
    framed = b"\x00" + (424242).to_bytes(4, "big") + b"\x0e"
    # the registry answers 404 for an id it does not have: bad data, not an outage
    known = Serdes.avro(USER_KEY_AVRO).for_topic("t", True, {"url": schema_registry.new_url()})
    with pytest.raises(SerializationError) as bad:
        known.deserialize(framed)
    assert not isinstance(bad.value, registry_serdes.RegistryUnavailableError)
    assert "schema id 424242" in str(bad.value)
    # nothing answers: an outage, naming the registry without its credentials
    dead = Serdes.avro(USER_KEY_AVRO).for_topic("t", True, _dead(dead_registry))
    for call in (lambda: dead.deserialize(framed), lambda: dead.serialize({"id": 1})):
        with pytest.raises(registry_serdes.RegistryUnavailableError) as down:
            call()
        assert down.value.url == dead_registry.replace("user:secret@", "")
        assert "secret" not in str(down.value) and "subject 't-key'" in str(down.value)


@pytest.mark.parametrize("whose", ["the run's", "the serde's own"])
def test_a_registry_that_never_answers_is_given_up_on_by_the_routing_deadline(whose):
    """``confluent_kafka``'s client waits without a timeout unless told: the routing's
    defaults (``REGISTRY_DEFAULTS``) end the wait, so the HTTP thread answers 503."""
    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        if whose == "the run's":
            route = _route(build_avro_keyed(), {"url": url})
        else:
            route = _route(build_avro_keyed(registry=url), None)
        outcome: list[BaseException] = []

        def read() -> None:
            try:
                route.key_bytes('{"id": 7}')
            except BaseException as exc:  # noqa: BLE001 - what the thread saw, checked below
                outcome.append(exc)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(60)  # far beyond the 5 s deadline; without it the read never ends
        assert not thread.is_alive(), "the key read still waits for the registry"
        (error,) = outcome
        assert isinstance(error, QueryRegistryUnavailable)
        assert f"schema registry {url} did not answer" in str(error)
    finally:
        silent.close()


def test_a_key_waiting_for_its_registry_holds_up_no_other_request():
    """Serializing a registry key may wait for the registry (here: one that never answers,
    given up on after the run's 1 s timeout); it waits on a thread of its own, so the query
    loop answers another client meanwhile, and the waiting read then answers 503."""
    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    router = HostRouter("127.0.0.1")
    routes = StoreRoutes(
        build_avro_keyed(), TASKS, application_id=APP, registry={"url": url, "timeout": 1}
    )
    server = QueryServer(QueryEndpoint(routes, router), "127.0.0.1", 0, None)
    address = ("127.0.0.1", server.port)
    try:
        with (
            socket.create_connection(address, 10) as waiting,
            socket.create_connection(address, 10) as other,
        ):
            waiting.sendall(
                f"GET /stores/{STORE}/keys/%7B%22id%22%3A7%7D HTTP/1.1\r\n\r\n".encode()
            )
            other.sendall(b"GET /stores HTTP/1.1\r\n\r\n")
            assert other.recv(65536).startswith(b"HTTP/1.1 200 ")
            waiting.setblocking(False)
            with pytest.raises(BlockingIOError):  # still waiting for the registry
                waiting.recv(65536)
            waiting.settimeout(30)
            answer = waiting.recv(65536)
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert b"registry_unavailable" in answer and url.encode() in answer
    finally:
        server.close()
        router.close()
        silent.close()
