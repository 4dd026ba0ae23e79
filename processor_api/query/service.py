"""A run's query endpoint: the router the worker hosts dial and the HTTP server, together."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint, QueryServer
from processor_api.topology import Topology


class RunQueries:
    """The router (on ``driver_host``, where every executor reaches the driver) and the
    HTTP server (``host:port``) of one run; closed together. ``application_id`` and
    ``registry`` (the run's ``schema.registry.*`` settings) bind the stores' Schema Registry
    key serdes as the tasks bind them."""

    def __init__(
        self,
        topology: Topology,
        task_ids: Iterable[str],
        *,
        driver_host: str,
        host: str,
        port: int,
        token: str | None,
        application_id: str | None = None,
        registry: Mapping[str, Any] | None = None,
    ) -> None:
        self.router = HostRouter(driver_host)
        try:
            routes = StoreRoutes(
                topology, task_ids, application_id=application_id, registry=registry
            )
            endpoint = QueryEndpoint(routes, self.router)
            self.server = QueryServer(endpoint, host, port, token)
        except BaseException:
            self.router.close()
            raise

    def close(self) -> None:
        """Stop serving queries and drop the hosts' links."""
        try:
            self.server.close()
        finally:
            self.router.close()
