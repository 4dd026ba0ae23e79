"""Fixtures for the state-store tests: typed stores over every inner kind, cached or not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from processor_api.serdes import Serde, Serdes
from processor_api.state import KeyValueStore, Stores, StoreStack

INNER_KINDS = ["in_memory", "rocksdb"]


def _supplier(kind: str, name: str):
    if kind == "rocksdb":
        return Stores.persistent_key_value_store(name)
    return Stores.in_memory_key_value_store(name)


@pytest.fixture(params=INNER_KINDS)
def inner_kind(request) -> str:
    return request.param


@pytest.fixture(params=[False, True], ids=["nocache", "cache"])
def caching(request) -> bool:
    return request.param


@pytest.fixture
def make_stack(tmp_path, inner_kind, caching) -> Iterator[Callable[..., StoreStack]]:
    """Build store stacks (logging on) over the parametrized inner kind, cached or not."""
    stacks: list[StoreStack] = []

    def make(
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str = "store",
        max_entries: int | None = None,
    ) -> StoreStack:
        builder = Stores.key_value_store_builder(
            _supplier(inner_kind, name),
            key_serde or Serdes.string(),
            value_serde or Serdes.string(),
        )
        if caching:
            builder.with_caching_enabled(max_entries)
        stack = builder.build(state_dir=tmp_path / "task")
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


@pytest.fixture
def store(make_stack) -> KeyValueStore:
    """A string -> string store."""
    return make_stack().store
