"""Reliability harness (issue 4): run ``run-topology`` in a subprocess, kill it at well-defined
moments, and compare what a ``read_committed`` reader sees with a reference fold of the input.

Used by the crash / bad-input / shutdown tests in this directory and by
``python -m tests.reliability.soak``.

* :class:`CliRun` starts ``python -m processor_api.cli`` in its own session with
  ``--log-format json``, parses its structlog events from stderr in a thread (JSON lines, and
  the ``key='value'`` lines that Spark workers' module-level loggers print, see
  ``test_logging.py``), lets a caller wait for an event and ``kill -9`` the *whole process
  tree*: the CLI's process group (driver + JVM) and the process group of PySpark's worker
  daemon, which puts itself in a group of its own.
* :func:`read_topic` reads a topic from offset 0 to its end like any consumer
  (``read_committed`` by default).
* :func:`transaction_status` reads the raw log of a partition with a minimal Kafka Fetch (v4)
  client and classifies every data record by the transaction control records that follow it:
  ``committed``, ``aborted``, ``open`` or ``plain`` (non-transactional). A Kafka broker hides
  aborted records from ``read_committed`` readers (the Fetch response lists aborted
  transactions); Tansu does not (measured: it sends no aborted-transaction list, though it
  writes the abort markers), so on Tansu a ``read_committed`` reader sees aborted records.
  With this classification a test can tell "the runtime produced a duplicate" from "Tansu shows
  a record of an aborted transaction".
* :func:`expected_notifications`, :func:`fold_totals` and :func:`compare` implement the
  reference fold of seed 000's sales aggregation and the exactly-once / at-least-once checks.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from processor_api.kafka.admin import client_config, topic_partitions
from processor_api.kafka.producer import DeliveryTracker, make_producer

REPO_ROOT = Path(__file__).resolve().parents[2]
SALES = "topologies.sales_aggregation:build_topology"
PACED_SALES = "tests.reliability.topologies_for_tests:build_paced_sales"
SALES_STORE = "PRODUCT_AGGREGATED_SALES"
THRESHOLD = 2000


def uid() -> str:
    return uuid.uuid4().hex[:10]


# ---------------------------------------------------------------------------- structlog lines

_KV = re.compile(r"""(\w+)=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")


def parse_log_line(line: str) -> dict[str, Any] | None:
    """One structlog event from a stderr line (JSON or ``key='value'``), or None."""
    for segment in line.split("\r"):
        segment = segment.strip()
        if segment.startswith("{") and '"event"' in segment:
            try:
                event = json.loads(segment)
            except ValueError:
                continue
            if isinstance(event, dict):
                return event
        start = segment.find("timestamp=")
        if start >= 0 and " event=" in segment:
            event = {}
            for key, raw in _KV.findall(segment[start:]):
                try:
                    event[key] = ast.literal_eval(raw)
                except (ValueError, SyntaxError):
                    event[key] = raw
            if "event" in event:
                event["_console_format"] = True
                return event
    return None


# ----------------------------------------------------------------------------- process tree


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) of every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields_ = stat[stat.rfind(")") + 2 :].split()
        table[int(entry)] = (int(fields_[1]), int(fields_[2]))
    return table


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (children, grandchildren, ...)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> set[int]:
    """Send ``sig`` to the process group of ``pid``, to every descendant and to its group;
    returns the process groups signalled. Call it while ``pid`` is not reaped yet.

    PySpark's worker daemon calls ``setpgid(0, 0)``, so killing the CLI's group alone would
    leave the Python workers running a task (holding its lock, producing) until the daemon
    notices its JVM is gone. A crash kills them all at once; so does this.
    """
    tree = descendants(pid)
    table = _proc_table()
    groups = {pid} | {table[p][1] for p in tree if p in table}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
    for child in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, sig)
    return groups


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return b") Z " not in handle.read()
    except OSError:
        return False


# ----------------------------------------------------------------------------- the CLI run


class RunEnded(Exception):
    """The process exited before the awaited event appeared."""


@dataclass
class LoggedEvent:
    index: int
    at: float  # monotonic seconds
    event: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.event.get("event"))


