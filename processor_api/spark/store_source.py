"""A store's committed contents as a Spark DataFrame: :func:`read_store_df`.

A batch PySpark Python data source (``processor_api_store``) with one Spark partition per
changelog partition. The driver validates the store and reads the commit markers once (so every
partition is read at the same committed position, whichever executor reads it); each Spark task
replays its changelog partition with :mod:`processor_api.kafka.store_reader`, exactly as
``read-store`` does, and yields its entries as rows.

Columns: ``partition int``, ``key``, ``value``, then ``window_start``/``window_end`` (window
stores), ``session_start``/``session_end`` (session stores) and ``timestamp`` (timestamped
stores), as ``long``. ``key`` and ``value`` are typed by the store's serdes: ``string``,
``integer``, ``long``, ``double`` and ``bytes`` serdes give string, int, long, double and binary
columns; any other serde (JSON, custom) gives a string column holding the value as JSON text
(``from_json`` parses it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from processor_api.kafka.store_reader import CommittedPosition, StoreLocation, read_partition
from processor_api.state import StoreBuilder
from processor_api.state.json_entries import entry_fields, json_default
from processor_api.state.selection import StoreSelection
from processor_api.store_queries import open_store_reader
from processor_api.topology import Topology

STORE_SOURCE_NAME = "processor_api_store"

_SERDE_TYPES = {
    "string": "string",
    "integer": "int",
    "long": "long",
    "double": "double",
    "bytes": "binary",
}
_BOUNDS = {
    "window": ("window_start", "window_end"),
    "timestamped-window": ("window_start", "window_end", "timestamp"),
    "session": ("session_start", "session_end"),
    "timestamped-key-value": ("timestamp",),
    "versioned-key-value": ("timestamp",),
}


@dataclass(frozen=True)
class StoreScan:
    """What every Spark task of one read needs (pickled into the ``scan`` option)."""

    location: StoreLocation
    builder: StoreBuilder
    positions: dict[int, CommittedPosition]
    selection: StoreSelection

    def columns(self) -> list[tuple[str, str]]:
        """``(name, Spark type)`` of every column, in order."""
        builder = self.builder
        return [
            ("partition", "int"),
            ("key", _SERDE_TYPES.get(builder.key_serde.name, "string")),
            ("value", _SERDE_TYPES.get(builder.value_serde.name, "string")),
            *((bound, "long") for bound in _BOUNDS.get(builder.kind, ())),
        ]

    def schema_ddl(self) -> str:
        """The columns as a Spark DDL string."""
        return ", ".join(f"`{name}` {kind}" for name, kind in self.columns())

    def encode(self) -> str:
        from pyspark import cloudpickle

        return base64.b64encode(cloudpickle.dumps(self)).decode()

    @staticmethod
    def decode(text: str) -> StoreScan:
        from pyspark import cloudpickle

        return cloudpickle.loads(base64.b64decode(text))


class _ChangelogPartition(InputPartition):
    def __init__(self, partition: int) -> None:
        super().__init__(partition)
        self.partition = partition


class _StoreReader(DataSourceReader):
    def __init__(self, scan: StoreScan) -> None:
        self.scan = scan

    def partitions(self) -> list[InputPartition]:
        return [_ChangelogPartition(p) for p in range(self.scan.location.partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        scan = self.scan
        p = partition.partition  # type: ignore[attr-defined]
        names = [name for name, _ in scan.columns()]
        serdes = {"key": scan.builder.key_serde, "value": scan.builder.value_serde}
        json_columns = {c for c, serde in serdes.items() if serde.name not in _SERDE_TYPES}
        position = scan.positions[p]
        for entry in read_partition(scan.location, scan.builder, p, position, scan.selection):
            fields = entry_fields(entry)
            fields["partition"] = p
            yield tuple(
                json.dumps(fields.get(name), default=json_default)
                if name in json_columns
                else fields.get(name)
                for name in names
            )


class StoreDataSource(DataSource):
    """PySpark batch data source ``processor_api_store`` (use :func:`read_store_df`)."""

    @classmethod
    def name(cls) -> str:
        """Format name for ``spark.read.format``."""
        return STORE_SOURCE_NAME

    def schema(self) -> str:
        """The columns of the store's kind and serdes."""
        return StoreScan.decode(self.options["scan"]).schema_ddl()

    def reader(self, schema: StructType) -> DataSourceReader:
        """One Spark partition per changelog partition."""
        return _StoreReader(StoreScan.decode(self.options["scan"]))


def read_store_df(
    spark: Any,
    bootstrap_servers: str,
    application_id: str,
    topology: Topology | str,
    store: str,
    **options: Any,
) -> Any:
    """The committed contents of ``store`` as a DataFrame, one Spark partition per changelog
    partition (see the module docstring for the columns).

    Arguments (``options``: ``key``, ``key_from``, ``key_to``, ``prefix``, ``kafka_config``,
    ``topology_kwargs``) and semantics as :func:`processor_api.read_store`. The commit markers
    are read now, on the driver; the changelog partitions when the DataFrame is computed (each
    time it is, unless cached), always up to the offsets found now.
    """
    selection = {k: options.pop(k) for k in ("key", "key_from", "key_to", "prefix") if k in options}
    reader = open_store_reader(bootstrap_servers, application_id, topology, store, **options)
    scan = StoreScan(
        location=reader.location,
        builder=reader.builder,
        positions=reader.committed_positions(),
        selection=StoreSelection(**selection),
    )
    spark.dataSource.register(StoreDataSource)
    return spark.read.format(STORE_SOURCE_NAME).option("scan", scan.encode()).load()
