"""The worker side of a point lookup's path, without Spark or a broker: how long a read waits
for a host whose loop thread is processing, answered by the loop (between chunks, as before)
or on the query link's thread (``runtime/off_loop_reads.py``).

``python -m bench.query_path [--seconds 20] [--lookups 500] [--rate 10000]
[--switch-interval-ms 5]`` writes ``bench/results/query-path-<date>.json``. The driver's
router (``query/router.py``) runs here; one worker host runs in a process of its own
(``multiprocessing`` spawn) with a real RocksDB count store of 10,000 keys (change-logged, in
the runtime's batch buffer) and a loop thread that counts ``--rate`` records/s in chunks of
100 (``store[key] += 1``), polls for input in 2 ms slices while idle (as ``WorkerInput`` does
with queries on), serves queued reads between chunks and commits every second (cache and
change log drained, the batch applied to RocksDB and flushed). Four threads ask the router
``--lookups`` point reads/s of random keys; each read's time from ``ask`` to its answer.
Each mode runs in turn: ``loop`` (the link queues, the loop answers) and ``direct``.
With ``--http`` the reads go as in ``bench.interactive_queries`` instead: through the run's
HTTP server (``query/service.py``) from another process, four kept-alive connections, each
read's time from request to parsed answer.
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from bench.common import log, machine_info, write_result
from bench.interactive_queries import process_cpu_s

KEYS = [f"key-{i:05d}" for i in range(10_000)]  # as bench.interactive_queries asks
CHUNK = 100
ASKERS = 4


def host_process(
    address: str,
    secret: str,
    mode: str,
    rate: int,
    switch_s: float,
    stop: Any,
    asked: Any,
    out: Any,
) -> None:
    """A worker host's loop over one task's count store (see the module docs)."""
    from processor_api import Serdes, Stores
    from processor_api.runtime.off_loop_reads import answer_point_read
    from processor_api.runtime.query_link import QueryLink, TaskStoreReader
    from processor_api.state.batch_buffer import BatchBufferBytesStore

    sys.setswitchinterval(switch_s)
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    directory = tempfile.mkdtemp(prefix="bench-query-path-")
    buffer = BatchBufferBytesStore(builder.supplier.get(directory))
    stack = builder.build(directory, inner=buffer)
    store = stack.store
    for key in KEYS:
        store.put(key, 1)
    stack.changelog.drain_changes()
    buffer.commit()
    stacks, buffers = {"counts": stack}, {"counts": buffer}
    committed = builder.build(directory, inner=buffer.inner).store
    reader = TaskStoreReader("0_0", stacks, lambda name: committed, lambda name: 0)
    woken = threading.Event()

    def direct(task: str, request: dict[str, Any]) -> Any:
        return answer_point_read(task, stacks, buffers, lambda name: 0, request)

    link = QueryLink(
        address, secret, "bench-host", lambda task: None, woken.set,
        direct if mode == "direct" else None,
    )  # fmt: skip
    link.set_tasks(["0_0"])

    def serve() -> None:
        woken.clear()
        link.serve(lambda task: reader)

    rng = random.Random(1)
    started = time.monotonic()
    done = 0
    commit_at = started + 1.0
    measure_from = measured = None  # records counted from the first lookup on
    while not stop.is_set():
        if measure_from is None and asked.is_set():
            measure_from, measured = time.monotonic(), done
        for key in rng.sample(KEYS, CHUNK):  # one chunk of records
            store.put(key, (store.get(key) or 0) + 1)
        done += CHUNK
        serve()
        now = time.monotonic()
        if now >= commit_at:
            stack.changelog.drain_changes()  # what a commit sends to the changelog
            buffer.commit()
            commit_at = now + 1.0
            serve()
        if not rate:
            continue  # --rate 0: as fast as it can
        due = started + done / rate
        while time.monotonic() < due:  # waiting for input, in 2 ms slices
            woken.wait(min(0.002, max(0.0, due - time.monotonic())))
            if woken.is_set():
                serve()
    link.close()
    if measure_from is not None and measured is not None:
        out.put(round((done - measured) / (time.monotonic() - measure_from)))
    else:
        out.put(None)
    stack.close()


def _ask(router: Any, per_s: float, until: float, out: list[float], seed: int) -> None:
    rng = random.Random(seed)
    interval = 1.0 / per_s
    next_at = time.monotonic()
    while time.monotonic() < until:
        key = base64.b64encode(rng.choice(KEYS).encode()).decode()
        started = time.perf_counter()
        status, _ = router.ask("0_0", {"store": "counts", "kind": "key", "key": key, "limit": 1})
        if status == 200:
            out.append((time.perf_counter() - started) * 1000)
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()


def _ask_over_http(url: str, args: argparse.Namespace) -> tuple[list[float], float]:
    from bench.interactive_queries import load_process

    context = multiprocessing.get_context("spawn")
    results, stop = context.Queue(), context.Event()
    load = context.Process(
        target=load_process, args=(url, args.lookups, None, None, 0, 0, stop, results)
    )
    load.start()
    time.sleep(args.seconds)
    stop.set()
    out = results.get(timeout=60)
    load.join()
    return list(out["latencies"]), float(out["load_cpu_s"])


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One host in ``mode`` asked for ``args.seconds``: the lookups' latencies."""
    from processor_api.query.router import HostRouter
    from processor_api.query.service import RunQueries
    from topologies.count_per_key import build_topology

    queries = None
    if args.http:
        queries = RunQueries(
            build_topology(input_topic="unused"), ["0_0"], driver_host="127.0.0.1",
            host="127.0.0.1", port=0, token=None,
        )  # fmt: skip
        router = queries.router
    else:
        router = HostRouter("127.0.0.1")
    context = multiprocessing.get_context("spawn")
    stop, asked, rates = context.Event(), context.Event(), context.Queue()
    host = context.Process(
        target=host_process,
        args=(
            router.address,
            router.secret,
            mode,
            args.rate,
            args.switch_interval_ms / 1000,
            stop,
            asked,
            rates,
        ),
    )
    host.start()
    try:
        while "0_0" not in router.tasks():
            time.sleep(0.05)
        time.sleep(1.0)  # the host's loop under way
        load_start = os.getloadavg()[0]
        latencies: list[float] = []
        load_cpu_s = None
        cpu_before = {pid: process_cpu_s(pid) or 0.0 for pid in (os.getpid(), host.pid)}
        asked.set()
        if mode == "none":
            time.sleep(args.seconds)
        elif queries is not None:
            latencies, load_cpu_s = _ask_over_http(f"http://127.0.0.1:{queries.server.port}", args)
        else:
            until = time.monotonic() + args.seconds
            askers = [
                threading.Thread(
                    target=_ask, args=(router, args.lookups / ASKERS, until, latencies, s)
                )
                for s in range(ASKERS)
            ]
            for asker in askers:
                asker.start()
            for asker in askers:
                asker.join()
        cpu_s = {
            role: (process_cpu_s(pid) or 0.0) - cpu_before[pid]
            for role, pid in (("driver", os.getpid()), ("host", host.pid))
        }
    finally:
        stop.set()
        records_per_s = rates.get(timeout=30)
        host.join(30)
        if queries is not None:
            queries.close()
        else:
            router.close()
    ordered = sorted(latencies) or [0.0]
    return {
        "mode": mode,
        "host_records_per_s": records_per_s,
        "answered": len(latencies),
        "median_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[int(0.99 * len(ordered))], 2),
        "max_ms": round(ordered[-1], 2),
        # CPU of each process while asked (the driver: the HTTP server and the router, or
        # with --http off the askers too; the host: its loop as well), per answered lookup
        "cpu_ms": {role: round(s * 1000, 1) for role, s in cpu_s.items()},
        "load_cpu_ms": None if load_cpu_s is None else round(load_cpu_s * 1000, 1),
        "cpu_us_per_lookup": (
            {
                role: round(s * 1e6 / len(latencies), 1)
                for role, s in {**cpu_s, "load": load_cpu_s or 0.0}.items()
            }
            if latencies
            else None
        ),
        "load_average": [load_start, os.getloadavg()[0]],
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (see the module docs)."""
    parser = argparse.ArgumentParser(prog="bench.query_path")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lookups", type=float, default=500.0)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--switch-interval-ms", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--http", action="store_true", help="ask through the HTTP server")
    parser.add_argument("--modes", default="loop,direct", help="none: no lookups")
    args = parser.parse_args(argv)
    runs = []
    for rep in range(args.reps):
        modes = args.modes.split(",")
        for mode in modes if rep % 2 == 0 else modes[::-1]:
            run = run_mode(mode, args)
            log(f"rep {rep}: {run}")
            runs.append(run)
    write_result(
        "query-path" + ("-http" if args.http else ""),
        {
            "command": "python -m bench.query_path " + " ".join(argv or []),
            "machine": machine_info(),
            "args": vars(args),
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main(sys.argv[1:])
