"""Querying a store's committed state without the application: :func:`read_store`.

The reading itself is :mod:`processor_api.kafka.store_reader`; this module is the public entry
point (``processor_api.read_store``), shared by the ``read-store`` command and
``processor_api.spark.read_store_df``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from processor_api.state.base import KeyValue
from processor_api.topology import Topology

if TYPE_CHECKING:
    from processor_api.kafka.store_reader import StoreReader
    from processor_api.state.snapshots import SnapshotSettings


def open_store_reader(
    bootstrap_servers: str,
    application_id: str,
    topology: Topology | str,
    store: str,
    *,
    kafka_config: Mapping[str, Any] | None = None,
    topology_kwargs: Mapping[str, Any] | None = None,
    registry: Mapping[str, Any] | None = None,
    snapshots: SnapshotSettings | None = None,
) -> StoreReader:
    """A :class:`~processor_api.kafka.store_reader.StoreReader` for ``store`` of the application.

    ``topology`` is a :class:`Topology` or ``"module:function"`` (called with
    ``topology_kwargs``); ``kafka_config`` holds Kafka client settings as ``run-topology
    --kafka-config`` takes them (``consumer.``/``admin.`` prefixes too); ``registry`` the
    Schema Registry client config for registry serdes that name none; ``snapshots`` where
    the application's store snapshots are (each partition then starts from its newest usable
    snapshot and reads only the changelog after it).
    """
    from processor_api.kafka.client_config import KafkaClientConfig
    from processor_api.kafka.store_reader import StoreReader

    if isinstance(topology, str):
        from processor_api.topology.loader import load_topology

        topology = load_topology(topology, dict(topology_kwargs or {}))
    kafka = KafkaClientConfig.from_dict(dict(kafka_config)) if kafka_config else None
    return StoreReader(
        bootstrap_servers,
        application_id,
        topology,
        store,
        kafka=kafka,
        registry=registry,
        snapshots=snapshots,
    )


def read_store(
    bootstrap_servers: str,
    application_id: str,
    topology: Topology | str,
    store: str,
    *,
    key: Any = None,
    key_from: Any = None,
    key_to: Any = None,
    prefix: Any = None,
    as_of: int | None = None,
    kafka_config: Mapping[str, Any] | None = None,
    topology_kwargs: Mapping[str, Any] | None = None,
    registry: str | Mapping[str, Any] | None = None,
) -> Iterator[KeyValue]:
    """The committed contents of ``store``, read from its changelog: an iterator of ``KeyValue``.

    Needs neither the running application nor its state directory: every changelog partition
    is read up to the changelog offset of its task's last commit (recorded in
    the task's commit marker), records of aborted transactions and of batches not committed
    yet excluded, tombstones applied. Entries come partition by partition, in key order within
    one, typed as the store's processors see them (``KeyValue(Windowed(key, window), value)``
    for window and session stores, ``ValueAndTimestamp`` values for timestamped stores). A
    store with a time to live leaves out the entries expired at the commit's stream time
    (``clock="wall_clock"``: at the system time when the read starts).

    Select with ``key``, with ``key_from``/``key_to`` (inclusive; either may be left open) or
    with ``prefix`` (key-value stores). Versioned stores are read one ``key`` at a time: its
    latest ``VersionedRecord``, or with ``as_of`` (epoch ms) the version valid then (``None``
    beyond the history retention, as the store's ``get``). A selection the store's kind
    cannot take raises ``StoreError`` at once. Raises ``ConfigError`` for a store the topology
    does not have (or without a changelog) and ``MissingTopicError`` when the application has
    no state on the broker. ``registry`` (a URL or a ``SchemaRegistryClient`` config dict) serves
    the Schema Registry serdes that name no registry, as ``schema.registry.*`` does in a run.
    """
    from processor_api.schemas.registry import client_config
    from processor_api.state.selection import StoreSelection

    selection = StoreSelection(
        key=key, key_from=key_from, key_to=key_to, prefix=prefix, as_of=as_of
    )
    reader = open_store_reader(
        bootstrap_servers,
        application_id,
        topology,
        store,
        kafka_config=kafka_config,
        topology_kwargs=topology_kwargs,
        registry=None if registry is None else client_config(registry),
    )
    return (entry for _, entry in reader.read(selection))