class CliRun:
    """``python -m processor_api.cli ARGS`` in its own session; stderr parsed into events."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.args = list(args)
        self.log_path = log_path
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen[str] | None = None
        self.events: list[LoggedEvent] = []
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self.started_at = 0.0
        self.ended_at: float | None = None
        self.killed_with: int | None = None
        self.descendants_at_kill: list[int] = []

    # -- lifecycle
    def start(self) -> CliRun:
        environment = dict(os.environ)
        paths = [
            str(REPO_ROOT),
            *[
                p
                for p in environment.get("PYTHONPATH", "").split(os.pathsep)
                if p and p != str(REPO_ROOT)
            ],
        ]
        environment["PYTHONPATH"] = os.pathsep.join(paths)
        environment.update(self.extra_env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "processor_api.cli", *self.args],
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="cli-stderr")
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"### {' '.join(self.args)}\n")
            for line in self.process.stdout:
                log.write(line)
                event = parse_log_line(line)
                with self._cond:
                    self.lines.append(line.rstrip("\n"))
                    if event is not None:
                        self.events.append(LoggedEvent(len(self.events), time.monotonic(), event))
                    self._cond.notify_all()
        self.process.wait()
        with self._cond:
            self.ended_at = time.monotonic()
            self._cond.notify_all()

    def __enter__(self) -> CliRun:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill9()
        if self._reader is not None:
            self._reader.join(30)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- waiting
    def wait_event(
        self,
        predicate: Callable[[LoggedEvent], bool] | str,
        timeout_s: float,
        after: int = 0,
    ) -> LoggedEvent:
        """The first event (index >= ``after``) matching ``predicate`` (an event name or a
        function). Raises :class:`RunEnded` if the process exits first, ``TimeoutError`` after
        ``timeout_s``."""
        if isinstance(predicate, str):
            name = predicate
            predicate = lambda e: e.name == name  # noqa: E731
        deadline = time.monotonic() + timeout_s
        position = after
        with self._cond:
            while True:
                while position < len(self.events):
                    candidate = self.events[position]
                    position += 1
                    if predicate(candidate):
                        return candidate
                if self.ended_at is not None:
                    raise RunEnded(f"exited with {self.returncode} before the event")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no such event within {timeout_s:g}s; {self.tail()}")
                self._cond.wait(min(remaining, 0.5))

    def wait(self, timeout_s: float) -> int:
        """Wait for the process to exit; kill the tree and fail after ``timeout_s``."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise TimeoutError(
                f"run-topology did not exit within {timeout_s:g}s; {self.tail()}"
            ) from None
        if self._reader is not None:
            self._reader.join(30)
        return code

    # -- signals
    def kill9(self) -> float:
        """``kill -9`` the whole tree; returns the monotonic time of the kill."""
        assert self.process is not None
        self.descendants_at_kill = descendants(self.pid)
        at = time.monotonic()
        groups = kill_tree(self.pid, signal.SIGKILL)
        self.killed_with = signal.SIGKILL
        self.process.wait(30)
        # stragglers (e.g. a worker forked meanwhile): live members of the groups signalled;
        # a group id cannot be reused while it has members, so these are ours
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = [p for p, (_, group) in _proc_table().items() if group in groups and _alive(p)]
            if not left:
                break
            for straggler in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(straggler, signal.SIGKILL)
            time.sleep(0.05)
        if self._reader is not None:
            self._reader.join(30)
        return at

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the CLI process only (as ``kill PID`` does)."""
        os.kill(self.pid, sig)

    # -- reporting
    def names(self, after: int = 0) -> list[str]:
        with self._cond:
            return [e.name for e in self.events[after:]]

    def find(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e.event for e in self.events if e.name == name]

    def error_line(self) -> str | None:
        """The ``run-topology: error|failed: ...`` line, if any."""
        with self._cond:
            lines = [line for line in self.lines if line.startswith("run-topology: ")]
        return lines[-1] if lines else None

    def tail(self, lines: int = 25) -> str:
        with self._cond:
            text = "\n".join(self.lines[-lines:])
        return f"log {self.log_path}; last lines:\n{text}"


def cli_args(
    topology: str,
    bootstrap: str,
    app_id: str,
    state_dir: Path,
    checkpoint_dir: Path | None = None,
    *,
    guarantee: str = "at_least_once",
    available_now: bool = True,
    max_records_per_batch: int | None = None,
    topology_args: dict[str, Any] | None = None,
    config: dict[str, str] | None = None,
    extra: Iterable[str] = (),
) -> list[str]:
    args = [
        topology,
        "--bootstrap-servers",
        bootstrap,
        "--application-id",
        app_id,
        "--state-dir",
        str(state_dir),
        "--master",
        "local[2]",
        "--log-format",
        "json",
        "--processing-guarantee",
        guarantee,
        "--trigger-interval",
        "0.5",
        "--spark-conf",
        "spark.ui.showConsoleProgress=false",
    ]
    if checkpoint_dir is not None:
        args += ["--checkpoint-dir", str(checkpoint_dir)]
    if available_now:
        args.append("--available-now")
    if max_records_per_batch:
        args += ["--max-records-per-batch", str(max_records_per_batch)]
    for key, value in (topology_args or {}).items():
        text = value if isinstance(value, str) else json.dumps(value)
        args += ["--topology-arg", f"{key}={text}"]
    for key, value in (config or {}).items():
        args += ["--config", f"{key}={value}"]
    return [*args, *extra]


# ------------------------------------------------------------------------------ input data


@dataclass(frozen=True)
class Sale:
    product: str
    value: int
    timestamp: int


def make_sales(
    count: int, products: int, seed: int, start_ts: int = 1_700_000_000_000
) -> list[Sale]:
    """``count`` sales over ``products`` products, values 1..199 (deterministic)."""
    rnd = random.Random(seed)
    names = [f"product-{i:04d}" for i in range(products)]
    return [Sale(rnd.choice(names), rnd.randint(1, 199), start_ts + i) for i in range(count)]


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int | None, int | None]],
) -> int:
    """Produce ``(key, value, partition, timestamp)``; wait for every acknowledgement."""
    tracker = DeliveryTracker(make_producer(bootstrap))
    count = 0
    for key, value, partition, timestamp in records:
        tracker.produce(topic, key, value, partition=partition, timestamp=timestamp)
        count += 1
        if count % 5000 == 0:
            tracker.producer.poll(0)
    tracker.flush_and_check(60)
    return count


def produce_sales(bootstrap: str, topic: str, sales: list[Sale]) -> int:
    """The seed's wire format: key = product, value = JSON ``{"product", "value"}`` string."""
    return produce_records(
        bootstrap,
        topic,
        (
            (
                s.product.encode(),
                json.dumps({"product": s.product, "value": s.value}).encode(),
                None,
                s.timestamp,
            )
            for s in sales
        ),
    )


