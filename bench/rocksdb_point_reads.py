"""Point reads of a 1M-entry RocksDB store: the project's table options against variants.

``python -m bench.rocksdb_point_reads [--entries 1000000] [--reads 20000] [--reps 3]`` (no
Spark, no broker). Why: ``bench/window_store.py``'s key-value contender spends 61 of 72 s of
500,000 ``delete(key)`` calls in ``Rdict.get`` (about 120 µs a read). Each contender writes
the same ``entries`` window-store keys (``key-NNNNN`` + 8-byte start + 4-byte seqnum, 8-byte
values) as 100 flushed write batches, the way ``bench/window_store.py`` fills its store,
compacts the whole key range (the state a long-lived store reaches), then reads ``--reads`` existing keys twice (the second pass finds the blocks cached). Contenders
alternate (the order rotates each repetition); medians of the second pass per contender.

* ``project``: ``processor_api.state.rocksdb._options()`` as it is (64 MB shared LRU block
  cache, 10-bit bloom filter, index and filter blocks kept by the table readers, outside
  the cache, as in Kafka Streams' defaults);
* ``index and filters in the cache (before)``: the settings before the fix, index and filter
  blocks in the 64 MB cache, L0 ones pinned;
* ``512 MB cache, index and filters in it``: the same with a 512 MB cache;
* ``no bloom filter``: the project's settings without a bloom filter.

Writes ``bench/results/rocksdb-point-reads-<entries>-<date>.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.common import log, machine_info, stats, write_result

BATCHES = 100


def _variant(cache_bytes: int, cache_index: bool, bloom: bool) -> Callable[[], Any]:
    def make() -> Any:
        import rocksdict

        from processor_api.state.rocksdb import _options

        options = _options()
        table = rocksdict.BlockBasedOptions()
        table.set_block_size(4096)
        table.set_block_cache(rocksdict.Cache(cache_bytes))
        if bloom:
            table.set_bloom_filter(10, False)
        table.set_cache_index_and_filter_blocks(cache_index)
        table.set_pin_l0_filter_and_index_blocks_in_cache(cache_index)
        options.set_block_based_table_factory(table)
        return options

    return make


def _project() -> Any:
    from processor_api.state.rocksdb import _options

    return _options()


CONTENDERS: dict[str, Callable[[], Any]] = {
    "project": _project,
    "index and filters in the cache (before)": _variant(64 << 20, True, True),
    "512 MB cache, index and filters in it": _variant(512 << 20, True, True),
    "no bloom filter": _variant(64 << 20, False, False),
}


def trial(make_options: Callable[[], Any], entries: int, reads: int) -> dict[str, Any]:
    """Fill a fresh store, read ``reads`` keys twice; µs per read of each pass."""
    import rocksdict

    from processor_api.state.key_schemas import window_key

    directory = tempfile.mkdtemp(prefix="bench-rocksdb-reads-")
    db = rocksdict.Rdict(os.path.join(directory, "db"), make_options())
    keys_per_batch = entries // BATCHES
    names = [b"key-%05d" % i for i in range(keys_per_batch)]
    for w in range(BATCHES):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for name in names:
            batch.put(window_key(name, w * 60_000), b"\0" * 8)
        db.write(batch)
        db.flush(True)
    # a store that lives long is compacted into few large files; compacting here reads the
    # state every long-lived store reaches instead of whatever background compaction did so far
    db.compact_range(None, None)
    targets = [
        window_key(names[i % keys_per_batch], (i // keys_per_batch) * 60_000) for i in range(reads)
    ]
    passes = []
    for _ in range(2):
        gc.collect()
        started = time.perf_counter()
        found = sum(1 for key in targets if db.get(key) is not None)
        passes.append((time.perf_counter() - started) / reads * 1e6)
    db.close()
    shutil.rmtree(directory, ignore_errors=True)
    return {"first_pass_us": passes[0], "second_pass_us": passes[1], "found": found}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    if args.entries % BATCHES or args.reads > args.entries:
        parser.error(f"--entries must be a multiple of {BATCHES} and >= --reads")
    machine = machine_info()
    names = list(CONTENDERS)
    runs = []
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            load_before = os.getloadavg()
            result = trial(CONTENDERS[name], args.entries, args.reads)
            log(f"  rep {rep + 1}/{args.reps}: {name}: {result}")
            runs.append(
                {
                    "contender": name,
                    "rep": rep,
                    "loadavg_before": list(load_before),
                    "loadavg_after": list(os.getloadavg()),
                    **result,
                }
            )
    summary = {
        name: {
            f"{p}_pass_us": stats([r[f"{p}_pass_us"] for r in runs if r["contender"] == name])
            for p in ("first", "second")
        }
        for name in names
    }
    write_result(
        f"rocksdb-point-reads-{args.entries}",
        {
            "benchmark": "rocksdb-point-reads",
            "command": f"python -m bench.rocksdb_point_reads --entries {args.entries} "
            f"--reads {args.reads} --reps {args.reps}",
            "machine": machine,
            "loadavg_at_end": list(os.getloadavg()),
            "entries": args.entries,
            "reads": args.reads,
            "runs": runs,
            "summary": summary,
            "all_found": all(r["found"] == args.reads for r in runs),
        },
    )


if __name__ == "__main__":
    main()
