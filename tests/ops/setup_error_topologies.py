"""Topology functions for ``run-topology``'s setup errors (``test_setup_errors.py``)."""

from __future__ import annotations

from processor_api import Topology


def _read_products() -> list[str]:
    raise RuntimeError("the products file is empty")


def build_raising() -> Topology:
    """Fails while building, in a helper, as a user's function reading a missing file does."""
    products = _read_products()
    return Topology().add_source("in", products[0])