def fold_totals(sales: Iterable[Sale]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for sale in sales:
        totals[sale.product] += sale.value
    return dict(totals)


def expected_notifications(
    sales: Iterable[Sale], threshold: int = THRESHOLD
) -> dict[str, list[int]]:
    """Per product, the running totals >= ``threshold`` in input order (one per update).

    All sales of a product have the same key, so they are in one partition, in produce order.
    """
    running: Counter[str] = Counter()
    expected: dict[str, list[int]] = {}
    for sale in sales:
        running[sale.product] += sale.value
        if running[sale.product] >= threshold:
            expected.setdefault(sale.product, []).append(running[sale.product])
    return expected


# --------------------------------------------------------------------------- reading topics


@dataclass
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    isolation: str = "read_committed",
    timeout_s: float = 60.0,
) -> list[ReadRecord]:
    """Every record a consumer with ``isolation`` gets, from offset 0 to the end (EOF on every
    partition; under ``read_committed`` the end is the last stable offset)."""
    partitions = topic_partitions(bootstrap, [topic])[topic]
    consumer = Consumer(
        client_config(
            bootstrap,
            "reliability-reader",
            **{
                "group.id": f"reliability-{uid()}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation,
                "fetch.wait.max.ms": 50,
            },
        )
    )
    records: list[ReadRecord] = []
    done: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"reading {topic}: partitions {sorted(done)} of "
                    f"{partitions} reached their end within {timeout_s:g}s"
                )
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done.add(message.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {error}")
                done.discard(message.partition())
                records.append(
                    ReadRecord(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        list(message.headers() or []),
                    )
                )
    finally:
        consumer.close()
    return records


# ----------------------------------------------------- raw log: transaction status of records


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
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    status: dict[int, str] = {}
    pending: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    offset = 0
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, int(port)), timeout=10) as sock:
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
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        marks = {}
        for partition in range(partitions):
            error, high_watermark, _ = _fetch_raw(sock, topic, partition, 0, 1, max_wait_ms=100)
            if error:
                raise RuntimeError(f"raw fetch {topic}[{partition}]: error {error}")
            marks[partition] = high_watermark
        return marks


