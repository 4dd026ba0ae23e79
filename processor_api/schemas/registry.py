"""Schema Registry clients: the settings a run may give and one shared client per setting.

A registry serde names its registry (a URL or a ``SchemaRegistryClient`` config dict) or
takes the run's ``schema.registry.*`` settings (``--config schema.registry.url=...``), so
credentials stay out of code. Clients are shared per distinct configuration within a process:
their schema caches are warm for every serde using them, and ``mock://`` registries (the
in-process mock of ``confluent_kafka``) are one registry per URL, not one per serde.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from typing import Any

from processor_api.errors import ConfigError

#: The run config prefix of registry settings (normalized: dots, dashes -> underscores).
PREFIX = "schema_registry_"

#: ``SchemaRegistryClient`` settings a run may give as ``schema.registry.<setting>``.
CLIENT_KEYS = (
    "url",
    "basic.auth.credentials.source",
    "basic.auth.user.info",
    "bearer.auth.credentials.source",
    "bearer.auth.token",
    "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id",
    "bearer.auth.client.id",
    "bearer.auth.client.secret",
    "bearer.auth.scope",
    "bearer.auth.issuer.endpoint.url",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "proxy",
    "timeout",
    "cache.capacity",
    "cache.latest.ttl.sec",
    "max.retries",
    "retries.wait.ms",
    "retries.max.wait.ms",
)
_BY_NORMALIZED = {PREFIX + key.replace(".", "_"): key for key in CLIENT_KEYS}
_INT_KEYS = frozenset(
    {"timeout", "cache.capacity", "cache.latest.ttl.sec", "max.retries", "retries.wait.ms"}
    | {"retries.max.wait.ms"}
)

_clients: dict[tuple[tuple[str, str], ...], Any] = {}
_clients_lock = threading.Lock()


def is_registry_key(normalized_key: str) -> bool:
    """Whether a normalized run config key is a registry setting (known or not)."""
    return normalized_key.startswith(PREFIX)


def client_key(normalized_key: str) -> str:
    """The client setting (``basic.auth.user.info``) of a normalized run config key.

    ``ConfigError`` naming the key (and the closest known one) when it is not a registry
    setting the client knows.
    """
    key = _BY_NORMALIZED.get(normalized_key)
    if key is None:
        close = difflib.get_close_matches(normalized_key, sorted(_BY_NORMALIZED), n=1, cutoff=0.6)
        hint = f" (did you mean 'schema.registry.{_BY_NORMALIZED[close[0]]}'?)" if close else ""
        raise ConfigError(
            f"unknown schema registry setting {normalized_key!r}{hint}; known: "
            + ", ".join(f"schema.registry.{k}" for k in CLIENT_KEYS)
        )
    return key


def client_config(registry: str | Mapping[str, Any]) -> dict[str, Any]:
    """The ``SchemaRegistryClient`` config of a serde's ``registry`` (URL or dict)."""
    if isinstance(registry, str):
        config: dict[str, Any] = {"url": registry}
    elif isinstance(registry, Mapping):
        config = {str(k): v for k, v in registry.items()}
    else:
        raise ConfigError(
            f"registry must be a URL or a SchemaRegistryClient config dict, got {registry!r}"
        )
    if not config.get("url"):
        raise ConfigError(f"schema registry config {sorted(config)} has no 'url'")
    for key in _INT_KEYS & config.keys():
        value = config[key]
        if isinstance(value, str) and value.strip().isdigit():
            config[key] = int(value)
    return config


def client_for(config: Mapping[str, Any]) -> Any:
    """The process's ``SchemaRegistryClient`` for ``config`` (one per distinct config)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = tuple(sorted((str(k), str(v)) for k, v in config.items()))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = SchemaRegistryClient.new_client(dict(config))  # mock:// -> the mock
            _clients[key] = client
        return client
