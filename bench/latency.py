"""Latency, end to end: produce -> count per key -> output visible, at a steady input rate.

Every contender runs continuously (not available-now) on a fresh input topic (3 partitions,
10,000 keys) and forwards each new ``(key, count)`` to a fresh output topic with the input
record's timestamp (Kafka Streams semantics: a forwarded record keeps its timestamp; Quix
Streams' ``to_topic`` and the hand loop do the same). The harness

1. starts the contender and produces a trickle (20 records/s) until the first output is seen
   (so start-up and worker start are not measured);
2. produces at the fixed rate (``linger.ms`` 5, librdkafka's default; timestamp = wall clock at
   ``produce()``) for ``settle_s`` (not measured) and then ``measure_s`` seconds;
3. reads the output topic all along (``fetch.wait.max.ms`` 5): latency of an output record =
   wall clock when the consumer got it - its timestamp, for the records produced during the
   measured window; waits up to ``drain_s`` for the last of them, then stops the contender
   (SIGTERM; SIGKILL after 60 s).

Reported per contender and rate: p50, p90, p99, max (ms), records out of the window that
never showed up (``missing``), medians over the repetitions. Contenders:

* ``processor_api epochs`` and ``processor_api epochs exactly_once_v2``: ``run-topology
  topologies.count_per_key:build_topology --master local[2]`` with ``output_topic`` set, under
  at_least_once and exactly_once_v2 (named for the runtime when there were two; the names are
  kept so that recorded results match. The micro-batch runtime's ``processor_api
  trigger=Xs`` contenders went with it);
* ``hand_loop``: ``bench/latency_hand.py`` (confluent-kafka + rocksdict, produce per record);
* ``quixstreams``: ``bench/quix_count.py --output-topic`` (stateful ``apply`` + ``to_topic``);
* ``broker alone``: no application; the probe reads its own input topic, so the figures are the
  broker's share of every other contender's latency (one hop of two) in the same conditions.

Why the probe lingers 5 ms and not 1: the embedded broker (Tansu, memory storage) pays per
request in proportion to the record batches its partition already holds. With the probe alone
at 2,000 records/s and ``linger.ms`` 1 (about 1,000 produce requests/s) it used 110 % of a core
within 10 s and its own produce -> fetch latency grew past 3 s within 20 s; with ``linger.ms``
5 the same load took 36 % -> 81 % of a core over 15 s at a p99 of 59-66 ms (fresh topics per
run keep runs apart: the cost is per partition). So the harness' own requests must stay few,
or every contender measures the broker falling behind.

Clock: producer, consumer and contenders run on this machine (loopback), so one clock.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    BENCH_DIR,
    PYTHON,
    QUIX_VENV,
    RAW_DIR,
    REPO_DIR,
    RUN_MARKER,
    Broker,
    key_for,
    leftover_processes,
    log,
    stats,
)
from bench.throughput import KEYS, MASTER, PARTITIONS, TOPIC_CONFIG, run_topology_bin

EPOCHS_ALOS = "processor_api epochs"
EPOCHS_EOS = "processor_api epochs exactly_once_v2"
BROKER_ALONE = "broker alone"
#: The probe's ``linger.ms`` (see the module docs).
PROBE_LINGER_MS = 5
#: How the probe places input records: the Java client's partitioner by default (each count
#: task then writes its own output partition); ``BENCH_INPUT_PARTITIONER=consistent_random``
#: is librdkafka's default, which Python, Go and .NET producers use (every task then writes
#: every output partition: under exactly_once_v2, transactions overlap on them).
INPUT_PARTITIONER = os.environ.get("BENCH_INPUT_PARTITIONER", "murmur2_random")
TRICKLE_RATE = 20
READY_TIMEOUT_S = 120.0


def contender_cmds(
    bootstrap: str, in_topic: str, out_topic: str, state_dir: str
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each contender's command and extra environment (``broker alone``: no command)."""

    def run_topology(*flags: str) -> tuple[list[str], dict[str, str]]:
        command = [
            run_topology_bin(),
            "topologies.count_per_key:build_topology",
            "--bootstrap-servers",
            bootstrap,
            "--application-id",
            f"lat-{uuid.uuid4().hex[:8]}",
            "--state-dir",
            state_dir,
            "--master",
            MASTER,
            *flags,
            "--topology-arg",
            f"input_topic={json.dumps(in_topic)}",
            "--topology-arg",
            f"output_topic={json.dumps(out_topic)}",
        ]
        return command, {}

    cmds: dict[str, tuple[list[str], dict[str, str]]] = {}
    cmds[EPOCHS_ALOS] = run_topology()
    cmds[EPOCHS_EOS] = run_topology("--processing-guarantee", "exactly_once_v2")
    cmds[BROKER_ALONE] = ([], {})
    cmds["hand_loop"] = (
        [
            PYTHON,
            "-m",
            "bench.latency_hand",
            "--bootstrap",
            bootstrap,
            "--topic",
            in_topic,
            "--output-topic",
            out_topic,
            "--state-dir",
            state_dir,
        ],
        {},
    )
    if (QUIX_VENV / "bin" / "python").exists():
        cmds["quixstreams"] = (
            [
                str(QUIX_VENV / "bin" / "python"),
                str(BENCH_DIR / "quix_count.py"),
                "--bootstrap",
                bootstrap,
                "--topic",
                in_topic,
                "--output-topic",
                out_topic,
                "--state-dir",
                state_dir,
            ],
            {},
        )
    return cmds


