"""Interactive queries (issue 36's targets): a point lookup's latency through the driver while
the application processes 20,000 records/s, what 500 lookups/s cost the processing, and the
time of a 10,000-entry range.

``python -m bench.interactive_queries [--reps R] [--records N] [--rate 20000] [--lookups 500]
[--seconds 30]`` (it starts Spark and a broker: run it alone) writes
``bench/results/interactive-queries-<date>.json``. On one local SparkSession (``local[2]``),
count per key (``topologies/count_per_key.py``, 2 partitions, RocksDB, 10,000 keys):

* **cost**: ``--available-now`` runs over N records, alternating without and with a load of
  500 lookups/s (random keys, from another process), R of each; the rate of a run is its
  records over its longest task call (Spark's observed ``max_task_ms``: the poll loop); the
  cost is ``1 - median(with) / median(without)``;
* **latency**: a continuous run fed at ``--rate`` records/s for ``--seconds`` by another
  process, which also asks 500 lookups/s; each lookup's time from request to parsed answer,
  once the tasks answer (the 503s of their start are counted apart); and the run's lag at the
  end (whether it kept up);
* **range**: then, the run still going, ``/stores/counts/all?limit=10000`` (every key) 20
  times (``--ranges``);
* **quiet range** (``--range-only``): the same range reads of a continuous run that is fed
  nothing and asked no lookups (once its 10,000 keys are counted), so the range's own cost
  shows apart from the cores the feeding and the lookups take.

The lookups run in a process of their own (``multiprocessing`` spawn), so their requests do
not compete with the driver's HTTP server for one interpreter's lock; the records of the
latency phase are produced by another (before 2026-11-29's floor runs, by the lookups'
process, whose producer then held the askers' interpreter lock: part of the lookups' tail
was the client's).

``--floor``: the same load also goes to the floor (``bench/lookup_floor.py``: a Python HTTP
server in a process of its own answering a constant body at once, no routing, no worker):
the cost runs alternate without lookups, with lookups to the run's endpoint and with
lookups to the floor, and the latency phase runs again with the floor asked instead. What
the floor costs is this machine's share of any Python lookup path; the rest is the query
path's.

``--pin``: the cost and latency runs keep the processes that process records (hosts, pyspark
workers, Spark's JVM, the broker) on the machine's last core and the driver, the load and the
floor on the others, as a cluster keeps its driver and its clients apart from its executors.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import socket
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from bench.common import Broker, key_for, log, machine_info, produce_input, write_result
from bench.lookup_floor import FloorServer

PARTITIONS = 2
KEYS = 10_000
TOPOLOGY = "topologies.count_per_key:build_topology"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _lookups(url: str, per_s: float, stop: Any, out: dict[str, Any], seed: int) -> None:
    """Paced lookups of random keys until ``stop``, on one kept-alive connection;
    latencies (ms) of answered ones. The requests are prepared bytes and the answers are
    read by their Content-Length (a status and a parsed JSON body for each): the load's
    own CPU is what a client elsewhere would spend, so it is kept small here."""
    latencies: list[float] = []
    unavailable = errors = 0
    interval = 1.0 / per_s
    next_at = time.monotonic()
    rng = random.Random(seed)
    address = urllib.parse.urlsplit(url)
    target = (str(address.hostname), int(address.port or 80))
    host = f"Host: {address.netloc}\r\n\r\n".encode()
    requests = [
        b"GET /stores/counts/keys/" + key_for(i, KEYS) + b" HTTP/1.1\r\n" + host
        for i in range(KEYS)
    ]
    sock: socket.socket | None = None
    buffer = b""
    while not stop.is_set():
        request = requests[rng.randrange(KEYS)]
        started = time.perf_counter()
        try:
            if sock is None:
                sock = socket.create_connection(target, timeout=10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffer = b""
            sock.sendall(request)
            status, body, buffer = _read_answer(sock, buffer)
            if status == 200:
                json.loads(body)
                latencies.append((time.perf_counter() - started) * 1000)
            elif status == 503:
                unavailable += 1
            elif status != 404:  # 404: a key not counted yet
                errors += 1
        except OSError:
            unavailable += 1  # the endpoint is not up yet
            if sock is not None:
                sock.close()
            sock = None
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # behind: do not burst to catch up
    if sock is not None:
        sock.close()
    out.setdefault("latencies", []).extend(latencies)
    out["unavailable"] = out.get("unavailable", 0) + unavailable
    out["errors"] = out.get("errors", 0) + errors


def _read_answer(sock: socket.socket, buffer: bytes) -> tuple[int, bytes, bytes]:
    """(status, body, what was read past it) of one HTTP/1.1 answer with a Content-Length."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        rest += chunk
    return status, rest[:length], rest[length:]


