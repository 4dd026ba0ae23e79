"""Records of aborted transactions on repartition topics, told apart by design.

Under ``exactly_once_v2`` a downstream task must never count a record its upstream task wrote
in a transaction that aborted. Apache Kafka hides such records from ``read_committed``
readers; the embedded Tansu broker does not (it sends no aborted-transaction list). So the
runtime does not rely on the broker for it:

* every record an exactly-once task writes to a repartition topic carries a *batch stamp*
  header (:data:`STAMP_HEADER`): the writing task, the number of the batch, and the *writer*
  -- the id of the task's transactional producer instance, a new one after every abort,
  restart or takeover, so a retried batch never has the writer of its aborted attempt;
* the task's commit marker (in the same transaction as the records) records, as runs
  ``[first batch, writer]``, which writer committed which batches
  (:class:`~processor_api.engine.metadata.CommitState`);
* the downstream task keeps a stamped record only if the upstream's latest commit marker says
  that batch was committed by that writer (:class:`CommittedBatches`).

Why the latest marker is enough to decide: a downstream task reads a repartition partition
only below its last stable offset, so the record's transaction had ended (committed or
aborted) when the range was planned. If it committed, its marker is in the marker partition;
if the marker is not there (yet), either the transaction aborted, or it committed and the
transaction coordinator has not written the commit to the marker partition yet -- then that
partition has an open transaction (its last stable offset is below its high watermark), and
the reader waits for it to end before it decides. On Apache Kafka the stamps only confirm what
the broker already filtered. On Tansu a marker written by a transaction that then aborted is
visible too, but a downstream task never reads that batch's records before the upstream has
done the batch again: they lie past the repartition partition's last stable offset until the
upstream's new producer fences the open transaction, which happens in the upstream task's
rebuilt incarnation; its first commit (its marker naming the new writer, the old marker
passed over by recovery, see ``kafka/markers.py``) makes the redone records readable.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from processor_api.errors import StreamsError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.markers import CommitMarker, decode_marker, read_latest_marker
from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.reader import PartitionReader
from processor_api.logging import get_logger

STAMP_HEADER = "__processor_api.batch"
#: How long a reader waits for an open transaction on an upstream's marker partition to end.
OPEN_TRANSACTION_TIMEOUT_S = 120.0
#: Pause between two looks at a marker partition with an open transaction.
OPEN_TRANSACTION_POLL_S = 0.05
#: Offsets read from the end of a marker partition first when a task's marker is looked up.
MARKER_TAIL = 64

_log = get_logger("processor_api.batch_stamps")


@dataclass(frozen=True)
class BatchStamp:
    """Who wrote a repartition record: task, batch number, writer (producer instance)."""

    task_id: str
    sequence: int
    writer: str

    def encode(self) -> bytes:
        return f"{self.task_id}/{self.sequence}/{self.writer}".encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> BatchStamp:
        """The stamp in a header value; a malformed one is an error naming its text."""
        try:
            task_id, sequence, writer = (raw or b"").decode().split("/")
            return cls(task_id, int(sequence), writer)
        except (UnicodeDecodeError, ValueError) as exc:
            raise StreamsError(
                f"malformed {STAMP_HEADER} header {raw!r}: expected <task>/<batch>/<writer>"
            ) from exc


@dataclass
class _Committed:
    """What a task's latest commit marker says: its last batch and the writer runs."""

    sequence: int = 0
    writers: list[tuple[int, str]] = field(default_factory=list)
    next_offset: int = 0  # where to read the task's marker partition on from

    def writer_of(self, sequence: int) -> str | None:
        found = None
        for first, writer in self.writers:
            if first > sequence:
                break
            found = writer
        return found


