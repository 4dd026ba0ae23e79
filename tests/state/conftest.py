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


def _window_supplier(kind: str, name: str, retention: int, size: int, duplicates: bool):
    factory = Stores.persistent_window_store if kind == "rocksdb" else Stores.in_memory_window_store
    return factory(name, retention, size, duplicates)


def _session_supplier(kind: str, name: str, retention: int):
    factory = (
        Stores.persistent_session_store if kind == "rocksdb" else Stores.in_memory_session_store
    )
    return factory(name, retention)


@pytest.fixture
def make_window_stack(tmp_path, inner_kind, caching) -> Iterator[Callable[..., StoreStack]]:
    """Build logged window store stacks over the parametrized inner kind, cached or not."""
    stacks: list[StoreStack] = []

    def make(
        retention: int,
        size: int,
        duplicates: bool = False,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str = "window",
    ) -> StoreStack:
        builder = Stores.window_store_builder(
            _window_supplier(inner_kind, name, retention, size, duplicates),
            key_serde or Serdes.integer(),
            value_serde or Serdes.string(),
        )
        if caching:
            builder.with_caching_enabled()
        stack = builder.build(state_dir=tmp_path / "task")
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


@pytest.fixture
def make_session_stack(tmp_path, inner_kind, caching) -> Iterator[Callable[..., StoreStack]]:
    """Build logged session store stacks over the parametrized inner kind, cached or not."""
    stacks: list[StoreStack] = []

    def make(
        retention: int,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        name: str = "sessions",
    ) -> StoreStack:
        builder = Stores.session_store_builder(
            _session_supplier(inner_kind, name, retention),
            key_serde or Serdes.string(),
            value_serde or Serdes.long(),
        )
        if caching:
            builder.with_caching_enabled()
        stack = builder.build(state_dir=tmp_path / "task")
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()
