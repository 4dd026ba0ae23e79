"""Time-segmented byte store: the innermost store of window and session stores.

Like Kafka Streams' segmented RocksDB stores, records are grouped into segments of
``segment_interval`` ms by a timestamp read from their key (window start, session end), and a
whole segment is dropped once it is older than the observed stream time minus the retention.
Here the segments share one backing store: each stored key is the 8-byte big-endian segment
id followed by the record's own key, so dropping a segment is one range delete (a RocksDB
``DeleteRange``), never a scan.

The byte API takes and returns the records' own keys (the changelog format), ordered by those
keys across segments, so the layers above (cache, change log, batch buffer) and a changelog
replay (``put_all`` of raw changelog records) work on it as on any byte store.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from processor_api.errors import StoreError
from processor_api.logging import get_logger
from processor_api.state.base import BytesStore
from processor_api.state.key_schemas import pack_long, unpack_long

_log = get_logger(__name__)

_SEGMENT_ID_SIZE = 8
# Segment ids are non-negative longs (first byte <= 0x7f): 0xff keys are outside every segment.
_OBSERVED_KEY = b"\xff" + b"observed-stream-time"
_NO_TIME = -1


def segment_interval_for(retention_period: int) -> int:
    """Kafka Streams' default segment interval: ``max(retention / 2, 60000)``."""
    return max(retention_period // 2, 60_000)


class SegmentedBytesStore(BytesStore):
    """Segments over one ``backing`` byte store, keyed by a timestamp taken from each key.

    ``timestamp_of(key)`` gives a key's segment timestamp; ``min_key_size`` is the shortest
    valid key (anything shorter is rejected). The observed stream time (the largest timestamp
    written so far) is kept in the backing store, so it survives a reopen.
    """

    def __init__(
        self,
        backing: BytesStore,
        *,
        retention_period: int,
        segment_interval: int,
        timestamp_of: Callable[[bytes], int],
        min_key_size: int,
    ) -> None:
        if segment_interval < 1:
            raise StoreError(
                f"state store {backing.name!r}: segment interval must be >= 1 ms, "
                f"got {segment_interval}"
            )
        self.backing = backing
        self.name = backing.name
        self.retention_period = retention_period
        self.segment_interval = segment_interval
        self._timestamp_of = timestamp_of
        self._min_key_size = min_key_size
        stored = backing.get(_OBSERVED_KEY)
        self.observed_stream_time = _NO_TIME if stored is None else unpack_long(stored)
        self._segments: set[int] = self._existing_segments()

    # ------------------------------------------------------------------ segments

    def _existing_segments(self) -> set[int]:
        found: set[int] = set()
        position: bytes | None = None
        while True:
            first = next(iter(self.backing.range(position, None)), None)
            if first is None or first[0] >= _OBSERVED_KEY[:1]:
                return found
            segment = unpack_long(first[0])
            found.add(segment)
            position = pack_long(segment + 1)

    def _min_live_segment(self, observed: int) -> int:
        return max(observed - self.retention_period, 0) // self.segment_interval

    @property
    def segment_ids(self) -> list[int]:
        """The ids of the segments that hold data, ascending."""
        return sorted(self._segments)

    def _segment_for(self, key: bytes) -> int:
        if len(key) < self._min_key_size:
            raise StoreError(
                f"state store {self.name!r}: stored key of {len(key)} bytes is shorter than "
                f"the {self._min_key_size}-byte minimum of its key format"
            )
        return max(self._timestamp_of(key), 0) // self.segment_interval

    def _drop_expired(self) -> None:
        if self.observed_stream_time < self.retention_period:
            return
        live_from = self._min_live_segment(self.observed_stream_time)
        for segment in [s for s in self._segments if s < live_from]:
            self.backing.delete_range(pack_long(segment), pack_long(segment + 1))
            self._segments.discard(segment)
            _log.debug("segment_dropped", store=self.name, segment=segment)

    # ------------------------------------------------------------------ writes

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` (``None`` deletes) unless its segment has expired."""
        self.put_all(((key, value),))

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write the entries of live segments in one backing ``put_all``; drop expired ones.

        The observed stream time advances entry by entry, as in Kafka Streams' restore: an
        entry is kept when its segment is live at the moment it is written.
        """
        self._check_open()
        observed = start_observed = self.observed_stream_time
        segments = self._segments
        batch: list[tuple[bytes, bytes | None]] = []
        for key, value in entries:
            segment = self._segment_for(key)
            observed = max(observed, self._timestamp_of(key))
            if segment < self._min_live_segment(observed):
                _log.debug("skipping_record_for_expired_segment", store=self.name)
                continue
            if value is not None:
                segments.add(segment)
            batch.append((pack_long(segment) + key, value))
        if observed != start_observed:
            self.observed_stream_time = observed
            batch.append((_OBSERVED_KEY, pack_long(observed)))
        if batch:
            self.backing.put_all(batch)
        self._drop_expired()

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` and return its old value, or ``None``."""
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None`` (also when its segment was dropped)."""
        self._check_open()
        segment = self._segment_for(key)
        if segment not in self._segments:
            return None
        return self.backing.get(pack_long(segment) + key)

    def range(
        self, lo: bytes | None, hi: bytes | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lo <= key <= hi`` in key order, merged across the live segments."""
        return self._merged_range(lo, hi, sorted(self._segments, reverse=reverse), reverse)

    def time_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        time_from: int,
        time_to: int,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like :meth:`range`, reading only the segments of timestamps ``time_from..time_to``
        (Kafka Streams' ``segments(timeFrom, timeTo)``)."""
        first = max(time_from, 0) // self.segment_interval
        last = max(time_to, 0) // self.segment_interval
        wanted = [s for s in self._segments if first <= s <= last]
        return self._merged_range(lo, hi, sorted(wanted, reverse=reverse), reverse)

    def _merged_range(
        self, lo: bytes | None, hi: bytes | None, ordered: list[int], reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        if lo is not None and hi is not None and lo > hi:
            return iter(())
        streams = [self._segment_range(segment, lo, hi, reverse) for segment in ordered]
        if not streams:
            return iter(())
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=_entry_key, reverse=reverse)

    def _segment_range(
        self, segment: int, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        prefix = pack_long(segment)
        start = prefix if lo is None else prefix + lo
        # The next segment's prefix is never a stored key itself (keys follow every prefix).
        end = pack_long(segment + 1) if hi is None else prefix + hi
        # Opened now, not on the first next(): the iterator reads the store as it is now.
        return _strip_prefix(self.backing.range(start, end, reverse), prefix)

    def approximate_num_entries(self) -> int:
        """The backing store's estimate, less the entry holding the observed stream time."""
        self._check_open()
        bookkeeping = 0 if self.observed_stream_time == _NO_TIME else 1
        return max(self.backing.approximate_num_entries() - bookkeeping, 0)

    # ------------------------------------------------------------------ lifecycle

    @property
    def persistent(self) -> bool:
        """Whether the backing store is persistent."""
        return self.backing.persistent

    @property
    def is_open(self) -> bool:
        """Whether the backing store is open."""
        return self.backing.is_open

    def flush(self) -> None:
        """Flush the backing store."""
        self.backing.flush()

    def create_checkpoint(self, path: Path) -> None:
        """Checkpoint the backing store (segments live in it)."""
        self.backing.create_checkpoint(path)

    def close(self) -> None:
        """Close the backing store. Idempotent."""
        self.backing.close()


def _strip_prefix(
    entries: Iterator[tuple[bytes, bytes]], prefix: bytes
) -> Iterator[tuple[bytes, bytes]]:
    for stored, value in entries:
        if stored.startswith(prefix):
            yield stored[_SEGMENT_ID_SIZE:], value


def _entry_key(entry: tuple[bytes, bytes]) -> bytes:
    return entry[0]
