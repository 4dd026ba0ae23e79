"""How far a consumer group is behind on some partitions, and whether it can catch up now.

A group's backlog on a partition is its high watermark minus its committed offset. Under
``read_committed`` only the part below the last stable offset is readable: records past it
belong to a transaction that is still open, and no reader gets past them until that
transaction commits or aborts (its producer does it, a newer producer with the same
transactional id fences it, or the broker aborts it after the transaction timeout). On Tansu
a transaction can stay unfinalised after it ended; ``wait_until_readable`` releases it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.transaction_ends import ends_one_at_a_time, release_pinned
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: Pause between two looks at partitions waiting for an open transaction to end.
OPEN_TRANSACTION_POLL_S = 0.2
#: How long a backlog stays held back by transactions whose writers all ended them before
#: the partitions are taken for pinned by Tansu and released.
RELEASE_AFTER_S = 5.0


@dataclass(frozen=True)
class PartitionBacklog:
    """One partition a group has not read to its end."""

    topic: str
    partition: int
    committed: int  #: the group's next offset to read (0 without a commit)
    end: int  #: the high watermark
    stable_end: int  #: the last stable offset (the end for ``read_uncommitted`` readers)

    @property
    def records(self) -> int:
        """Offsets between the committed position and the end (transaction markers included)."""
        return self.end - self.committed

    @property
    def readable(self) -> bool:
        """Whether a reader can make progress now (the stable end is past the position)."""
        return self.stable_end > self.committed

    def describe(self) -> str:
        text = f"{self.topic}[{self.partition}] committed {self.committed}, end {self.end}"
        if self.stable_end < self.end:
            text += f", an open transaction from offset {self.stable_end}"
        return text


def group_backlog(
    bootstrap_servers: str,
    group_id: str,
    partitions: Iterable[tuple[str, int]],
    isolation_level: str,
    *,
    kafka: KafkaClientConfig | None = None,
) -> list[PartitionBacklog]:
    """The partitions among ``partitions`` where ``group_id`` has not read to the end."""
    partitions = list(partitions)
    if not partitions:
        return []
    committed = committed_offsets(bootstrap_servers, group_id, partitions, kafka=kafka)
    ends = end_offsets(bootstrap_servers, partitions, kafka=kafka)
    behind = [tp for tp in partitions if ends[tp] > committed.get(tp, 0)]
    if not behind:
        return []
    stable = (
        end_offsets(bootstrap_servers, behind, isolation_level=isolation_level, kafka=kafka)
        if isolation_level == "read_committed"
        else {tp: ends[tp] for tp in behind}
    )
    return [
        PartitionBacklog(t, p, committed.get((t, p), 0), ends[(t, p)], stable[(t, p)])
        for t, p in behind
    ]


def wait_until_readable(
    bootstrap_servers: str,
    group_id: str,
    backlog: list[PartitionBacklog],
    timeout_s: float,
    *,
    kafka: KafkaClientConfig | None = None,
    release_after_s: float = RELEASE_AFTER_S,
) -> list[PartitionBacklog]:
    """Wait up to ``timeout_s`` for a backlog held back by open transactions to become
    readable (or to vanish); return the backlog as it is then, readable or not.

    For callers whose writers have all ended their transactions: on Tansu, partitions still
    held back after ``release_after_s`` are released (``kafka/transaction_ends.py``), again
    every ``release_after_s`` while they stay held back."""
    started = time.monotonic()
    deadline = started + timeout_s
    _log.info(
        "backlog_waits_for_open_transactions",
        group=group_id,
        partitions=[b.describe() for b in backlog],
        timeout_s=timeout_s,
    )
    partitions = [(b.topic, b.partition) for b in backlog]
    next_release = started + release_after_s
    while True:
        now = group_backlog(bootstrap_servers, group_id, partitions, "read_committed", kafka=kafka)
        if not now or any(b.readable for b in now) or time.monotonic() >= deadline:
            return now
        if time.monotonic() >= next_release:
            next_release = time.monotonic() + release_after_s
            if ends_one_at_a_time(bootstrap_servers, kafka):
                held = [(b.topic, b.partition) for b in now if b.stable_end < b.end]
                release_pinned(bootstrap_servers, held, kafka=kafka)
        time.sleep(OPEN_TRANSACTION_POLL_S)


__all__ = ["PartitionBacklog", "group_backlog", "wait_until_readable"]