class _Probe:
    """The harness' producer (paced) and output consumer (latencies) for one run."""

    def __init__(self, bootstrap: str, in_topic: str, out_topic: str) -> None:
        from confluent_kafka import Consumer, Producer

        self.in_topic = in_topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": PROBE_LINGER_MS,
                "partitioner": INPUT_PARTITIONER,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-probe-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 5,
            }
        )
        from confluent_kafka import TopicPartition

        self.consumer.assign([TopicPartition(out_topic, p, 0) for p in range(PARTITIONS)])
        self.first_output = threading.Event()
        self.window = (float("inf"), float("inf"))  # [start_ms, end_ms) of measured produce ts
        self.latencies: list[int] = []
        self.outputs = 0
        self._stop_consumer = threading.Event()
        self._consumer_thread = threading.Thread(target=self._consume, daemon=True)
        self._consumer_thread.start()
        self.produced = 0
        self.produced_in_window = 0

    def _consume(self) -> None:
        consume = self.consumer.consume
        while not self._stop_consumer.is_set():
            messages = consume(10_000, timeout=0.05)
            now_ms = time.time() * 1000.0
            start, end = self.window
            for message in messages:
                if message.error() is not None:
                    continue
                self.outputs += 1
                ts = message.timestamp()[1]
                if start <= ts < end:
                    self.measured(ts, int(now_ms - ts))
            if messages:
                self.first_output.set()

    def measured(self, produced_ms: int, latency_ms: int) -> None:
        """One output record of the measured window: its input's produce time, its latency."""
        self.latencies.append(latency_ms)

    def findings(self) -> dict[str, Any]:
        """What a probe that looks further (a subclass) adds to the run's result."""
        return {}

    def produce_for(self, rate: float, seconds: float, until: threading.Event | None = None):
        """Produce ``rate`` records/s for ``seconds`` (or until ``until`` is set)."""
        produce, poll = self.producer.produce, self.producer.poll
        value = b"v" * 32
        started = time.monotonic()
        sent = 0
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= seconds or (until is not None and until.is_set()):
                break
            due = int(rate * elapsed) + 1
            while sent < due:
                ts = int(time.time() * 1000)
                try:
                    produce(self.in_topic, value, key_for(self.produced, KEYS), timestamp=ts)
                except BufferError:
                    poll(0.01)
                    continue
                sent += 1
                self.produced += 1
            poll(0)
            time.sleep(0.002)
        self.producer.flush(30)
        return sent

    def close(self) -> None:
        self._stop_consumer.set()
        self._consumer_thread.join(timeout=5)
        self.consumer.close()


