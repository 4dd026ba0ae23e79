"""A restore listener that makes each store's restore last long enough to be watched."""

from __future__ import annotations

import time

from processor_api.restore_listener import StateRestoreListener, TopicPartition

#: Each store's restore waits this long after it started, before its first record.
SLOW_START_S = 4.0


class SlowRestoreListener(StateRestoreListener):
    """Sleeps :data:`SLOW_START_S` at the start of every store's restore."""

    def on_restore_start(
        self, topic_partition: TopicPartition, store_name: str, start_offset: int, end_offset: int
    ) -> None:
        time.sleep(SLOW_START_S)
