"""Topology functions for ``run-topology``'s setup errors (``test_setup_errors.py``)."""

from __future__ import annotations

import json

from processor_api import Serdes, Topology

VISIT = json.dumps(
    {"type": "record", "name": "Visit", "fields": [{"name": "page", "type": "string"}]}
)


def _read_products() -> list[str]:
    raise RuntimeError("the products file is empty")


def build_raising() -> Topology:
    """Fails while building, in a helper, as a user's function reading a missing file does."""
    products = _read_products()
    return Topology().add_source("in", products[0])


def build_avro(registry: str | None = None) -> Topology:
    """Avro values copied from ``visits`` to ``visits-copy``; the sink's serde names
    ``registry`` when given, the source's takes the run's ``schema.registry.url``."""
    return (
        Topology()
        .add_source("in", "visits", key_serde=Serdes.string(), value_serde=Serdes.avro(VISIT))
        .add_sink(
            "out",
            "visits-copy",
            "in",
            key_serde=Serdes.string(),
            value_serde=Serdes.avro(VISIT, registry=registry),
        )
    )
