"""Interactive queries: read a running application's stores by key, range or window.

``run-topology --query-port PORT`` serves them over HTTP with JSON on the driver
(:mod:`processor_api.query.server`); :class:`QueryClient` and ``processor-api query`` ask it.
See the manual's "Interactive queries" page.
"""

from processor_api.query.client import QueryClient
from processor_api.query.errors import (
    BadQueryError,
    EndpointUnreachableError,
    KeyNotFoundError,
    NotUpToBoundError,
    QueryError,
    RegistryUnavailableError,
    TaskUnavailableError,
    UnauthorizedError,
    UnknownStoreError,
)
from processor_api.query.position import PositionBound

__all__ = [
    "BadQueryError",
    "EndpointUnreachableError",
    "KeyNotFoundError",
    "NotUpToBoundError",
    "PositionBound",
    "QueryClient",
    "QueryError",
    "RegistryUnavailableError",
    "TaskUnavailableError",
    "UnauthorizedError",
    "UnknownStoreError",
]
