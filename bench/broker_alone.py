"""The embedded broker alone: produce -> fetched latency per time window at a steady rate.

No application: one producer (paced, ``linger.ms`` as given, timestamp = wall clock at
``produce()``) and one consumer of the same topic (3 partitions by default), on a broker of its
own started for the run (``EmbeddedKafka``, so with the settings ``processor-api broker`` and
``--embedded-broker`` use). For each ``window_s`` of produce time it reports p50/p99/max of
fetched - produced (ms), records produced and fetched, the broker's CPU (% of one core) and
resident memory, and the producer's requests per second (librdkafka statistics). After the
last record it waits ``drain_s`` and counts what was read by then.

    python -m bench.broker_alone --rate 2000 --linger-ms 5 --seconds 60
    python -m bench.broker_alone --rate 2000 --linger-ms 5 --seconds 60 --save broker-alone

``--save NAME`` adds the run to ``bench/results/NAME-<date>.json`` (a list of runs).

``--transactional W`` measures what an exactly-once application's output costs the broker
alone: W transactional producers share the rate, each committing every ``--commit-ms``
(at the same wall-clock multiples, as the runtime's workers commit on Tansu), each writing
every partition (keys hashed by librdkafka's default partitioner: the common case of Python,
Go and .NET producers feeding the application) or, with ``--own-partitions``, only partition
``i % partitions``; the consumer reads ``read_committed``, so a record's latency is produced
-> visible, including its wait for its transaction's commit.

    python -m bench.broker_alone --rate 2000 --linger-ms 5 --seconds 60 --transactional 2

Clock: producer and consumer share this process, so one clock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, log, result_path

#: Bytes of each record's value (the key is ``key-NNNNN``).
VALUE_BYTES = 32
KEYS = 10_000


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _pct(values: list[int], q: float) -> int | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


class _Sampler(threading.Thread):
    """The broker's CPU seconds and RSS once a second, and the producer's request count."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []  # (wall s, cpu s, rss MiB)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((time.time(), _proc_cpu_s(self.pid), _proc_rss_mib(self.pid)))
            except OSError:
                return
            self.stop.wait(1.0)

    def between(self, start: float, end: float) -> tuple[float | None, float | None]:
        """Broker CPU (% of a core) over [start, end) and its RSS at the end."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return None, None
        first, last = inside[0], inside[-1]
        cpu = 100.0 * (last[1] - first[1]) / max(1e-9, last[0] - first[0])
        return round(cpu, 1), last[2]


def run(
    rate: int,
    linger_ms: float,
    seconds: float = 60.0,
    *,
    window_s: float = 10.0,
    drain_s: float = 5.0,
    partitions: int = 3,
    topic_config: dict[str, str] | None = None,
    consumer_config: dict[str, Any] | None = None,
    transactional: int = 0,
    commit_ms: float = 100.0,
    own_partitions: bool = False,
) -> dict[str, Any]:
    """One run on a fresh broker; see the module docs for what it reports."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from processor_api.testing.embedded import EmbeddedKafka

    topic = f"alone-{uuid.uuid4().hex[:8]}"
    with EmbeddedKafka() as broker:
        assert broker.pid is not None
        broker.create_topic(topic, partitions, topic_config)
        requests = [0]

        def on_stats(text: str) -> None:
            stats = json.loads(text)
            requests[0] = sum(
                b.get("tx", 0)
                for b in stats.get("brokers", {}).values()
                if b.get("nodeid", -1) >= 0
            )

        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "linger.ms": linger_ms,
                "queue.buffering.max.messages": 2_000_000,
                "statistics.interval.ms": 1000,
                "stats_cb": on_stats,
            }
        )
        if transactional:
            consumer_config = {"isolation.level": "read_committed", **(consumer_config or {})}
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": f"alone-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                **(consumer_config or {}),
            }
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        fetched: list[tuple[int, int]] = []  # (produced ms, fetched ms)
        stop_consumer = threading.Event()

        def consume() -> None:
            while not stop_consumer.is_set():
                messages = consumer.consume(10_000, timeout=0.05)
                now_ms = int(time.time() * 1000)
                for message in messages:
                    if message.error() is None:
                        fetched.append((message.timestamp()[1], now_ms))

        sampler = _Sampler(broker.pid)
        sampler.start()
        consumer_thread = threading.Thread(target=consume, daemon=True)
        consumer_thread.start()
        value = b"v" * VALUE_BYTES
        request_marks: list[tuple[float, int]] = []
        started_wall = time.time()
        started = time.monotonic()
        sent = 0
        next_mark = 0.0
        if transactional:
            sent = _transactional_producers(
                broker.bootstrap_servers, topic, rate, linger_ms, seconds, transactional,
                commit_ms, partitions if own_partitions else None,
            )  # fmt: skip
            request_marks = [(started_wall, 0), (time.time(), 0)]
        while not transactional:
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            if elapsed >= next_mark:
                request_marks.append((time.time(), requests[0]))
                next_mark += window_s
            due = int(rate * elapsed) + 1
            while sent < due:
                try:
                    producer.produce(
                        topic,
                        value,
                        b"key-%05d" % (sent % KEYS),
                        timestamp=int(time.time() * 1000),
                    )
                except BufferError:
                    producer.poll(0.01)
                    continue
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        ended_wall = time.time()
        producer.flush(30)
        producer.poll(1.5)  # one more statistics callback
        request_marks.append((ended_wall, requests[0]))
        deadline = time.monotonic() + drain_s
        while len(fetched) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        read_by_drain = len(fetched)
        stop_consumer.set()
        consumer_thread.join(timeout=5)
        consumer.close()
        sampler.stop.set()
        sampler.join(timeout=5)

    windows = []
    start_ms = int(started_wall * 1000)
    for index in range(int(seconds // window_s)):
        lo = start_ms + int(index * window_s * 1000)
        hi = lo + int(window_s * 1000)
        lat = sorted(f - p for p, f in fetched if lo <= p < hi)
        cpu, rss = sampler.between(lo / 1000, hi / 1000)
        req = (
            round(
                (request_marks[index + 1][1] - request_marks[index][1])
                / (request_marks[index + 1][0] - request_marks[index][0]),
                1,
            )
            if index + 1 < len(request_marks)
            else None
        )
        windows.append(
            {
                "from_s": round(index * window_s),
                "to_s": round((index + 1) * window_s),
                "fetched": len(lat),
                "p50_ms": _pct(lat, 0.5),
                "p99_ms": _pct(lat, 0.99),
                "max_ms": lat[-1] if lat else None,
                "broker_cpu_pct": cpu,
                "broker_rss_mib": rss,
                "producer_requests_per_s": req,
            }
        )
    return {
        "rate": rate,
        "linger_ms": linger_ms,
        "seconds": seconds,
        "partitions": partitions,
        "topic_config": topic_config or {},
        "transactional_producers": transactional,
        "commit_ms": commit_ms if transactional else None,
        "own_partitions": own_partitions if transactional else None,
        "consumer_config": consumer_config or {},
        "produced": sent,
        f"read_within_{drain_s:g}s_of_the_end": read_by_drain,
        "windows": windows,
        "loadavg_1m_at_end": os.getloadavg()[0],
    }


def _transactional_producers(
    bootstrap: str,
    topic: str,
    rate: int,
    linger_ms: float,
    seconds: float,
    producers: int,
    commit_ms: float,
    own_partitions: int | None,
) -> int:
    """``producers`` transactional producers, each in a thread, sharing ``rate`` for
    ``seconds`` and committing at every multiple of ``commit_ms`` of the wall clock; each
    writes every partition (librdkafka's default partitioner) or, with ``own_partitions``
    (the partition count), only its own. Returns the records committed."""
    from confluent_kafka import Producer

    value = b"v" * VALUE_BYTES
    counts = [0] * producers
    errors: list[BaseException] = []

    def produce(index: int) -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": linger_ms,
                "transactional.id": f"alone-{uuid.uuid4().hex[:8]}-{index}",
                "queue.buffering.max.messages": 2_000_000,
            }
        )
        try:
            producer.init_transactions(30)
            share = rate / producers
            started = time.monotonic()
            interval_s = commit_ms / 1000
            commit_at = (time.time() // interval_s + 1) * interval_s
            producer.begin_transaction()
            sent = in_transaction = 0
            while time.monotonic() - started < seconds:
                due = int(share * (time.monotonic() - started)) + 1
                while sent < due:
                    key = b"key-%05d" % ((sent * producers + index) % KEYS)
                    partition = -1 if own_partitions is None else index % own_partitions
                    try:
                        producer.produce(
                            topic, value, key, partition, timestamp=int(time.time() * 1000)
                        )
                    except BufferError:
                        producer.poll(0.01)
                        continue
                    sent += 1
                    in_transaction += 1
                producer.poll(0)
                if time.time() >= commit_at:
                    producer.commit_transaction(30)
                    counts[index] += in_transaction
                    in_transaction = 0
                    commit_at = (time.time() // interval_s + 1) * interval_s
                    producer.begin_transaction()
                time.sleep(0.002)
            producer.commit_transaction(30)
            counts[index] += in_transaction
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    if errors:
        raise RuntimeError(f"a transactional producer failed: {errors[0]!r}") from errors[0]
    return sum(counts)


def _save(name: str, result: dict[str, Any], command: str) -> Path:
    path = result_path(name)
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    runs.append({"command": command, **result})
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(_compact({"benchmark": "bench.broker_alone", "runs": runs}))
    return path


def _compact(payload: dict[str, Any]) -> str:
    """JSON with one line per run field and per window (the files stay small and readable)."""
    lines = ["{", f' "benchmark": {json.dumps(payload["benchmark"])},', ' "runs": [']
    for i, run in enumerate(payload["runs"]):
        fields = [f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in run.items() if k != "windows"]
        windows = ",\n".join(f"    {json.dumps(w)}" for w in run["windows"])
        fields.append(f'   "windows": [\n{windows}\n   ]')
        lines.append(
            "  {\n" + ",\n".join(fields) + "\n  }" + ("," if i + 1 < len(payload["runs"]) else "")
        )
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.broker_alone``: one run, printed as JSON (and saved with ``--save``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.broker_alone")
    parser.add_argument("--rate", type=int, default=2000, help="records/s (default 2000)")
    parser.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--drain-s", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--topic-config", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument(
        "--consumer-config", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument(
        "--save", metavar="NAME", help="add the run to bench/results/NAME-<date>.json"
    )
    parser.add_argument(
        "--transactional", type=int, default=0, metavar="W", help="W transactional producers"
    )
    parser.add_argument("--commit-ms", type=float, default=100.0)
    parser.add_argument(
        "--own-partitions", action="store_true", help="producer i writes only partition i"
    )
    args = parser.parse_args(argv)

    def pairs(items: list[str]) -> dict[str, str]:
        return dict(item.split("=", 1) for item in items)

    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    result = run(
        args.rate,
        args.linger_ms,
        args.seconds,
        window_s=args.window_s,
        drain_s=args.drain_s,
        partitions=args.partitions,
        topic_config=pairs(args.topic_config),
        consumer_config=pairs(args.consumer_config),
        transactional=args.transactional,
        commit_ms=args.commit_ms,
        own_partitions=args.own_partitions,
    )
    print(json.dumps(result, indent=1))
    if args.save:
        command = "python -m bench.broker_alone " + " ".join(argv or sys.argv[1:])
        log(f"saved to {_save(args.save, result, command)}")


if __name__ == "__main__":
    main()
