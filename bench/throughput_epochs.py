"""End-to-end throughput of a run in epochs against the hand loop and Quix Streams.

``python -m bench.throughput_epochs [RECORDS ...] [--reps N] [--partitions P] [--only NAMES]
[--tag TAG] [--debug-log]``: count per key over 3 partitions (``bench/throughput.py``; ``--partitions``: P),
every contender ``--available-now`` from a cold start, alternating, with the peak PSS of each
contender's process tree; writes ``bench/results/throughput-epochs-<size>[-<P>p][-<TAG>]-<date>.json``
(machine, load, commands, runs, medians). With ``BENCH_BASELINE_DIR`` (a checkout of an earlier
commit) and ``BENCH_BASELINE_REV``, the contenders ``processor_api epochs before (REV)`` and
``processor_api epochs local[1] before (REV)`` run that checkout's command side by side
(name them in ``--only``). ``processor_api epochs 3 workers`` is the default run with
``--config num.stream.threads=3``. Results recorded before the micro-batch runtime was removed
also have its contender, ``processor_api``.
"""

from __future__ import annotations

import argparse
import json
import os

from bench import throughput
from bench.common import Broker, ensure_environments, log, machine_info, write_result
from bench.throughput import EPOCHS, EPOCHS_ONE_CORE, EPOCHS_THREE_WORKERS, run_size

CONTENDERS = {EPOCHS, EPOCHS_ONE_CORE, EPOCHS_THREE_WORKERS, "hand_loop", "quixstreams"}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput_epochs")
    parser.add_argument("sizes", nargs="*", type=int, default=[2_000_000])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated contender names")
    parser.add_argument(
        "--partitions", type=int, default=None, help="input partitions (default: 3)"
    )
    parser.add_argument("--tag", default=None, help="added to the result file's name")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="no timed runs: one run of this tree's run-topology under py-spy (100 Hz, "
        "subprocesses), summarized into bench/results/profiles-throughput-<size>[-<TAG>]-<date>.json",
    )
    parser.add_argument(
        "--debug-log",
        action="store_true",
        help="run-topology contenders log at debug: the hosts' start-up timeline in the results",
    )
    args = parser.parse_args()
    if args.partitions:
        throughput.PARTITIONS = args.partitions  # every command and the topic read it
    if args.debug_log:
        throughput.RUN_EXTRA = ("--log-level", "debug")
    include = set(args.only.split(",")) if args.only else CONTENDERS
    problems = ensure_environments()
    broker = Broker.start()
    try:
        for records in args.sizes:
            if args.profile:
                _profile(broker, records, args.tag)
                continue
            result = run_size(broker, records, args.reps, include)
            result["machine"] = machine_info()
            result["loadavg_at_end"] = list(os.getloadavg())
            result["environment_problems"] = problems
            tag = f"{records // 1000}k" if records < 1_000_000 else f"{records // 1_000_000}M"
            if args.partitions:
                tag += f"-{args.partitions}p"
            if args.tag:
                tag += f"-{args.tag}"
            write_result(f"throughput-epochs-{tag}", result, indent=1, sort_keys=True)
            for name, summary in result.get("summary", {}).items():
                log(f"{tag} {name}: {json.dumps(summary, default=str)[:300]}")
    finally:
        broker.stop()


def _profile(broker: Broker, records: int, tag: str | None) -> None:
    """One profiled run of the default contender on a fresh topic of ``records`` records."""
    from bench.common import produce_input
    from bench.throughput import KEYS, PARTITIONS, TOPIC_CONFIG, profile_processor_api

    size = f"{records // 1000}k" if records < 1_000_000 else f"{records // 1_000_000}M"
    name = f"{size}-{tag}" if tag else size
    topic = f"bench-count-{size}"
    broker.create_topic(topic, PARTITIONS, TOPIC_CONFIG)
    produce_input(broker.bootstrap, topic, records, KEYS)
    load_before = list(os.getloadavg())
    summary = profile_processor_api(broker, topic, records, name)
    write_result(
        f"profiles-throughput-{name}",
        {
            "what": "py-spy record --subprocesses --rate 100 --format raw (bench/profiles.py) "
            f"of {EPOCHS!r}, count per key, {records} records, {PARTITIONS} partitions; "
            "one run, not timed (py-spy slows it)",
            "machine": machine_info(),
            "loadavg_before": load_before,
            "loadavg_after": list(os.getloadavg()),
            "profiles": {EPOCHS: summary},
        },
        indent=1,
    )


if __name__ == "__main__":
    main()