class CommittedBatches:
    """Decides, per batch stamp, whether the upstream task committed that batch.

    Caches each upstream task's latest marker and reads its marker partition on from there
    only when a stamp names a batch past it (a record of a new batch, or of an aborted one).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        marker_topic: str,
        marker_partitions: Mapping[str, int],
        *,
        kafka: KafkaClientConfig | None = None,
        open_transaction_timeout_s: float = OPEN_TRANSACTION_TIMEOUT_S,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = marker_topic
        self._partitions = dict(marker_partitions)
        self._kafka = kafka
        self._timeout_s = open_transaction_timeout_s
        self._tasks: dict[str, _Committed] = {}
        self._decided: dict[BatchStamp, bool] = {}
        self._reader: PartitionReader | None = None

    def is_committed(self, stamp: BatchStamp) -> bool:
        """True if ``stamp``'s batch was committed by ``stamp``'s writer."""
        decided = self._decided.get(stamp)
        if decided is None:
            decided = self._decide(stamp)
            if len(self._decided) > 4096:
                self._decided.clear()
            self._decided[stamp] = decided
        return decided

    def _decide(self, stamp: BatchStamp) -> bool:
        committed = self._tasks.get(stamp.task_id)
        if committed is None:
            committed = self._tasks[stamp.task_id] = self._latest(stamp.task_id)
        if stamp.sequence > committed.sequence:
            committed = self._wait_for(stamp, committed)
        if stamp.sequence > committed.sequence:
            return False  # the batch's transaction ended without its marker: it aborted
        writer = committed.writer_of(stamp.sequence)
        # older than the runs kept (a reader more than MAX_WRITER_RUNS restarts behind):
        # only a broker that filters aborted records could have shown it, so it committed
        return writer is None or writer == stamp.writer

    def _wait_for(self, stamp: BatchStamp, committed: _Committed) -> _Committed:
        """Read the task's markers on until one covers ``stamp`` or no transaction is open on
        the marker partition (then what was read is final for that stamp)."""
        partition = self._partition(stamp.task_id)
        deadline = time.monotonic() + self._timeout_s
        while True:
            settled = self._no_open_transaction(partition)
            committed = self._read_on(stamp.task_id, committed)
            if stamp.sequence <= committed.sequence or settled:
                return committed
            if time.monotonic() > deadline:
                raise StreamsError(
                    f"a transaction of task {stamp.task_id} stayed open on partition "
                    f"{partition} of {self._topic!r} for {self._timeout_s:g}s: cannot tell "
                    f"whether its batch {stamp.sequence} (writer {stamp.writer}) committed"
                )
            time.sleep(OPEN_TRANSACTION_POLL_S)

    def _partition(self, task_id: str) -> int:
        try:
            return self._partitions[task_id]
        except KeyError:
            raise StreamsError(
                f"a repartition record is stamped by task {task_id!r}, which this run does not "
                f"have (tasks: {', '.join(sorted(self._partitions))})"
            ) from None

    def _latest(self, task_id: str) -> _Committed:
        marker = read_latest_marker(
            self._bootstrap,
            self._topic,
            self._partition(task_id),
            0,
            task_id,
            kafka=self._kafka,
            tail=MARKER_TAIL,
        )
        if marker is None:
            return _Committed()
        return _committed(marker, marker.end)

    def _read_on(self, task_id: str, committed: _Committed) -> _Committed:
        """``committed`` updated with the task's markers up to the partition's stable end."""
        if self._reader is None:
            self._reader = PartitionReader(
                self._bootstrap,
                "stamp-reader",
                isolation_level="read_committed",
                fail_on_data_loss=False,  # a compacted marker topic: older markers may be gone
                kafka=self._kafka,
            )
        key = task_id.encode()
        tp = (self._topic, self._partition(task_id))
        latest = committed
        end = committed.next_offset
        for batch in self._reader.read_to_end({tp: committed.next_offset}):
            for message in batch.messages:
                end = message.offset() + 1
                if message.key() == key:
                    latest = _committed(decode_marker(message, *tp), end)
            if batch.end is not None:
                end = max(end, batch.end)
        latest.next_offset = max(end, latest.next_offset)
        self._tasks[task_id] = latest
        return latest

    def _no_open_transaction(self, partition: int) -> bool:
        tp = (self._topic, partition)
        stable = end_offsets(
            self._bootstrap, [tp], isolation_level="read_committed", kafka=self._kafka
        )
        high = end_offsets(self._bootstrap, [tp], kafka=self._kafka)
        return stable[tp] >= high[tp]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _committed(marker: CommitMarker, next_offset: int) -> _Committed:
    return _Committed(marker.sequence, marker.writer_runs, next_offset)


def split_stamp(
    headers: Iterable[tuple[str, bytes | None]],
) -> tuple[BatchStamp | None, tuple[tuple[str, bytes | None], ...]]:
    """The batch stamp among ``headers`` (None: unstamped) and the other headers."""
    stamp = None
    rest = []
    for name, value in headers:
        if name == STAMP_HEADER:
            stamp = BatchStamp.decode(value)
        else:
            rest.append((name, value))
    return stamp, tuple(rest)
