"""``Serdes``: the factory of serdes for record keys, values and store entries.

The built-in serdes (string, bytes, integer, long, double, json) and the :class:`Serde` type
are :mod:`processor_api.serde`'s; the Schema Registry serdes (Avro, JSON Schema, Protobuf) are
``schemas/``'s, imported when first asked for (they need ``confluent-kafka[schemaregistry]``).
``Serde``, ``SerializationError`` and ``SerdeUnavailableError`` are importable from here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor_api import serde
from processor_api.serde import Serde, SerdeUnavailableError, SerializationError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Serde", "SerdeUnavailableError", "Serdes", "SerializationError"]


class Serdes:
    """Factory of the built-in serdes (Kafka's Java wire formats)."""

    @staticmethod
    def string() -> Serde:
        """UTF-8 text."""
        return serde.STRING

    @staticmethod
    def bytes() -> Serde:
        """Raw bytes, unchanged."""
        return serde.BYTES

    @staticmethod
    def integer() -> Serde:
        """32-bit signed integer, big-endian (Java ``IntegerSerializer``)."""
        return serde.INTEGER

    @staticmethod
    def long() -> Serde:
        """64-bit signed integer, big-endian (Java ``LongSerializer``)."""
        return serde.LONG

    @staticmethod
    def double() -> Serde:
        """64-bit IEEE 754 float, big-endian (Java ``DoubleSerializer``)."""
        return serde.DOUBLE

    @staticmethod
    def json() -> Serde:
        """Any JSON-compatible Python object as compact UTF-8 JSON."""
        return serde.JSON

    @staticmethod
    def avro(
        schema: str | None = None, *, registry: str | Mapping[str, Any] | None = None
    ) -> Serde:
        """Avro with a Confluent Schema Registry; values are dicts.

        With ``schema`` (Avro schema JSON text) serializing registers it under the topic's
        subject (``<topic>-key`` / ``<topic>-value``); without, the serde only deserializes,
        with the writer's schema fetched by id. ``registry`` is a URL or a
        ``SchemaRegistryClient`` config dict; ``None`` takes the run's
        ``schema.registry.*`` settings. Needs ``confluent-kafka[avro,schemaregistry]``.
        """
        from processor_api.schemas.registry_serdes import avro

        return avro(schema, registry)

    @staticmethod
    def json_schema(
        schema: str | None = None, *, registry: str | Mapping[str, Any] | None = None
    ) -> Serde:
        """JSON Schema with a Confluent Schema Registry; values are dicts (see :meth:`avro`)."""
        from processor_api.schemas.registry_serdes import json_schema

        return json_schema(schema, registry)

    @staticmethod
    def protobuf(message_type: Any, *, registry: str | Mapping[str, Any] | None = None) -> Serde:
        """Protobuf messages of ``message_type`` with a Confluent Schema Registry (see
        :meth:`avro`); the schema registered is the message's file descriptor."""
        from processor_api.schemas.registry_serdes import protobuf

        return protobuf(message_type, registry)
