"""Refusing ``confluent_kafka``'s in-process ``mock://`` registry for runs on Spark.

A ``mock://`` registry is a dict inside one Python process. On Spark every task runs in a host
process of its own (and the driver in another), so each process has its own empty mock: a
schema one task registers is unknown to the next task reading its records, which fails in a
worker with ``Schema Not Found (HTTP 404)`` long after the run started. ``run-topology``
therefore refuses one at start, naming where it is given and what to use instead.

It is a check of a run on Spark, over the topology's nodes, so it lives with the driver
(``spark/``) rather than with the serdes in ``schemas/``, which the topology imports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from processor_api.errors import ConfigError
from processor_api.topology.nodes import SinkNode, SourceNode

#: The URL scheme of ``confluent_kafka``'s in-process mock registry.
MOCK_SCHEME = "mock://"


def is_in_process(url: object) -> bool:
    """Whether a registry ``url`` is ``confluent_kafka``'s in-process mock."""
    return isinstance(url, str) and url.strip().lower().startswith(MOCK_SCHEME)


def _serdes(topology: Any) -> Iterator[tuple[str, Any]]:
    """Every serde the runtime binds to a topic, with what uses it."""
    for node in topology.nodes.values():
        if isinstance(node, SourceNode):
            where = f"source {node.name!r} (topics {', '.join(node.topics)})"
        elif isinstance(node, SinkNode):
            topic = node.topic if node.topic is not None else "chosen per record"
            where = f"sink {node.name!r} (topic {topic})"
        else:
            continue
        yield f"the key serde of {where}", node.key_serde
        yield f"the value serde of {where}", node.value_serde
    for name, builder in topology.store_builders.items():
        yield f"the key serde of store {name!r}", builder.key_serde
        yield f"the value serde of store {name!r}", builder.value_serde
    for store in topology.global_stores():
        where = f"global store {store.store_name!r} (topic {store.topic})"
        yield f"the key serde of the source of {where}", store.source.key_serde
        yield f"the value serde of the source of {where}", store.source.value_serde
        yield f"the key serde of {where}", store.builder.key_serde
        yield f"the value serde of {where}", store.builder.value_serde


def in_process_registries(topology: Any, run_registry: Mapping[str, Any]) -> list[str]:
    """Where ``topology`` and the run's ``schema.registry.*`` settings name a ``mock://``
    registry, one entry each, e.g.
    ``the value serde of sink 'out' (topic visits): registry=mock://x``."""
    found = []
    if is_in_process(run_registry.get("url")):
        found.append(f"--config schema.registry.url={run_registry['url']}")
    for where, serde in _serdes(topology):
        registry = getattr(serde, "registry", None)
        if isinstance(registry, Mapping) and is_in_process(registry.get("url")):
            found.append(f"{where}: registry={registry['url']}")
    return found


def refuse_in_process_registries(topology: Any, run_registry: Mapping[str, Any]) -> None:
    """``ConfigError`` when a run on Spark would use a ``mock://`` registry (see module doc)."""
    found = in_process_registries(topology, run_registry)
    if found:
        raise ConfigError(
            "a mock:// schema registry cannot serve a run on Spark: it lives inside one "
            "process, and the tasks run in processes of their own, so a schema one registers "
            "is not found by the others (Schema Not Found); give a Schema Registry server's "
            "http(s):// URL instead (mock:// is for the TopologyTestDriver). Found: "
            + "; ".join(found)
        )