#: Lookups are asked by this many threads, each at its share of the rate (one request at a
#: time each: a lookup's round trip must not cap the rate).
ASKERS = 4


def load_process(
    url: str,
    lookups_per_s: float,
    bootstrap: str | None,
    topic: str | None,
    rate: int,
    seconds: float,
    lookups_url: str | None,
    stop: Any,
    results: Any,
    ranges: int = 20,
    under_load: bool = False,
) -> None:
    """Another process's load: lookups, and with a topic records at ``rate``/s for
    ``seconds`` then ``ranges`` range reads; without one, lookups until ``stop`` is set.
    ``under_load``: the range reads are also made from halfway through the feeding, while
    records and lookups go on. ``lookups_url``: where the lookups go, if not to ``url``
    (the floor's server). Puts a dict on ``results``."""
    out: dict[str, Any] = {}
    reader = None
    if under_load and topic is not None:
        began = time.monotonic()

        def read_under_load() -> None:
            time.sleep(seconds / 2)
            out["ranges_under_load"], _ = range_reads(url, ranges)
            out["ranges_under_load_end_s"] = round(time.monotonic() - began, 1)

        reader = threading.Thread(target=read_under_load)
        reader.start()
    cpu_started = os.times()
    askers = [
        threading.Thread(
            target=_lookups, args=(lookups_url or url, lookups_per_s / ASKERS, stop, out, seed)
        )
        for seed in range(ASKERS if lookups_per_s else 0)
    ]
    for asker in askers:
        asker.start()
    produced = 0
    if topic is not None and bootstrap is not None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
        )
        started = time.monotonic()
        step = rate // 100  # every 10 ms
        while time.monotonic() - started < seconds:
            for _ in range(step):
                producer.produce(topic, b"v", key_for(produced, KEYS))
                produced += 1
            producer.poll(0)
            delay = started + produced / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if reader is not None:
            reader.join()  # past the feeding's end only if the reads are slow (said above)
        producer.flush(60)
        stop.set()
    else:
        stop.wait()
    for asker in askers:
        asker.join()
    cpu_ended = os.times()
    out["load_cpu_s"] = (cpu_ended.user + cpu_ended.system) - (
        cpu_started.user + cpu_started.system
    )
    out["produced"] = produced
    if topic is not None:
        cpu_started = os.times()
        out["ranges"], body = range_reads(url, ranges)
        cpu_ended = os.times()
        out["range_client_cpu_s"] = (cpu_ended.user + cpu_ended.system) - (
            cpu_started.user + cpu_started.system
        )
        out["counted"] = sum(e["value"] for e in body["entries"])
    results.put(out)


#: How many range reads a latency or quiet phase times (``--ranges``), and whether the
#: latency phase also times them while it feeds and asks lookups (``--ranges-under-load``).
RANGES: dict[str, Any] = {"value": 20, "under_load": False}


