"""Which task holds a key of a store: Kafka Streams' ``queryMetadataForKey``.

A store belongs to one sub-topology, whose task ``<sub>_<p>`` holds the keys of input
partition ``p``. A key's partition is the one Java's default partitioner (and librdkafka's
``murmur2_random``) gives its bytes in the store's key serde, as for a record keyed by it.

A key serde whose bytes depend on the topic (a Schema Registry serde) is bound as the
application's tasks bind it: to the store's changelog topic (subject ``<changelog>-key``),
with the run's ``schema.registry.*`` settings, so a key given as JSON in a URL serializes to
the bytes the task wrote (``read-store`` binds it the same way). The registry gives a schema
one id in every subject, so these are also the bytes of a producer that wrote the input
topic's keys with the same schema: the partition is the record's.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from processor_api.errors import ConfigError
from processor_api.kafka.names import changelog_topic
from processor_api.kafka.partitioner import default_partition
from processor_api.logging import get_logger
from processor_api.query.errors import BadQueryError, RegistryUnavailableError, UnknownStoreError
from processor_api.query.position import PARAMETER, PositionBound
from processor_api.runtime.job import parse_task_id
from processor_api.schemas import registry_serdes
from processor_api.schemas.registry import client_config
from processor_api.serde import Serde
from processor_api.state.builder import StoreBuilder
from processor_api.state.json_entries import plain_key
from processor_api.topology import Topology

_log = get_logger("processor_api.query_routing")

#: The registry client settings of the driver's key serdes where the run's (or the serde's)
#: give none: ``confluent_kafka``'s client waits without a timeout by default, and retries
#: with waits of seconds, which would hold a query's HTTP thread while a registry does not
#: answer; a 503 within the timeout lets the caller ask again (``Retry-After``).
REGISTRY_DEFAULTS: dict[str, Any] = {"timeout": 5, "max.retries": 0}


@dataclass(frozen=True)
class StoreRoute:
    """A queryable store: its builder and its tasks, by partition."""

    name: str
    builder: StoreBuilder
    tasks: tuple[str, ...]
    #: The source topics of the store's sub-topology (what a position bound may name).
    inputs: tuple[str, ...] = ()
    #: The key serde as the store's tasks use it (a registry serde bound to the changelog
    #: topic and the run's registry); None: the builder's own.
    key_serde: Serde | None = None
    #: Why the key serde could not be bound (a registry serde in a run without a registry):
    #: what a read by key answers (400).
    key_serde_error: str | None = None

    @property
    def kind(self) -> str:
        """The store's kind (``key-value``, ``window``, ...)."""
        return self.builder.kind

    @property
    def keys_need_registry(self) -> bool:
        """Whether serializing a key may ask a Schema Registry (a topic-aware key serde)."""
        return self.key_serde is not None

    def key_bytes(self, text: str, what: str = "key") -> bytes:
        """``text`` as ``read-store`` takes keys (text for a string key serde, else JSON),
        serialized with the store's key serde as its tasks serialize it.

        ``BadQueryError`` naming the store, the key and what did not fit when the serde
        refuses it; ``RegistryUnavailableError`` (503) naming the registry's URL when the
        store's Schema Registry does not answer.
        """
        if self.key_serde_error is not None:
            raise BadQueryError(f"store {self.name!r}: {self.key_serde_error}")
        serde = self.key_serde if self.key_serde is not None else self.builder.key_serde
        name = getattr(serde, "name", "custom")
        key = plain_key(text, serde)
        try:
            from_plain = getattr(serde, "from_plain", None)
            if from_plain is not None:
                key = from_plain(key)
            data = serde.serialize(key)
        except registry_serdes.RegistryUnavailableError as exc:
            _log.warning(
                "query_registry_unavailable", store=self.name, registry=exc.url, error=str(exc)
            )
            raise RegistryUnavailableError(
                f"store {self.name!r}: {what} {text!r} could not be serialized: {exc}", 1
            ) from None
        except Exception as exc:  # noqa: BLE001 - any other serde failure is a bad key
            raise BadQueryError(
                f"{what} {text!r} does not fit the key serde ({name}) of store {self.name!r}: {exc}"
            ) from None
        if data is None:
            raise BadQueryError(f"{what} {text!r} serializes to nothing for store {self.name!r}")
        return bytes(data)

    def check_bound(self, bound: PositionBound) -> None:
        """``BadQueryError`` unless every topic ``bound`` names is an input of the store's
        sub-topology and every partition one of its tasks' (a bound it can never reach)."""
        for topic, partition, _ in bound.entries():
            if topic not in self.inputs:
                raise BadQueryError(
                    f"{PARAMETER}: topic {topic!r} is no input of store {self.name!r} "
                    f"(its tasks read {', '.join(self.inputs) or 'no topic'}); a bound names "
                    "the input topic the store's own tasks read"
                )
            if partition >= len(self.tasks):
                raise BadQueryError(
                    f"{PARAMETER}: partition {partition} of topic {topic!r}: store "
                    f"{self.name!r} has {len(self.tasks)} tasks (partitions 0-{len(self.tasks) - 1})"
                )

    def task_for(self, key: bytes) -> str:
        """The task holding the serialized ``key``."""
        return self.tasks[default_partition(key, len(self.tasks))]


