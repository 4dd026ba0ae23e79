"""Schemas, a Protobuf message type and a topology with Schema Registry serdes, for tests.

The Protobuf type is built from a descriptor at import (no ``protoc`` here), so Spark's Python
workers get the same class by importing this module.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from processor_api import Topology
from processor_api.processor import Processor, Record
from processor_api.serdes import Serdes
from processor_api.state import Stores

USER_AVRO = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "tests",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
    }
)
USER_JSON_SCHEMA = json.dumps(
    {
        "type": "object",
        "title": "User",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
    }
)


def _user_message_type() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(
        name="tests/user.proto", package="tests", syntax="proto3"
    )
    message = proto.message_type.add(name="User")
    message.field.add(name="id", number=1, type=3, label=1)  # int64
    message.field.add(name="name", number=2, type=9, label=1)  # string
    pool = descriptor_pool.Default()
    try:
        descriptor = pool.FindMessageTypeByName("tests.User")
    except KeyError:
        pool.Add(proto)
        descriptor = pool.FindMessageTypeByName("tests.User")
    return message_factory.GetMessageClass(descriptor)


UserProto = _user_message_type()


def confluent_serdes(kind: str, client: Any) -> tuple[Any, Any]:
    """``confluent_kafka``'s own serializer and deserializer of the user type of ``kind``."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    if kind == "avro":
        return AvroSerializer(client, USER_AVRO), AvroDeserializer(client)
    if kind == "json_schema":
        return JSONSerializer(USER_JSON_SCHEMA, client), JSONDeserializer(
            None, schema_registry_client=client
        )
    conf = {"use.deprecated.format": False}
    return (
        ProtobufSerializer(UserProto, client, conf),
        ProtobufDeserializer(UserProto, conf, schema_registry_client=client),
    )


def user_of(kind: str, user_id: int, name: str) -> Any:
    """A user as the serdes of ``kind`` take it (dict, or message for Protobuf)."""
    return UserProto(id=user_id, name=name) if kind == "protobuf" else {"id": user_id, "name": name}


def plain(kind: str, value: Any) -> Any:
    """A user value as a dict whatever ``kind`` (None stays None)."""
    if kind == "protobuf" and value is not None:
        return {"id": value.id, "name": value.name}
    return value


def serdes_of(kind: str, registry: Any = None) -> Any:
    """The value serde of ``kind`` (``avro``, ``json_schema``, ``protobuf``)."""
    if kind == "avro":
        return Serdes.avro(USER_AVRO, registry=registry)
    if kind == "json_schema":
        return Serdes.json_schema(USER_JSON_SCHEMA, registry=registry)
    return Serdes.protobuf(UserProto, registry=registry)


class _RenameAndCount(Processor):
    """Upper-cases the user's name (the directory's name for the key, if there is a
    directory and it has one), keeps the last user per key in the store, forwards it."""

    def __init__(self, kind: str, directory: bool = False) -> None:
        self.kind = kind
        self.directory = directory

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("users")
        self.names = context.get_state_store("directory") if self.directory else None

    def process(self, record: Record) -> None:
        user = record.value
        listed = self.names.get(record.key) if self.names is not None else None
        if self.kind == "protobuf":
            renamed: Any = UserProto(id=user.id, name=user.name.upper())
        else:
            name = listed["name"] if listed is not None else user["name"]
            renamed = {"id": user["id"], "name": name.upper()}
        self.store.put(record.key, renamed)
        self.context.forward(record.with_value(renamed))


class _KeepListed(Processor):
    """Keeps each directory record in the global store ``directory``."""

    def init(self, context: Any) -> None:
        self.store = context.get_state_store("directory")

    def process(self, record: Record) -> None:
        self.store.put(record.key, record.value)


def build_topology(
    kind: str = "avro",
    registry: Any = None,
    input_topic: str = "users",
    output_topic: str = "users-renamed",
    directory_topic: str | None = None,
) -> Topology:
    """users (string key, registry value) -> rename -> users-renamed; store ``users``.

    With ``directory_topic`` (Avro only), a global store ``directory`` of users filled from
    that topic gives the names: its serde is bound to ``<directory_topic>-value``.
    """
    value = serdes_of(kind, registry)
    topology = Topology()
    topology.add_source("in", input_topic, key_serde=Serdes.string(), value_serde=value)
    directory = directory_topic is not None
    topology.add_processor("rename", lambda: _RenameAndCount(kind, directory), "in")
    if directory_topic is not None:
        listed = serdes_of(kind, registry)
        topology.add_global_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("directory"), Serdes.string(), listed
            ).with_logging_disabled(),
            "directory-source",
            Serdes.string(),
            listed,
            directory_topic,
            "keep-listed",
            _KeepListed,
        )
    topology.add_state_store(
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("users"), Serdes.string(), value
        ),
        "rename",
    )
    topology.add_sink("out", output_topic, "rename", key_serde=Serdes.string(), value_serde=value)
    return topology