class OutputWatch:
    """Polls partitions of a topic (raw Fetch, one connection) for data records at or after
    given offsets, committed or not: the records of an open transaction count too."""

    def __init__(self, bootstrap: str, topic: str, start: dict[int, int]) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
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
            for batch in _batches(data):
                if not batch.control:
                    total += sum(1 for o, _, _ in batch.records if o >= offset)
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


# ------------------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    """Reference fold vs what a reader saw, summed over products.

    * ``expected``/``seen``: notification records;
    * ``missing``: expected (product, total) pairs never seen;
    * ``extra``: records beyond the expected multiset (duplicates, or totals that should not
      exist); ``wrong``: seen (product, total) pairs that are not expected at all;
    * ``order_violations`` (at-least-once): a product's sequence jumping ahead past a total it
      had not emitted yet (see :func:`compare`);
    * ``equal``: every product's sequence equals the expected one;
    * ``totals_equal``: the final store totals equal the fold and each product's last
      notification is its final total (when >= threshold).
    """

    expected: int = 0
    seen: int = 0
    missing: int = 0
    extra: int = 0
    wrong: int = 0
    order_violations: int = 0
    equal: bool = False
    totals_equal: bool = False
    examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def notifications_by_product(records: Iterable[ReadRecord]) -> dict[str, list[int]]:
    """Per product, the notified totals in (partition, offset) order."""
    seen: dict[str, list[int]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        product = record.key.decode() if record.key is not None else None
        value = json.loads(record.value)["value"] if record.value is not None else None
        seen.setdefault(product, []).append(value)
    return seen


def compare(
    expected: dict[str, list[int]],
    seen: dict[str, list[int]],
    guarantee: str,
    totals: dict[str, int],
    store: dict[str, int] | None,
    threshold: int = THRESHOLD,
) -> Comparison:
    """Exactly-once: every product's notified totals equal the expected list.

    At-least-once: no (product, total) is missing or wrong (every seen total is an expected
    one), and each product's sequence is a concatenation of runs ``E[s:e]`` of its expected
    list ``E`` where each run starts at or before the end of the previous one (a re-run
    re-emits from the last committed position, never skips ahead). Running totals of a product
    strictly increase, so each total has one index in ``E``.

    Both: the final store equals the fold, and the last notification of each product is its
    final total if that is >= ``threshold``.
    """
    result = Comparison()
    result.expected = sum(len(v) for v in expected.values())
    result.seen = sum(len(v) for v in seen.values())
    result.equal = True
    for product in sorted(set(expected) | set(seen), key=str):
        want, got = expected.get(product, []), seen.get(product, [])
        if want != got:
            result.equal = False
        missing = Counter(want) - Counter(got)
        extra = Counter(got) - Counter(want)
        result.missing += sum(missing.values())
        result.extra += sum(extra.values())
        index = {total: i for i, total in enumerate(want)}
        wrong = [t for t in got if t not in index]
        result.wrong += len(wrong)
        position = 0
        for total in got:
            i = index.get(total)
            if i is None:
                continue
            if i > position:
                result.order_violations += 1
            position = i + 1
        if (missing or extra or wrong) and len(result.examples) < 5:
            result.examples.append(
                f"{product}: missing {sorted(missing.elements())[:5]} extra "
                f"{sorted(extra.elements())[:5]} wrong {wrong[:5]}"
            )
    last_ok = all(
        (seen.get(p) or [None])[-1] == total for p, total in totals.items() if total >= threshold
    )
    result.totals_equal = store == totals and last_ok if store is not None else last_ok
    if guarantee == "exactly_once_v2":
        result.order_violations = 0 if result.equal else result.order_violations
    return result


def is_ok(comparison: Comparison, guarantee: str) -> bool:
    if guarantee == "exactly_once_v2":
        return comparison.equal and comparison.totals_equal
    return (
        comparison.missing == 0
        and comparison.wrong == 0
        and comparison.order_violations == 0
        and comparison.totals_equal
    )


# ------------------------------------------------------------------------- crash scenarios

KILL_KINDS = ("mid_batch", "between_batches", "restore", "state_dir_deleted")


@dataclass
class KillRecord:
    kind: str
    run: int
    done: bool  # False: the run finished before the kill point
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class CrashReport:
    guarantee: str
    events: int
    products: int
    runs: int = 0
    kills: list[KillRecord] = field(default_factory=list)
    read_committed: Comparison | None = None  # what a read_committed reader sees (on Tansu)
    committed_only: Comparison | None = None  # aborted records filtered by their markers
    output_status: dict[str, int] = field(default_factory=dict)
    aborted_visible: int = 0  # records Tansu shows a read_committed reader though aborted
    aborted_markers: int = 0  # aborted records on the commit-marker topic
    store_totals_equal: bool = False
    duration_s: float = 0.0
    logs: str = ""

    def kills_by_kind(self) -> dict[str, int]:
        counts = Counter(k.kind for k in self.kills if k.done)
        return {kind: counts.get(kind, 0) for kind in KILL_KINDS}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kills_by_kind"] = self.kills_by_kind()
        return data


class CrashScenario:
    """Seed 000's sales aggregation under ``run-topology --available-now``, killed and
    restarted: ``kills`` is the sequence of kill kinds, then one last run to the end."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        guarantee: str,
        sales: list[Sale],
        *,
        partitions: int = 3,
        max_records_per_batch: int = 400,
        seed: int = 0,
        run_timeout_s: float = 420.0,
        mid_batch_wait_s: float = 3.0,
        pause_ms: float = 0.0,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.guarantee = guarantee
        self.sales = sales
        self.partitions = partitions
        self.max_records_per_batch = max_records_per_batch
        self.rnd = random.Random(seed)
        self.run_timeout_s = run_timeout_s
        self.mid_batch_wait_s = mid_batch_wait_s
        self.pause_ms = pause_ms  # > 0: the paced variant of seed 000's topology
        self.log = log
        run_id = uid()
        self.input_topic = f"crash-sales-{run_id}"
        self.output_topic = f"crash-notes-{run_id}"
        self.app_id = f"crash-{guarantee.split('_')[0]}-{run_id}"
        self.state_dir = workdir / "state"
        self.checkpoint_dir = workdir / "spark-checkpoint"  # outside the state dir
        self.log_path = workdir / "run-topology.log"
        self.report = CrashReport(
            guarantee, len(sales), len({s.product for s in sales}), logs=str(self.log_path)
        )

    def args(self) -> list[str]:
        topology_args: dict[str, Any] = {
            "input_topic": self.input_topic,
            "output_topic": self.output_topic,
        }
        if self.pause_ms:
            topology_args["pause_ms"] = self.pause_ms
        return cli_args(
            PACED_SALES if self.pause_ms else SALES,
            self.bootstrap,
            self.app_id,
            self.state_dir,
            self.checkpoint_dir,
            guarantee=self.guarantee,
            max_records_per_batch=self.max_records_per_batch,
            topology_args=topology_args,
        )

    def setup(self) -> None:
        from processor_api.kafka.admin import TopicSpec, create_topics

        create_topics(
            self.bootstrap,
            [
                TopicSpec(self.input_topic, self.partitions, {}),
                TopicSpec(self.output_topic, self.partitions, {}),
            ],
            exist_ok=False,
        )
        produce_sales(self.bootstrap, self.input_topic, self.sales)

    # -- kill points
    def _committed_batches(self) -> set[int]:
        commits = self.checkpoint_dir / "commits"
        if not commits.exists():
            return set()
        return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}

    def _kill(self, run: CliRun, kind: str, number: int) -> KillRecord:
        record = KillRecord(kind, number, done=False)
        timeout = self.run_timeout_s
        try:
            if kind in ("mid_batch", "state_dir_deleted"):
                # after >= 1 batch of this run committed, so the changelog positions in
                # GroupState are > 0 and the next start has something to restore
                skip = self.rnd.randint(1, 2)
                after = 0
                for _ in range(skip):
                    after = (
                        run.wait_event(
                            lambda e: e.name == "batch_done" and e.event.get("records", 0) > 0,
                            timeout,
                            after,
                        ).index
                        + 1
                    )
                hit = run.wait_event(
                    lambda e: e.name == "task_batch_done" and e.event.get("records", 0) > 0,
                    timeout,
                    after,
                )
                # kill once the next task has produced output records that are not committed
                # yet (its open transaction, under exactly-once); if it produces none within
                # the bound, kill anyway
                marks = high_watermarks(self.bootstrap, self.output_topic, self.partitions)
                deadline = time.monotonic() + self.mid_batch_wait_s
                produced = 0
                watch = OutputWatch(self.bootstrap, self.output_topic, marks)
                try:
                    while time.monotonic() < deadline and run.is_alive():
                        produced = watch.count()
                        if produced:
                            break
                        time.sleep(0.001)
                finally:
                    watch.close()
                if not run.is_alive():
                    raise RunEnded("ended while waiting for output")
                record.detail = {
                    "after_batches": skip,
                    "task": hit.event.get("task"),
                    "output_in_flight": produced,
                }
            elif kind == "between_batches":
                skip = self.rnd.randint(0, 2)
                after = 0
                while True:
                    done = run.wait_event("batch_done", timeout, after)
                    after = done.index + 1
                    if skip == 0 and done.event.get("records", 0) > 0:
                        break
                    skip -= 1 if done.event.get("records", 0) > 0 else 0
                batch = int(done.event["batch"])
                deadline = time.monotonic() + 30
                while batch not in self._committed_batches():
                    if time.monotonic() > deadline or not run.is_alive():
                        raise RunEnded(f"batch {batch} was never committed")
                    time.sleep(0.005)
                record.detail = {"batch": batch}
            elif kind == "restore":
                hit = run.wait_event("restore_start", timeout)
                record.detail = {
                    "task": hit.event.get("task"),
                    "end_offset": hit.event.get("end_offset"),
                }
            else:
                raise ValueError(kind)
        except RunEnded:
            self.log(f"  run {number} ended before the {kind} kill point")
            return record
        run.kill9()
        record.done = True
        if kind == "restore":
            # did the kill land while a restore was in flight? (restore_start without done)
            started = {e["task"] for e in run.find("restore_start")}
            finished = {e["task"] for e in run.find("restore_done")}
            record.detail["in_flight"] = sorted(started - finished)
        if kind == "state_dir_deleted":
            shutil.rmtree(self.state_dir, ignore_errors=True)
        return record

    # -- the scenario
    def run(self, kills: list[str]) -> CrashReport:
        started = time.monotonic()
        self.setup()
        number = 0
        for kind in kills:
            number += 1
            with CliRun(self.args(), self.log_path) as run:
                record = self._kill(run, kind, number)
                self.report.kills.append(record)
                self.log(f"  run {number}: kill {kind} done={record.done} {record.detail}")
                if not record.done:
                    code = run.wait(60)
                    if code != 0:
                        raise AssertionError(f"run {number} exited {code}; {run.tail()}")
        number += 1
        with CliRun(self.args(), self.log_path) as run:
            code = run.wait(self.run_timeout_s)
            if code != 0:
                raise AssertionError(f"final run exited {code}; {run.tail()}")
        self.report.runs = number
        self.evaluate()
        self.report.duration_s = round(time.monotonic() - started, 1)
        return self.report

    def evaluate(self) -> CrashReport:
        from processor_api.serdes import Serdes
        from processor_api.state.inspect import read_local_store

        expected = expected_notifications(self.sales)
        totals = fold_totals(self.sales)
        store = read_local_store(
            self.state_dir, self.app_id, SALES_STORE, Serdes.string(), Serdes.long()
        )
        self.report.store_totals_equal = store == totals
        records = read_topic(self.bootstrap, self.output_topic)
        status = topic_transaction_status(self.bootstrap, self.output_topic)
        self.report.output_status = dict(Counter(status.values()))
        visible = notifications_by_product(records)
        self.report.read_committed = compare(expected, visible, self.guarantee, totals, store)
        kept = [r for r in records if status.get((r.partition, r.offset)) != "aborted"]
        self.report.aborted_visible = len(records) - len(kept)
        self.report.committed_only = compare(
            expected, notifications_by_product(kept), self.guarantee, totals, store
        )
        if self.guarantee == "exactly_once_v2":
            markers = topic_transaction_status(self.bootstrap, f"{self.app_id}-task-commits")
            self.report.aborted_markers = sum(1 for s in markers.values() if s == "aborted")
        return self.report


# ------------------------------------------------------------------------ committed records


def committed_records(bootstrap: str, topic: str) -> tuple[list[ReadRecord], list[ReadRecord]]:
    """(records a Kafka-compliant ``read_committed`` reader gets, records Tansu's
    ``read_committed`` reader gets although their transaction was aborted)."""
    records = read_topic(bootstrap, topic)
    status = topic_transaction_status(bootstrap, topic)
    kept = [r for r in records if status.get((r.partition, r.offset)) != "aborted"]
    aborted = [r for r in records if status.get((r.partition, r.offset)) == "aborted"]
    return kept, aborted


def create_topics_now(bootstrap: str, topics: dict[str, int]) -> None:
    from processor_api.kafka.admin import TopicSpec, create_topics

    create_topics(bootstrap, [TopicSpec(name, n, {}) for name, n in topics.items()], exist_ok=False)