class StoreRoutes:
    """The task stores of a topology and the tasks that hold them."""

    def __init__(
        self,
        topology: Topology,
        task_ids: Iterable[str],
        *,
        application_id: str | None = None,
        registry: Mapping[str, Any] | None = None,
    ) -> None:
        """``application_id`` names the stores' changelog topics, to which registry key
        serdes are bound (with ``registry``, the run's ``schema.registry.*`` settings, for
        serdes that name no registry); without it key serdes are used unbound."""
        by_sub: dict[int, list[tuple[int, str]]] = {}
        for task_id in task_ids:
            sub_id, partition = parse_task_id(task_id)
            by_sub.setdefault(sub_id, []).append((partition, task_id))
        self._routes: dict[str, StoreRoute] = {}
        for sub in topology.subtopologies():
            tasks = tuple(t for _, t in sorted(by_sub.get(sub.id, [])))
            for name in sub.store_names:
                builder = topology.store_builders[name]
                key_serde, error = _bound_key_serde(builder, name, application_id, registry)
                self._routes[name] = StoreRoute(
                    name, builder, tasks, tuple(sub.source_topics), key_serde, error
                )

    def find(self, store: str) -> StoreRoute | None:
        """The route of ``store``, or None."""
        return self._routes.get(store)

    def route(self, store: str) -> StoreRoute:
        """The route of ``store``; ``UnknownStoreError`` naming the known ones otherwise."""
        route = self._routes.get(store)
        if route is None or not route.tasks:
            raise UnknownStoreError(
                f"no store {store!r} in this application; its stores: "
                f"{', '.join(sorted(self._routes)) or 'none'}"
            )
        return route

    def describe(self) -> list[dict[str, Any]]:
        """Every store: name, kind, tasks."""
        return [
            {"store": r.name, "kind": r.kind, "tasks": list(r.tasks)}
            for r in sorted(self._routes.values(), key=lambda r: r.name)
        ]


def _bound_key_serde(
    builder: StoreBuilder,
    store: str,
    application_id: str | None,
    registry: Mapping[str, Any] | None,
) -> tuple[Serde | None, str | None]:
    """The store's key serde bound as its tasks bind it, or why it cannot be; its registry
    client with :data:`REGISTRY_DEFAULTS` where the settings give none."""
    serde = builder.key_serde
    if not serde.topic_aware or application_id is None:
        return None, None
    if isinstance(serde, registry_serdes.RegistrySerde):
        serde = serde.with_client_defaults(REGISTRY_DEFAULTS)
    try:
        if registry:  # settings given as text (--config schema.registry.timeout=10) as numbers
            registry = client_config({**REGISTRY_DEFAULTS, **registry})
        return serde.for_topic(changelog_topic(application_id, store), True, registry), None
    except ConfigError as exc:
        return None, str(exc)


def encode_key(data: bytes) -> str:
    """Serialized key bytes as text for the wire (base64)."""
    return base64.b64encode(data).decode()
