"""Listening to store restores, as Kafka Streams' ``StateRestoreListener`` does.

A task restores a store from its changelog when its local copy is missing or behind (a new
machine, a deleted state directory, a crash). Restores of large stores take time; a listener
sees each one start, progress batch by batch and end, e.g. to export restore progress as
metrics. Configure it with ``state.restore.listener=MODULE:CALLABLE`` (``--config`` of
``run-topology``, or the config dict): the callable (usually the listener class) is called
once per task with no arguments and must return a :class:`StateRestoreListener`.

The methods run in the process that restores the task, in the restoring thread, between
reads of the changelog: a slow listener slows the restore, and an exception raised by one
fails the task's start like any restore failure.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from processor_api.error_handlers import import_callable
from processor_api.errors import ConfigError

CONFIG_KEY = "state_restore_listener"


class TopicPartition(NamedTuple):
    """A changelog topic and partition."""

    topic: str
    partition: int


class StateRestoreListener:
    """Told about the restore of each store of a task; every method does nothing by default.

    Offsets are changelog offsets: a restore replays ``[start_offset, end_offset)``, the end
    being the position the task's last commit recorded for the store.
    """

    def on_restore_start(
        self, topic_partition: TopicPartition, store_name: str, start_offset: int, end_offset: int
    ) -> None:
        """The restore of ``store_name`` from ``topic_partition`` begins."""

    def on_batch_restored(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        batch_end_offset: int,
        num_restored: int,
    ) -> None:
        """A batch of ``num_restored`` records up to ``batch_end_offset`` (exclusive) is in
        the store."""

    def on_restore_end(
        self, topic_partition: TopicPartition, store_name: str, total_restored: int
    ) -> None:
        """The restore of ``store_name`` is complete: ``total_restored`` records replayed."""


def resolve_restore_listener(value: Any) -> StateRestoreListener | None:
    """The listener the ``state.restore.listener`` setting names (``None`` for none).

    ``value`` is a listener, or ``"module:callable"`` naming a callable that returns one.
    Raises ``ConfigError`` naming the setting when it names nothing usable.
    """
    if value is None or value == "":
        return None
    if isinstance(value, StateRestoreListener):
        return value
    if not isinstance(value, str):
        raise ConfigError(
            f"{CONFIG_KEY} must be MODULE:CALLABLE or a StateRestoreListener, got {value!r}"
        )
    factory = import_callable(CONFIG_KEY, value)
    try:
        listener = factory()
    except Exception as exc:
        raise ConfigError(
            f"{CONFIG_KEY}={value!r}: calling it failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(listener, StateRestoreListener):
        raise ConfigError(
            f"{CONFIG_KEY}={value!r} returned {type(listener).__name__}, not a StateRestoreListener"
        )
    return listener
