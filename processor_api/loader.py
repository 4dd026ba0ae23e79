"""Loading a user topology from ``"module:function"``."""

from __future__ import annotations

import importlib
from typing import Any

from processor_api.errors import ConfigError
from processor_api.topology import Topology


def load_topology(reference: str, kwargs: dict[str, Any] | None = None) -> Topology:
    """Import ``module`` and call ``function(**kwargs)``; it must return a :class:`Topology`."""
    module_name, sep, function_name = reference.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(
            f"topology reference {reference!r} must look like MODULE:FUNCTION, "
            "e.g. topologies.sales_aggregation:build_topology"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {module_name!r} of {reference!r}: {exc}") from exc
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise ConfigError(f"module {module_name!r} has no callable {function_name!r}")
    topology = function(**(kwargs or {}))
    if not isinstance(topology, Topology):
        raise ConfigError(
            f"{reference} returned {type(topology).__name__}, expected a processor_api.Topology"
        )
    return topology