def range_reads(url: str, count: int) -> tuple[list[tuple[float, int]], dict[str, Any]]:
    """``count`` reads of ``/stores/counts/all?limit=10000``, each on a new connection (as
    a client without a kept-alive connection asks): (ms from request to parsed answer,
    entries) of each, and the last answer."""
    ranges = []
    body: dict[str, Any] = {}
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/stores/counts/all?limit=10000", timeout=30) as a:
            body = json.loads(a.read())
        ranges.append(((time.perf_counter() - started) * 1000, len(body["entries"])))
    return ranges, body


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` (every thread), in seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "processor_api.runtime.worker_host" in args:
        return "host"
    if "java" in args.split(" ", 1)[0]:
        return "spark_jvm"
    if "pyspark" in args:
        return "pyspark_worker"
    if "tansu" in args:
        return "broker"
    if "multiprocessing" in args:
        return "load"
    return "other"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds) of this process (the driver: its HTTP server, router and
    Spark's Python side) and every process under it (Spark's JVM, pyspark workers, the
    worker hosts, the broker, the load process)."""
    snapshot = {}
    for pid in _descendants(os.getpid()):
        cpu = process_cpu_s(pid)
        if cpu is not None:
            role = "driver" if pid == os.getpid() else _role(pid)
            snapshot[pid] = ("floor" if pid == FLOOR["pid"] else role, cpu)
    return snapshot


def cpu_delta(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], lookups: int
) -> dict[str, Any]:
    """CPU ms each role spent between two snapshots, in all and per answered lookup."""
    per_role: dict[str, float] = {}
    for pid, (role, cpu) in after.items():
        per_role[role] = per_role.get(role, 0.0) + cpu - before.get(pid, (role, 0.0))[1]
    total = sum(per_role.values())
    return {
        "lookups_answered": lookups,
        "cpu_ms": {role: round(ms * 1000, 1) for role, ms in sorted(per_role.items())},
        "cpu_ms_total": round(total * 1000, 1),
        "cpu_us_per_lookup": (
            {role: round(ms * 1e6 / lookups, 1) for role, ms in sorted(per_role.items())}
            if lookups
            else None
        ),
    }


def _spawn(
    url: str,
    lookups_per_s: float,
    bootstrap: str | None,
    topic: str | None,
    rate: int,
    seconds: float,
    lookups_url: str | None = None,
) -> tuple[Any, Any, Any]:
    """The load process (:func:`load_process`): (process, stop, results)."""
    context = multiprocessing.get_context("spawn")
    results, stop = context.Queue(), context.Event()
    process = context.Process(
        target=load_process,
        args=(url, lookups_per_s, bootstrap, topic, rate, seconds, lookups_url, stop, results),
        kwargs={"ranges": RANGES["value"], "under_load": RANGES["under_load"]},
    )
    process.start()
    return process, stop, results


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: The runs' commit.interval.ms (``--commit-interval-ms``).
COMMIT_INTERVAL_MS = {"value": 1000}


def _runner(spark: Any, bootstrap: str, topic: str, available_now: bool, port: int = 0) -> Any:
    from processor_api.spark.runner import RunSettings, TopologyRunner

    settings = RunSettings(
        bootstrap_servers=bootstrap,
        application_id=f"bench-iq-{uuid.uuid4().hex[:8]}",
        state_dir=tempfile.mkdtemp(prefix="bench-iq-"),
        available_now=available_now,
        epoch_interval_s=600.0,
        query_port=port,
        config={"commit.interval.ms": str(COMMIT_INTERVAL_MS["value"])},
    )
    return TopologyRunner(TOPOLOGY, settings, topology_kwargs={"input_topic": topic}, spark=spark)


#: The floor's server (``--floor``) and its process id, while it runs.
FLOOR: dict[str, Any] = {"url": None, "pid": None}


#: ``--pin``: the cost and latency runs' processes on cores of their own (:class:`_Pinning`).
PIN = {"on": False}
#: The cores this bench may use, as it started (before any run moved it).
MACHINE_CPUS = sorted(os.sched_getaffinity(0))
#: The roles that process records (on :data:`PROCESSING_CPUS`); the others (the driver, the
#: load, the floor) get the rest of the machine's cores.
PROCESSING_ROLES = ("host", "spark_jvm", "pyspark_worker", "broker")


class _Pinning:
    """Keeps the processes that process records (every thread of each) on the machine's
    last core and the driver, the load and the floor on the others, as a cluster keeps its
    driver and its clients off the executors' cores; checked every 0.2 s, so processes and
    threads that start meanwhile are moved too."""

    def __init__(self) -> None:
        cpus = MACHINE_CPUS
        self._processing, self._rest = {cpus[-1]}, set(cpus[:-1]) or {cpus[-1]}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        while True:
            for pid, (role, _) in cpu_snapshot().items():
                cpus = self._processing if role in PROCESSING_ROLES else self._rest
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        if os.sched_getaffinity(int(tid)) != cpus:
                            os.sched_setaffinity(int(tid), cpus)
                    except OSError:
                        pass  # the thread ended
            if self._done.wait(0.2):
                return

    def stop(self) -> None:
        """Stop moving processes (they keep their cores until the next run moves them)."""
        self._done.set()
        self._thread.join()


def cost_run(
    spark: Any, bootstrap: str, topic: str, records: int, lookups: float, floor: bool = False
) -> dict:
    """One ``--available-now`` run, with ``lookups``/s from another process (0: none),
    asking from before the run starts until it ended; to the floor's server instead of the
    run's endpoint with ``floor``."""
    port = _free_port()
    runner = _runner(spark, bootstrap, topic, available_now=True, port=port)
    url = FLOOR["url"] if floor else f"http://127.0.0.1:{port}"
    load = _spawn(url, lookups, None, None, 0, 0) if lookups else None
    pinning = _Pinning() if PIN["on"] else None
    try:
        runner.run()
    finally:
        if pinning is not None:
            pinning.stop()
        answered = None
        if load is not None:
            process, stop, results = load
            stop.set()
            out = results.get(timeout=60)
            process.join()
            answered = len(out["latencies"])
    observed = [
        p["observedMetrics"]["processor_api"]
        for p in runner._query.recentProgress  # noqa: SLF001 - the bench reads Spark's progress
        if "processor_api" in (p.get("observedMetrics") or {})
    ]
    done_records = sum(o["records"] for o in observed)
    loop_s = max(o["max_task_ms"] for o in observed) / 1000
    return {
        "lookups_per_s": lookups,
        "asked": "floor" if floor else "endpoint" if lookups else None,
        "lookups_answered": answered,
        "records": done_records,
        "loop_s": round(loop_s, 3),
        "records_per_s": round(done_records / loop_s),
    }


def cpu_run(
    spark: Any, bootstrap: str, topic: str, lookups: float, seconds: float
) -> dict[str, Any]:
    """What the lookups cost each process in CPU: a continuous run with nothing to process,
    ``seconds`` without lookups, then ``seconds`` with ``lookups``/s; each process's CPU in
    both windows, and the difference per answered lookup (the load process's own CPU it
    measures itself, from its askers' start to their end)."""
    runner = _runner(spark, bootstrap, topic, available_now=False)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        url = _wait_for_answers(runner)
        time.sleep(2.0)  # the tasks' start settles
        load_avg_start = os.getloadavg()[0]
        first = cpu_snapshot()
        time.sleep(seconds)
        second = cpu_snapshot()
        process, stop, results = _spawn(url, lookups, None, None, 0, 0)
        time.sleep(seconds)
        third = cpu_snapshot()
        stop.set()
        out = results.get(timeout=60)
        process.join()
        load_avg_end = os.getloadavg()[0]
    finally:
        runner.request_stop()
        thread.join(120)
    answered = len(out["latencies"])
    idle = cpu_delta(first, second, 0)
    busy = cpu_delta(second, third, answered)
    busy["cpu_ms"].pop("load", None)  # its start (spawn, imports) is not the lookups'
    per_lookup = {
        role: round((ms - idle["cpu_ms"].get(role, 0.0)) * 1000 / answered, 1)
        for role, ms in busy["cpu_ms"].items()
    }
    per_lookup["load"] = round(out["load_cpu_s"] * 1e6 / answered, 1)
    return {
        "seconds": seconds,
        "lookups_per_s": lookups,
        "lookups_answered": answered,
        "lookup_ms": {
            "median": round(statistics.median(out["latencies"]), 2),
            "p99": round(_percentile(out["latencies"], 0.99) or 0, 2),
        },
        "cpu_ms_without_lookups": idle["cpu_ms"],
        "cpu_ms_with_lookups": busy["cpu_ms"],
        "load_cpu_ms": round(out["load_cpu_s"] * 1000, 1),
        "cpu_us_per_lookup": per_lookup,
        "cpu_us_per_lookup_total": round(sum(per_lookup.values()), 1),
        "load_average": [load_avg_start, load_avg_end],
    }


def _wait_for_answers(runner: Any) -> str:
    """The run's query URL, once its tasks answer (404: nothing counted yet)."""
    while runner.query_port is None:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{runner.query_port}"
    while True:
        try:
            urllib.request.urlopen(f"{url}/stores/counts/keys/x", timeout=10)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return url
        time.sleep(0.2)


def latency_run(
    spark: Any,
    bootstrap: str,
    topic: str,
    rate: int,
    lookups: float,
    seconds: float,
    floor: bool = False,
) -> dict[str, Any]:
    """A continuous run fed at ``rate`` while ``lookups``/s ask it (``floor``: ask the
    floor's server instead); then the range reads (of the run's endpoint)."""
    runner = _runner(spark, bootstrap, topic, available_now=False)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    pinning = _Pinning() if PIN["on"] else None
    try:
        url = _wait_for_answers(runner)
        load_avg_start = os.getloadavg()[0]
        before = cpu_snapshot()
        # the records and the lookups from processes of their own: a producer of 20,000
        # records/s beside the askers would hold their interpreter's lock, and its waits
        # would count as the lookups'
        feeder, fed, feeder_results = _spawn(url, 0.0, bootstrap, topic, rate, seconds)
        asker, asked, asker_results = _spawn(
            url, lookups, None, None, 0, 0, FLOOR["url"] if floor else None
        )
        fed.wait(seconds + 600)  # set once the feeder's records are flushed
        asked.set()
        lookups_out = asker_results.get(timeout=60)
        out = feeder_results.get(timeout=600)  # after the range reads
        after = cpu_snapshot()  # before the load processes end
        feeder.join()
        asker.join()
        load_avg_end = os.getloadavg()[0]
    finally:
        if pinning is not None:
            pinning.stop()
        runner.request_stop()
        thread.join(120)
    latencies = lookups_out["latencies"]
    out["unavailable"], out["errors"] = lookups_out["unavailable"], lookups_out["errors"]
    ranges = out["ranges"]
    return {
        "asked": "floor" if floor else "endpoint",
        "rate": rate,
        "seconds": seconds,
        "produced": out["produced"],
        # every key once before, then the fed records: what the counts held at the end
        "counted_at_end": out["counted"],
        "lookups_per_s": lookups,
        "lookups_answered": len(latencies),
        "lookups_unavailable": out["unavailable"],
        "lookup_errors": out["errors"],
        "lookup_ms": {
            "median": round(statistics.median(latencies), 2),
            "p99": round(_percentile(latencies, 0.99) or 0, 2),
            "max": round(max(latencies), 2),
        },
        "range_10000": _range_summary(ranges),
        "range_10000_under_load": (
            _range_summary(out["ranges_under_load"]) if "ranges_under_load" in out else None
        ),
        # when the reads under load ended, from the load's start (the feeding: ``seconds``)
        "ranges_under_load_end_s": out.get("ranges_under_load_end_s"),
        "load_average": [load_avg_start, load_avg_end],
        # every process over the phase (feeding, lookups and the ranges; the load process's
        # own figure is its lookups' and its producer's)
        "cpu": cpu_delta(before, after, len(latencies)),
    }


def _range_summary(ranges: list[tuple[float, int]]) -> dict[str, Any]:
    times = [ms for ms, _ in ranges]
    return {
        "reads": len(ranges),
        "entries": sorted({n for _, n in ranges}),
        "median_ms": round(statistics.median(times), 1),
        "p99_ms": round(_percentile(times, 0.99) or 0, 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
    }


def quiet_range_run(spark: Any, bootstrap: str, topic: str) -> dict[str, Any]:
    """The range reads of a continuous run fed nothing and asked nothing else, once every
    key is counted; from another process, as in :func:`latency_run`."""
    runner = _runner(spark, bootstrap, topic, available_now=False)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        url = _wait_for_answers(runner)
        deadline = time.monotonic() + 120
        while True:
            try:  # 503: a task not started yet (only one task's key was waited for)
                if len(range_reads(url, 1)[1].get("entries", ())) >= KEYS:
                    break
            except urllib.error.HTTPError as exc:
                if exc.code != 503:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not count its {KEYS} keys within 120 s")
            time.sleep(0.2)
        time.sleep(2.0)  # the first commit after the keys settles
        load_avg_start = os.getloadavg()[0]
        before = cpu_snapshot()
        process, _, results = _spawn(url, 0.0, bootstrap, topic, 0, 0)
        out = results.get(timeout=600)
        after = cpu_snapshot()
        process.join()
        load_avg_end = os.getloadavg()[0]
    finally:
        runner.request_stop()
        thread.join(120)
    cpu = cpu_delta(before, after, 0)
    reads = len(out["ranges"])
    # every process over the reads, per read (the load process: the reads' client, measured
    # by itself; its start is left out)
    per_read = {role: round(ms / reads, 1) for role, ms in cpu["cpu_ms"].items() if role != "load"}
    per_read["client"] = round(out["range_client_cpu_s"] * 1000 / reads, 1)
    return {
        "range_10000": _range_summary(out["ranges"]),
        "load_average": [load_avg_start, load_avg_end],
        "cpu_ms_per_read": per_read,
    }


def _live_topic(broker: Broker) -> str:
    """A new topic for a continuous run, holding every key once (ranges of 10,000)."""
    live = f"bench-iq-live-{uuid.uuid4().hex[:6]}"
    broker.create_topic(live, PARTITIONS)
    produce_input(broker.bootstrap, live, KEYS, KEYS)
    return live


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (see the module docs)."""
    from processor_api.spark.session import build_spark_session
    from processor_api.spark.settings import RunSettings

    parser = argparse.ArgumentParser(prog="bench.interactive_queries")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--lookups", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--commit-interval-ms", type=int, default=1000)
    parser.add_argument("--latency-only", action="store_true", help="skip the cost runs")
    parser.add_argument("--ranges", type=int, default=20, help="range reads per phase")
    parser.add_argument(
        "--ranges-under-load",
        action="store_true",
        help="the latency phase also reads its ranges from halfway through the feeding",
    )
    parser.add_argument(
        "--range-only",
        action="store_true",
        help="only the range reads of a run fed nothing and asked no lookups",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also ask the floor's server (bench/lookup_floor.py) in the cost and latency runs",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="cost and latency runs with the processing on the last core and the driver, "
        "load and floor on the others (as a cluster's executors, apart from its driver and "
        "clients)",
    )
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="only the CPU per lookup of each process (an idle run, without then with lookups)",
    )
    args = parser.parse_args(argv)
    COMMIT_INTERVAL_MS["value"] = args.commit_interval_ms
    PIN["on"] = args.pin
    RANGES["value"] = args.ranges
    RANGES["under_load"] = args.ranges_under_load
    started_load = os.getloadavg()[0]
    broker = Broker.start()
    spark = None
    try:
        backlog = f"bench-iq-backlog-{uuid.uuid4().hex[:6]}"
        broker.create_topic(backlog, PARTITIONS)
        produce_input(broker.bootstrap, backlog, args.records, KEYS)
        spark = build_spark_session(
            RunSettings(bootstrap_servers=broker.bootstrap, master=f"local[{PARTITIONS}]"),
            "bench-interactive-queries",
            PARTITIONS,
        )
        runs = []
        latency = cpu = quiet = floor_latency = None
        if args.cpu_only or args.range_only:
            args.latency_only = True
        if args.floor:
            floor = FloorServer()
            FLOOR.update(url=floor.url, pid=floor.pid)
        if not args.latency_only:
            cost_run(spark, broker.bootstrap, backlog, args.records, 0)  # warm-up
        # (lookups/s, to the floor): without, to the endpoint, to the floor; every other
        # rep in the other order
        contenders = [(0.0, False), (args.lookups, False)] + (
            [(args.lookups, True)] if args.floor else []
        )
        for rep in range(0 if args.latency_only else args.reps):
            for lookups, to_floor in contenders if rep % 2 == 0 else contenders[::-1]:
                run = cost_run(spark, broker.bootstrap, backlog, args.records, lookups, to_floor)
                log(f"cost rep {rep}: {run}")
                runs.append(run)
        live = _live_topic(broker)
        if args.cpu_only:
            cpu = cpu_run(spark, broker.bootstrap, live, args.lookups, args.seconds)
            log(f"cpu: {cpu}")
        elif args.range_only:
            quiet = quiet_range_run(spark, broker.bootstrap, live)
            log(f"quiet range: {quiet}")
        else:
            latency = latency_run(
                spark, broker.bootstrap, live, args.rate, args.lookups, args.seconds
            )
            log(f"latency: {latency}")
            if args.floor:
                floor_latency = latency_run(
                    spark,
                    broker.bootstrap,
                    _live_topic(broker),  # a run of its own: no backlog of the one before
                    args.rate,
                    args.lookups,
                    args.seconds,
                    True,
                )
                log(f"floor latency: {floor_latency}")
    finally:
        if FLOOR["url"] is not None:
            floor.stop()
        if spark is not None:
            spark.stop()
        broker.stop()
    without = with_ = with_floor = None
    if runs:
        without = statistics.median(r["records_per_s"] for r in runs if not r["asked"])
        with_ = statistics.median(r["records_per_s"] for r in runs if r["asked"] == "endpoint")
        floor_rates = [r["records_per_s"] for r in runs if r["asked"] == "floor"]
        with_floor = statistics.median(floor_rates) if floor_rates else None
    name = os.environ.get("BENCH_RESULT_NAME") or (
        "interactive-queries"
        + (
            "-cpu"
            if args.cpu_only
            else "-range"
            if args.range_only
            else "-latency"
            if args.latency_only
            else ""
        )
    )
    write_result(
        name,
        {
            "command": "python -m bench.interactive_queries " + " ".join(argv or []),
            "machine": machine_info(),
            "commit_interval_ms": args.commit_interval_ms,
            "pinned": args.pin,
            "load_average_start": started_load,
            "load_average_end": os.getloadavg()[0],
            "cost": {
                "records": args.records,
                "runs": runs,
                "median_records_per_s_without": without,
                "median_records_per_s_with": with_,
                "cost_fraction": (
                    None if with_ is None or without is None else round(1 - with_ / without, 4)
                ),
                "median_records_per_s_with_floor": with_floor,
                "floor_cost_fraction": (
                    None
                    if with_floor is None or without is None
                    else round(1 - with_floor / without, 4)
                ),
            },
            "latency": latency,
            "floor_latency": floor_latency,
            "cpu_per_lookup": cpu,
            "quiet_range": quiet,
        },
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