def _stop(proc: subprocess.Popen | None) -> int | None:
    if proc is None:
        return None
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return proc.poll()
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def run_one(
    broker: Broker,
    name: str,
    rate: int,
    rep: int,
    settle_s: float,
    measure_s: float,
    drain_s: float,
    *,
    extra_flags: Sequence[str] = (),
    probe_type: type[_Probe] = _Probe,
    raw_dir: Path = RAW_DIR,
    library_dir: Path = REPO_DIR,
    label_suffix: str = "",
) -> dict[str, Any]:
    """One run of contender ``name`` at ``rate`` (see the module docs); ``extra_flags`` go
    to its command, ``probe_type`` measures it, its log goes to ``raw_dir``. ``library_dir``:
    the source tree the contender runs (a checkout of an earlier commit for a before/after
    comparison: it becomes the command's ``PYTHONPATH`` and working directory)."""
    tag = f"{rate}-{rep}-{uuid.uuid4().hex[:6]}"
    in_topic, out_topic = f"lat-in-{tag}", f"lat-out-{tag}"
    broker.create_topic(in_topic, PARTITIONS, TOPIC_CONFIG)
    broker.create_topic(out_topic, PARTITIONS, TOPIC_CONFIG)
    state_dir = tempfile.mkdtemp(prefix="bench-lat-")
    cmd, env = contender_cmds(broker.bootstrap, in_topic, out_topic, state_dir)[name]
    if cmd:
        cmd = [*cmd, *extra_flags]
    if library_dir != REPO_DIR:
        env = {**env, "PYTHONPATH": str(library_dir)}
    raw_dir.mkdir(parents=True, exist_ok=True)
    label = name.replace(" ", "_").replace("=", "") + label_suffix
    log_path = raw_dir / f"latency-{rate}-{label}-{rep}.log"
    probe = probe_type(broker.bootstrap, in_topic, out_topic if cmd else in_topic)
    marker = uuid.uuid4().hex
    started = time.monotonic()
    with open(log_path, "w") as err:
        err.write("$ " + (" ".join(cmd) or "(no application: the probe reads its input)") + "\n")
        err.flush()
        proc = (
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=library_dir,
                env={**os.environ, **env, RUN_MARKER: marker},
                start_new_session=True,
            )
            if cmd
            else None
        )
        result: dict[str, Any] = {"contender": name, "rate": rate, "rep": rep, "log": str(log_path)}
        try:
            probe.produce_for(TRICKLE_RATE, READY_TIMEOUT_S, until=probe.first_output)
            if not probe.first_output.is_set():
                result["error"] = f"no output within {READY_TIMEOUT_S:g}s"
                return result
            result["first_output_after_s"] = round(time.monotonic() - started, 2)
            probe.produce_for(rate, settle_s)
            window_start = int(time.time() * 1000)
            probe.window = (window_start, float("inf"))
            sent = probe.produce_for(rate, measure_s)
            probe.window = (window_start, time.time() * 1000)
            deadline = time.monotonic() + drain_s
            while len(probe.latencies) < sent and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            code = _stop(proc)
            probe.close()
            time.sleep(1.0)
            left = leftover_processes(marker)
            result["leftover_processes"] = len(left)
            for pid in left:  # processes of this run only (the marker is in their environment)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    lat = sorted(probe.latencies)

    def pct(q: float) -> int | None:
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None

    result.update(
        {
            "exit_code": code,
            "produced_in_window": sent,
            "received_in_window": len(lat),
            "missing": max(0, sent - len(lat)),
            "p50_ms": pct(0.50),
            "p90_ms": pct(0.90),
            "p99_ms": pct(0.99),
            "max_ms": lat[-1] if lat else None,
            "mean_ms": round(statistics.fmean(lat), 1) if lat else None,
            **probe.findings(),
        }
    )
    if sent and len(lat) < 0.99 * sent:
        result["error"] = f"only {len(lat)} of {sent} outputs within the drain time"
    return result


def run(
    broker: Broker,
    rates: list[int],
    reps: int,
    settle_s: float,
    measure_s: float,
    drain_s: float = 15.0,
    include: set[str] | None = None,
) -> dict[str, Any]:
    names = [
        n
        for n in contender_cmds("B", "I", "O", "S")
        if include is None or n in include or n.split(" ")[0] in include
    ]
    runs: list[dict[str, Any]] = []
    for rate in rates:
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                log(f"  latency {rate}/s rep {rep + 1}/{reps}: {name}")
                load = os.getloadavg()[0]
                try:
                    outcome = run_one(broker, name, rate, rep, settle_s, measure_s, drain_s)
                except Exception as exc:  # noqa: BLE001 - a failed contender is recorded
                    outcome = {"contender": name, "rate": rate, "rep": rep, "error": repr(exc)}
                outcome["loadavg_1m_at_start"] = load
                log(f"    -> {json.dumps({k: v for k, v in outcome.items() if k != 'log'})}")
                runs.append(outcome)
    summary: dict[str, dict[str, Any]] = {}
    for rate in rates:
        for name in names:
            mine = [r for r in runs if r["rate"] == rate and r["contender"] == name]
            good = [r for r in mine if r.get("p50_ms") is not None and not r.get("error")]
            summary.setdefault(str(rate), {})[name] = {
                "runs": len(mine),
                "ok": len(good),
                **{
                    key: stats([r[key] for r in good])
                    for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "missing")
                },
                "errors": [r["error"] for r in mine if r.get("error")][:3],
            }
    return {
        "rates": rates,
        "reps": reps,
        "settle_s": settle_s,
        "measure_s": measure_s,
        "drain_s": drain_s,
        "trickle_rate": TRICKLE_RATE,
        "keys": KEYS,
        "partitions": PARTITIONS,
        "master": MASTER,
        "commands": {
            n: " ".join(c) or "(none)"
            for n, (c, _) in contender_cmds(
                "BOOTSTRAP", "IN_TOPIC", "OUT_TOPIC", "STATE_DIR"
            ).items()
            if n in names
        },
        "runs": runs,
        "summary": summary,
    }


if __name__ == "__main__":  # a quick manual check: python -m bench.latency NAME RATE SECONDS
    import sys

    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    broker = Broker.start()
    try:
        print(
            json.dumps(
                run_one(broker, sys.argv[1], int(sys.argv[2]), 0, 3.0, float(sys.argv[3]), 15.0)
            )
        )
    finally:
        broker.stop()
