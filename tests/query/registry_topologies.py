"""A topology whose store is keyed by an Avro record (Schema Registry serdes), for the tests of
keys given as JSON in query URLs.

``orders`` (Avro key ``{"id": long}``, Avro value ``User``) -> ``keep-last`` -> store
``users-by-id`` (RocksDB): per key the last user, its name upper-cased, and how many records
the key had. The registry is the run's (``schema.registry.url``) unless ``registry`` names one.
"""

from __future__ import annotations

import json
from typing import Any

from processor_api import Topology
from processor_api.processor import Processor, Record
from processor_api.serdes import Serdes
from processor_api.state import Stores

USER_KEY_AVRO = json.dumps(
    {
        "type": "record",
        "name": "UserKey",
        "namespace": "tests",
        "fields": [{"name": "id", "type": "long"}],
    }
)
USER_COUNT_AVRO = json.dumps(
    {
        "type": "record",
        "name": "UserCount",
        "namespace": "tests",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "records", "type": "long"},
        ],
    }
)
STORE = "users-by-id"


class _KeepLast(Processor):
    """Keeps per key the last user, upper-cased, and the key's record count."""

    def init(self, context: Any) -> None:
        self.store = context.get_state_store(STORE)

    def process(self, record: Record) -> None:
        before = self.store.get(record.key)
        user = record.value
        self.store.put(
            record.key,
            {
                "id": user["id"],
                "name": user["name"].upper(),
                "records": 1 if before is None else before["records"] + 1,
            },
        )


def build_avro_keyed(input_topic: str = "users-in", registry: Any = None) -> Topology:
    """The topology of the module docs, reading ``input_topic``."""
    from tests.harness.schemas import USER_AVRO

    topology = Topology()
    topology.add_source(
        "in",
        input_topic,
        key_serde=Serdes.avro(USER_KEY_AVRO, registry=registry),
        value_serde=Serdes.avro(USER_AVRO, registry=registry),
    )
    topology.add_processor("keep-last", _KeepLast, "in")
    topology.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store(STORE),
            Serdes.avro(USER_KEY_AVRO, registry=registry),
            Serdes.avro(USER_COUNT_AVRO, registry=registry),
        ),
        "keep-last",
    )
    return topology
