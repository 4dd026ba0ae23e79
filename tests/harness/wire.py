"""A minimal raw Kafka protocol client: what a consumer cannot tell about a partition's log.

* :func:`transaction_status` reads the raw log of a partition with a minimal Fetch (v4)
  client and classifies every data record by the transaction control records that follow it:
  ``committed``, ``aborted``, ``open`` or ``plain`` (non-transactional). A Kafka broker hides
  aborted records from ``read_committed`` readers (the Fetch response lists aborted
  transactions); Tansu does not (measured: it sends no aborted-transaction list, though it
  writes the abort markers), so on Tansu a ``read_committed`` reader sees aborted records.
  With this classification a test can tell "the runtime produced a duplicate" from "Tansu shows
  a record of an aborted transaction".
* :func:`high_watermarks`: per partition, the high watermark from a raw Fetch (Tansu's
  ListOffsets can be behind it, see ``tests/kafka/test_offsets.py``).
* :class:`OutputWatch`: data records written at or after given offsets, committed or not.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

from processor_api.kafka.admin import topic_partitions


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise EOFError
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    def varbytes(self) -> bytes | None:
        n = self.varint()
        return None if n < 0 else self.take(n)

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()


def connect(bootstrap: str) -> socket.socket:
    """A plain TCP connection to the first broker of ``bootstrap``."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("connection closed")
        out += chunk
    return bytes(out)


def _kafka_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _fetch_raw(
    sock: socket.socket,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int = 8_000_000,
    max_wait_ms: int = 0,
) -> tuple[int, int, bytes]:
    """One Fetch v4 (read_uncommitted) request: (error code, high watermark, record bytes)."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + _kafka_string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes)
    message = struct.pack(">hhi", 1, 4, 1) + _kafka_string("reliability-rawlog") + body
    sock.sendall(struct.pack(">i", len(message)) + message)
    size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
    buffer = _Buffer(_recv_exactly(sock, size))
    buffer.i32()  # correlation id
    buffer.i32()  # throttle
    for _ in range(buffer.i32()):
        buffer.string()
        for _ in range(buffer.i32()):
            buffer.i32()
            error, high_watermark = buffer.i16(), buffer.i64()
            buffer.i64()  # last stable offset
            aborted = buffer.i32()
            for _ in range(max(aborted, 0)):
                buffer.i64(), buffer.i64()
            length = buffer.i32()
            return error, high_watermark, buffer.take(length) if length > 0 else b""
    return -1, -1, b""  # Tansu answers any Fetch with max_wait 0 this way (measured)


@dataclass
class RawBatch:
    base: int
    last: int
    producer_id: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value)


def _batches(data: bytes) -> Iterator[RawBatch]:
    buffer = _Buffer(data)
    while len(data) - buffer.pos >= 12:
        base, length = buffer.i64(), buffer.i32()
        if len(data) - buffer.pos < length:
            return  # a truncated batch at the end of the response
        end = buffer.pos + length
        buffer.i32()  # partition leader epoch
        magic = buffer.i8()
        buffer.take(4)  # crc
        attributes = buffer.i16()
        last_delta = buffer.i32()
        buffer.i64(), buffer.i64()  # timestamps
        producer_id = buffer.i64()
        buffer.i16(), buffer.i32()  # epoch, base sequence
        count = buffer.i32()
        if magic != 2 or attributes & 7:
            raise ValueError(
                f"unsupported batch at offset {base}: magic {magic}, compression {attributes & 7}"
            )
        records = []
        for _ in range(count):
            length_ = buffer.varint()
            record_end = buffer.pos + length_
            buffer.i8()
            buffer.varint()  # timestamp delta
            offset_delta = buffer.varint()
            key, value = buffer.varbytes(), buffer.varbytes()
            buffer.pos = record_end
            records.append((base + offset_delta, key, value))
        buffer.pos = end
        yield RawBatch(
            base,
            base + last_delta,
            producer_id,
            bool(attributes & 16),
            bool(attributes & 32),
            records,
        )


def transaction_status(
    bootstrap: str, topic: str, partition: int, timeout_s: float = 60.0
) -> dict[int, str]:
    """offset -> ``plain`` | ``committed`` | ``aborted`` | ``open`` for every data record of
    one partition, from the control records (COMMIT/ABORT markers) in the raw log."""
    status: dict[int, str] = {}
    pending: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    offset = 0
    deadline = time.monotonic() + timeout_s
    with connect(bootstrap) as sock:
        while True:
            error, high_watermark, data = _fetch_raw(
                sock, topic, partition, offset, max_wait_ms=100
            )
            if error:
                raise RuntimeError(f"raw fetch {topic}[{partition}]@{offset}: error {error}")
            progressed = False
            for batch in _batches(data):
                if batch.last < offset:
                    continue
                progressed = True
                offset = batch.last + 1
                if batch.control:
                    kind = struct.unpack(">hh", batch.records[0][1])[1] if batch.records else 0
                    verdict = "committed" if kind == 1 else "aborted"
                    for pending_offset in pending.pop(batch.producer_id, []):
                        status[pending_offset] = verdict
                    continue
                for record_offset, _, _ in batch.records:
                    if batch.transactional:
                        status[record_offset] = "open"
                        pending.setdefault(batch.producer_id, []).append(record_offset)
                    else:
                        status[record_offset] = "plain"
            if offset >= high_watermark:
                return status
            if not progressed:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"raw fetch of {topic}[{partition}] stuck at {offset}")
                time.sleep(0.05)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition, the high watermark (from a raw Fetch: correct on Tansu)."""
    with connect(bootstrap) as sock:
        marks = {}
        for partition in range(partitions):
            error, high_watermark, _ = _fetch_raw(sock, topic, partition, 0, 1, max_wait_ms=100)
            if error:
                raise RuntimeError(f"raw fetch {topic}[{partition}]: error {error}")
            marks[partition] = high_watermark
        return marks


class OutputWatch:
    """Polls partitions of a topic (raw Fetch, one connection) for data records at or after
    given offsets that no transaction marker follows yet: the records of a transaction still
    open (or of non-transactional producers, which write no markers)."""

    def __init__(self, bootstrap: str, topic: str, start: dict[int, int]) -> None:
        self.sock = connect(bootstrap)
        self.topic, self.start = topic, dict(start)

    def count(self) -> int:
        total = 0
        for partition, offset in self.start.items():
            # max_wait 1 ms: Tansu returns nothing at all for max_wait 0, and with nothing
            # new it waits the whole max_wait (no wake-up on new data), measured
            _, high_watermark, data = _fetch_raw(
                self.sock, self.topic, partition, offset, 1_000_000, max_wait_ms=1
            )
            if high_watermark <= offset:
                continue
            unmarked = 0
            for batch in _batches(data):
                if batch.control:
                    unmarked = 0  # a COMMIT or ABORT marker ends the records before it
                else:
                    unmarked += sum(1 for o, _, _ in batch.records if o >= offset)
            total += unmarked
        return total

    def close(self) -> None:
        self.sock.close()


def topic_transaction_status(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    partitions = topic_partitions(bootstrap, [topic])[topic]
    return {
        (p, o): s
        for p in range(partitions)
        for o, s in transaction_status(bootstrap, topic, p).items()
    }
