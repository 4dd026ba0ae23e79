"""Schema Registry serdes and registry settings (needs ``confluent-kafka[schemaregistry]``)."""

from processor_api.schemas.registry import client_for
from processor_api.schemas.registry_serdes import (
    BoundRegistrySerde,
    RegistrySerde,
    RegistryUnavailableError,
)

__all__ = ["BoundRegistrySerde", "RegistrySerde", "RegistryUnavailableError", "client_for"]
