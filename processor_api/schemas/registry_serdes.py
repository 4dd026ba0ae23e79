"""Schema Registry serdes (Avro, JSON Schema, Protobuf) over ``confluent_kafka.schema_registry``.

The wire format (magic byte 0, 4-byte schema id, payload) and the registry protocol are
``confluent_kafka``'s: bytes written here are read by its deserializers and the other way
round. A registry serde needs the topic and the side (key or value) of the bytes for its
subject (Confluent's TopicNameStrategy, ``<topic>-key`` / ``<topic>-value``), so the runtime
binds it once per topic with :meth:`RegistrySerde.for_topic` (sources, sinks, changelogs,
repartition topics, test topics); a bound serde's per-record path is one call into
``confluent_kafka``'s (de)serializer with a prebuilt context (for Avro, into fastavro once
confluent_kafka has handled a subject's or schema id's first record: ``avro_fast``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from processor_api.errors import ConfigError
from processor_api.schemas.registry import client_config, client_for
from processor_api.serde import Serde, SerdeUnavailableError, SerializationError

MakeSerializer = Callable[[Any], Callable[[Any, Any], bytes]]
MakeDeserializer = Callable[[Any], Callable[[bytes, Any], Any]]
#: Turns a plain (JSON) value into what the serde serializes (Protobuf: a dict into the
#: message); ``None``: the plain value is what it serializes (Avro and JSON Schema dicts).
FromPlain = Callable[[Any], Any]


class RegistryUnavailableError(SerdeUnavailableError):
    """The Schema Registry did not answer (connection refused or reset, a timeout, a 5xx,
    408 or 429 answer after the client's retries): nothing is wrong with the data; ask
    again later. ``url`` is the registry's (without credentials)."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url


def registry_down(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is the registry not answering:
    a transport error of the registry client's HTTP library, or an answer with a status the
    client retries (5xx, 408, 429). A 4xx naming a schema or subject is no outage."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SchemaRegistryError):
            status = current.http_status_code
            return status >= 500 or status in (408, 429)
        if any(
            cls.__name__ == "TransportError" and cls.__module__.startswith("httpx")
            for cls in type(current).__mro__
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def public_url(config: Mapping[str, Any]) -> str:
    """The registry URL(s) of a client config, without any user:password part."""
    urls = str(config.get("url", ""))
    return ",".join(re.sub(r"//[^/@]*@", "//", url.strip()) for url in urls.split(","))


def _frozen(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


class RegistrySerde(Serde):
    """A Schema Registry serde not yet bound to a topic (what ``Serdes.avro()`` etc. return).

    ``registry`` is the serde's own registry (URL or client config dict) or ``None`` for the
    run's ``schema.registry.*`` settings. Without a writer schema (``make_serializer`` None)
    the serde only deserializes.
    """

    __slots__ = (
        "format",
        "from_plain",
        "_registry",
        "_make_ser",
        "_make_de",
        "_bound",
        "_codecs",
        "_lock",
    )
    topic_aware = True

    def __init__(
        self,
        fmt: str,
        registry: str | Mapping[str, Any] | None,
        make_serializer: MakeSerializer | None,
        make_deserializer: MakeDeserializer,
        from_plain: FromPlain | None = None,
    ) -> None:
        super().__init__(self._unbound, self._unbound, fmt)
        self.format = fmt
        #: A plain (JSON) value as this serde serializes it (None: as it is); what turns a
        #: key given in a query's URL into the store's key type.
        self.from_plain = from_plain
        self._registry = None if registry is None else client_config(registry)
        self._make_ser = make_serializer
        self._make_de = make_deserializer
        self._bound: dict[tuple, BoundRegistrySerde] = {}
        self._codecs: dict[int, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    @property
    def registry(self) -> dict[str, Any] | None:
        """The serde's own registry (``SchemaRegistryClient`` config), or ``None``: the run's."""
        return self._registry

    def with_client_defaults(self, defaults: Mapping[str, Any]) -> RegistrySerde:
        """This serde with the registry client settings ``defaults`` where its own registry
        gives none (itself when it names no registry: the run's settings are used, to which
        the caller adds its defaults). A new serde, with clients of its own."""
        if self._registry is None or defaults.keys() <= self._registry.keys():
            return self
        return RegistrySerde(
            self.format,
            {**defaults, **self._registry},
            self._make_ser,
            self._make_de,
            self.from_plain,
        )

    def __reduce__(self) -> tuple:
        # a run ships a Topology object to its executors pickled: without the lock and the
        # clients (not picklable), which each process makes anew
        return (
            RegistrySerde,
            (self.format, self._registry, self._make_ser, self._make_de, self.from_plain),
        )

    def _unbound(self, _: Any) -> Any:
        raise SerializationError(
            f"{self.format} serde is not bound to a topic: the runtime binds it to the topic "
            "it reads or writes; by hand call serde.for_topic(topic, is_key=...)"
        )

    def for_topic(
        self, topic: str, is_key: bool, registry: Mapping[str, Any] | None = None
    ) -> BoundRegistrySerde:
        """This serde for ``topic``'s keys or values: subject ``<topic>-key``/``-value``.

        ``registry`` is the run's registry settings, used when the serde names none.
        """
        config = self._registry if self._registry is not None else registry
        if not config:
            raise ConfigError(
                f"{self.format} serde for topic {topic!r} names no registry and the run has "
                "no schema.registry.url (give registry=... or --config schema.registry.url=...)"
            )
        key = (topic, is_key, _frozen(config))
        bound = self._bound.get(key)
        if bound is None:
            with self._lock:
                client = client_for(config)
                codecs = self._codecs.get(id(client))
                if codecs is None:
                    serializer = self._make_ser(client) if self._make_ser is not None else None
                    codecs = self._codecs[id(client)] = (serializer, self._make_de(client))
                bound = self._bound[key] = BoundRegistrySerde(
                    self.format,
                    topic,
                    is_key,
                    codecs[0],
                    codecs[1],
                    from_plain=self.from_plain,
                    registry_url=public_url(config),
                )
        return bound

    def __repr__(self) -> str:
        return f"Serde({self.format})"


class BoundRegistrySerde(Serde):
    """A registry serde bound to one topic and side: what sources and sinks call per record."""

    __slots__ = ("topic", "is_key", "subject", "from_plain", "registry_url", "_ser", "_de", "_ctx")

    def __init__(
        self,
        fmt: str,
        topic: str,
        is_key: bool,
        serializer: Callable[[Any, Any], bytes] | None,
        deserializer: Callable[[bytes, Any], Any],
        from_plain: FromPlain | None = None,
        registry_url: str = "",
    ) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        super().__init__(self._serialize, self._deserialize, fmt)
        self.topic = topic
        self.is_key = is_key
        self.subject = f"{topic}-{'key' if is_key else 'value'}"
        self.from_plain = from_plain
        #: The registry's URL, without credentials (what an outage names).
        self.registry_url = registry_url
        self._ser = serializer
        self._de = deserializer
        self._ctx = SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE)

    def for_topic(
        self, topic: str, is_key: bool, registry: Mapping[str, Any] | None = None
    ) -> Serde:
        """Bound already: itself for its own topic and side."""
        if topic == self.topic and is_key == self.is_key:
            return self
        raise SerializationError(
            f"{self.name} serde bound to subject {self.subject!r} cannot be used for topic "
            f"{topic!r} ({'key' if is_key else 'value'})"
        )

    def serialize(self, obj: Any) -> bytes | None:
        """Serialize ``obj`` (registering the schema under the subject if new)."""
        if obj is None:
            return None
        serializer = self._ser
        if serializer is None:
            raise SerializationError(
                f"{self.name} serde without a schema only deserializes (subject {self.subject!r})"
            )
        try:
            return serializer(obj, self._ctx)
        except Exception as exc:
            if registry_down(exc):
                raise self._unavailable(exc) from exc
            raise SerializationError(
                f"{self.name} serde cannot serialize {type(obj).__name__} for subject "
                f"{self.subject!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def deserialize(self, data: bytes | None) -> Any:
        """Deserialize with the writer's schema, fetched by id from the registry (cached)."""
        if data is None:
            return None
        try:
            return self._de(data, self._ctx)
        except Exception as exc:
            if registry_down(exc):
                raise self._unavailable(exc) from exc
            raise SerializationError(self._describe(data, exc)) from exc

    def _unavailable(self, exc: Exception) -> RegistryUnavailableError:
        return RegistryUnavailableError(
            f"schema registry {self.registry_url} did not answer for subject "
            f"{self.subject!r} ({self.name} serde): {type(exc).__name__}: {exc}",
            self.registry_url,
        )

    def _describe(self, data: bytes, exc: Exception) -> str:
        # The header is read only to name what failed; confluent_kafka did the decoding.
        if len(data) < 5 or data[0] != 0:
            found = f"0x{data[0]:02x}" if data else "no byte"
            header = f"magic byte {found}, expected 0x00: not Schema Registry framing"
        else:
            header = f"schema id {int.from_bytes(data[1:5], 'big')}"
        return (
            f"{self.name} serde cannot deserialize {len(data)} bytes of subject "
            f"{self.subject!r} ({header}): {type(exc).__name__}: {exc}"
        )

    def _serialize(self, obj: Any) -> bytes:  # pragma: no cover - serialize() overrides
        return self.serialize(obj)  # type: ignore[return-value]

    def _deserialize(self, data: bytes) -> Any:  # pragma: no cover - deserialize() overrides
        return self.deserialize(data)

    def __repr__(self) -> str:
        return f"Serde({self.name}, subject={self.subject!r})"


def _serializer_conf() -> dict[str, Any]:
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    # TopicNameStrategy named explicitly: no registry lookups of subject associations
    return {"subject.name.strategy": topic_subject_name_strategy}


def avro(schema: str | None, registry: str | Mapping[str, Any] | None) -> RegistrySerde:
    """An Avro serde (values are dicts); see ``Serdes.avro``."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    from processor_api.schemas.avro_fast import FastAvroDeserializer, FastAvroSerializer

    def make_ser(client: Any) -> Any:
        assert schema is not None  # made only for a serde given a schema (below)
        return FastAvroSerializer(AvroSerializer(client, schema, conf=_serializer_conf()), schema)

    def make_de(client: Any) -> Any:
        return FastAvroDeserializer(AvroDeserializer(client), client)

    def from_plain(obj: Any) -> Any:
        # Avro's encoders skip fields a record schema does not have; a key given by hand
        # with one is a mistake (a typo, another schema) to name, not to drop silently.
        if schema is not None:
            parsed = json.loads(schema)
            problem = _unknown_avro_field(parsed, obj, _avro_names(parsed, {}, None), "")
            if problem is not None:
                raise SerializationError(problem)
        return obj

    return RegistrySerde("avro", registry, make_ser if schema else None, make_de, from_plain)


def _avro_names(schema: Any, names: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """Every named type of an Avro schema (JSON), by full and by short name."""
    if isinstance(schema, list):
        for branch in schema:
            _avro_names(branch, names, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            name = str(schema["name"])
            space = schema.get("namespace", namespace)
            if "." in name:
                full, space = name, name.rpartition(".")[0]
            else:
                full = f"{space}.{name}" if space else name
            names[full] = names[full.rpartition(".")[2]] = schema
            for field in schema.get("fields", ()):
                _avro_names(field.get("type"), names, space)
        elif kind == "array":
            _avro_names(schema.get("items"), names, namespace)
        elif kind == "map":
            _avro_names(schema.get("values"), names, namespace)
        elif isinstance(kind, dict | list):
            _avro_names(kind, names, namespace)
    return names


def _unknown_avro_field(schema: Any, datum: Any, names: dict[str, Any], path: str) -> str | None:
    """What of ``datum`` (a plain value) names a field its Avro ``schema`` has no place
    for, or None. Types and missing fields are left to the encoder, which names them."""
    if isinstance(schema, str):
        schema = names.get(schema, schema)
    if isinstance(schema, list):
        if not isinstance(datum, dict):
            return None
        branches = [names.get(b, b) if isinstance(b, str) else b for b in schema]
        records = [
            b for b in branches if isinstance(b, dict) and b.get("type") in ("record", "error")
        ]
        if not records or any(isinstance(b, dict) and b.get("type") == "map" for b in branches):
            return None
        problems = [_unknown_avro_field(r, datum, names, path) for r in records]
        return None if None in problems else problems[0]
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, dict | list) or (isinstance(kind, str) and kind in names):
        return _unknown_avro_field(kind, datum, names, path)  # {"type": <a schema>}
    if kind in ("record", "error") and isinstance(datum, dict):
        fields = {str(f["name"]): f.get("type") for f in schema.get("fields", ())}
        unknown = sorted(str(k) for k in datum if k not in fields)
        if unknown:
            where = f" in {path}" if path else ""
            return (
                f"field {', '.join(repr(k) for k in unknown)}{where} is not in Avro record "
                f"{schema.get('name')!r} (its fields: {', '.join(fields) or 'none'})"
            )
        for name, value in datum.items():
            problem = _unknown_avro_field(fields[name], value, names, f"{path}.{name}".lstrip("."))
            if problem is not None:
                return problem
    elif kind == "array" and isinstance(datum, list):
        for index, item in enumerate(datum):
            problem = _unknown_avro_field(schema.get("items"), item, names, f"{path}[{index}]")
            if problem is not None:
                return problem
    elif kind == "map" and isinstance(datum, dict):
        for key, value in datum.items():
            problem = _unknown_avro_field(schema.get("values"), value, names, f"{path}[{key!r}]")
            if problem is not None:
                return problem
    return None


def json_schema(schema: str | None, registry: str | Mapping[str, Any] | None) -> RegistrySerde:
    """A JSON Schema serde (values are dicts); see ``Serdes.json_schema``."""
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    def make_ser(client: Any) -> Any:
        return JSONSerializer(schema, client, conf=_serializer_conf())

    def make_de(client: Any) -> Any:
        return JSONDeserializer(None, schema_registry_client=client)

    return RegistrySerde("json_schema", registry, make_ser if schema else None, make_de)


def protobuf(message_type: Any, registry: str | Mapping[str, Any] | None) -> RegistrySerde:
    """A Protobuf serde for ``message_type`` (values are messages); see ``Serdes.protobuf``."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    def make_ser(client: Any) -> Any:
        conf = {**_serializer_conf(), "use.deprecated.format": False}
        return ProtobufSerializer(message_type, client, conf=conf)

    def make_de(client: Any) -> Any:
        conf = {"use.deprecated.format": False}
        return ProtobufDeserializer(message_type, conf, schema_registry_client=client)

    def from_plain(obj: Any) -> Any:
        if not isinstance(obj, Mapping):
            return obj
        from google.protobuf import json_format

        return json_format.ParseDict(obj, message_type())

    return RegistrySerde("protobuf", registry, make_ser, make_de, from_plain)
