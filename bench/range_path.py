"""Where a 10,000-entry range's CPU goes, stage by stage, in one process without Spark, a
broker or sockets: the hosts' reads, the reply frames' encoding and decoding, the driver's
endpoint, the HTTP answer's encoding and a client's parse.

``python -m bench.range_path [--reps 9] [--keys 10000]`` writes
``bench/results/range-path-<date>.json``. Two tasks' count stores as the runtime builds them
(string -> long, change-logged, in the batch buffer over RocksDB; every key committed, every
seventh written again and not committed yet); the driver's :class:`QueryEndpoint` answers
``/stores/counts/all?limit=<keys>`` through a router that hands each read to the task's
:class:`TaskStoreReader` and passes its reply through ``encode_frame`` and the frame decoder,
as the link and the router do. Where the reader offers ``defer`` (a page read off the loop)
the page is read that way, else by ``answer`` (on the loop, in time slices). Each stage's
time is the calling thread's CPU (``time.thread_time``); the figures are medians of ``reps``
reads after one warm-up. It runs on any checkout whose endpoint has ``get``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.common import log, machine_info, write_result

TASKS = ("0_0", "0_1")


def _stores(keys: int) -> dict[str, Any]:
    from processor_api import Serdes, Stores
    from processor_api.runtime.query_link import TaskStoreReader
    from processor_api.state.batch_buffer import BatchBufferBytesStore

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    readers = {}
    for index, task in enumerate(TASKS):
        directory = tempfile.mkdtemp(prefix="bench-range-path-")
        buffer = BatchBufferBytesStore(builder.supplier.get(directory))
        stack = builder.build(directory, inner=buffer)
        for i in range(index, keys, len(TASKS)):
            stack.store.put(f"key-{i:05d}", i)
        stack.changelog.drain_changes()
        buffer.commit()
        for i in range(index, keys, 7 * len(TASKS)):
            stack.store.put(f"key-{i:05d}", i + 1)
        readers[task] = TaskStoreReader(
            task, {"counts": stack}, lambda name, s=stack: s.store, lambda name: 1234
        )
    return readers


class _Router:
    """Hands a read to its task's reader and its reply through a frame, timing each."""

    def __init__(self, readers: dict[str, Any]) -> None:
        self.readers = readers
        self.cpu_s: dict[str, float] = {}
        self.asks = 0

    def _add(self, stage: str, started: float) -> float:
        now = time.thread_time()
        self.cpu_s[stage] = self.cpu_s.get(stage, 0.0) + now - started
        return now

    def ask(self, task: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        from processor_api.runtime import query_link

        reader = self.readers[task]
        message = {**request, "op": "read", "id": 1, "task": task}
        started = time.thread_time()
        defer = getattr(reader, "defer", None)
        job = None if defer is None else defer(message)
        started = self._add("host_on_loop", started)
        if job is not None:
            status, body = job()
            started = self._add("host_off_loop", started)
        else:
            status, body = reader.answer(message)
            started = self._add("host_on_loop", started)
        frame = query_link.encode_frame({"op": "reply", "id": 1, "status": status, "body": body})
        started = self._add("frame_encode", started)
        reply = query_link._decode(frame[4:])  # noqa: SLF001 - the frame reader's decoding
        self._add("frame_decode", started)
        self.asks += 1
        return int(reply["status"]), reply["body"]


def one_read(endpoint: Any, router: _Router, keys: int) -> tuple[dict[str, float], int]:
    """One read's CPU (ms) by stage, and its answer's bytes."""
    from processor_api.query import server

    router.cpu_s, router.asks = {}, 0
    answer = getattr(endpoint, "answer", endpoint.get)
    started = time.thread_time()
    body = answer("/stores/counts/all", {"limit": str(keys)})
    endpoint_s = time.thread_time() - started
    started = time.thread_time()
    data = server._answer(200, body, {}, True)  # noqa: SLF001 - the handler's encoding
    http_s = time.thread_time() - started
    started = time.thread_time()
    parsed = json.loads(data.partition(b"\r\n\r\n")[2])
    client_s = time.thread_time() - started
    if len(parsed["entries"]) != keys:
        raise AssertionError(f"{len(parsed['entries'])} entries, not {keys}")
    stages = {stage: s * 1000 for stage, s in router.cpu_s.items()}
    stages["driver_endpoint"] = endpoint_s * 1000 - sum(stages.values())
    stages["http_encode"] = http_s * 1000
    stages["client_parse"] = client_s * 1000
    stages["asks"] = router.asks
    return stages, len(data)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (see the module docs)."""
    from processor_api.query.routing import StoreRoutes
    from processor_api.query.server import QueryEndpoint
    from topologies.count_per_key import build_topology

    parser = argparse.ArgumentParser(prog="bench.range_path")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    router = _Router(_stores(args.keys))
    endpoint = QueryEndpoint(StoreRoutes(build_topology(input_topic="in"), TASKS), router)  # type: ignore[arg-type]
    one_read(endpoint, router, args.keys)  # warm-up
    reads = [one_read(endpoint, router, args.keys) for _ in range(args.reps)]
    stages = sorted({stage for stages, _ in reads for stage in stages})
    medians = {
        stage: round(statistics.median(s.get(stage, 0.0) for s, _ in reads), 2) for stage in stages
    }
    medians["total_cpu_ms"] = round(
        statistics.median(sum(v for k, v in s.items() if k != "asks") for s, _ in reads), 2
    )
    result = {
        "command": "python -m bench.range_path " + " ".join(argv or []),
        "machine": machine_info(),
        "keys": args.keys,
        "reps": args.reps,
        "answer_bytes": reads[0][1],
        "median_cpu_ms_by_stage": medians,
        "load_average": [load_start, os.getloadavg()[0]],
    }
    log(f"range path: {result['median_cpu_ms_by_stage']} ({result['answer_bytes']} bytes)")
    write_result(os.environ.get("BENCH_RESULT_NAME") or "range-path", result)


if __name__ == "__main__":
    main(sys.argv[1:])
