"""Latency of a run in epochs against the hand-written loop and Quix Streams.

``python -m bench.latency_epochs [RATE ...] [--reps N] [--measure S]`` runs the contenders of
``bench/latency.py`` named below, alternating, at each rate, and writes
``bench/results/latency-epochs-<date>.json`` (machine, load, commands, every run, medians).
Results recorded before the micro-batch runtime was removed also have its contender,
``processor_api trigger=0.5s`` (``latency-micro-batches-2026-11-27.json``: ``trigger=1s``).
"""

from __future__ import annotations

import argparse
import os

from bench.common import Broker, ensure_environments, log, machine_info, write_result
from bench.latency import BROKER_ALONE, EPOCHS_ALOS, EPOCHS_EOS, run

CONTENDERS = {EPOCHS_ALOS, EPOCHS_EOS, "hand_loop", "quixstreams", BROKER_ALONE}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_epochs")
    parser.add_argument("rates", nargs="*", type=int, default=[2000])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--only", default=None, help="comma-separated contender names")
    args = parser.parse_args()
    include = set(args.only.split(",")) if args.only else CONTENDERS
    problems = ensure_environments()
    broker = Broker.start()
    try:
        result = run(broker, args.rates, args.reps, 3.0, args.measure, include=include)
    finally:
        broker.stop()
    result["machine"] = machine_info()
    result["loadavg_at_end"] = list(os.getloadavg())
    result["environment_problems"] = problems
    write_result("latency-epochs", result, indent=1, sort_keys=True)
    for rate, by_name in result["summary"].items():
        for name, stats in by_name.items():
            p50, p99 = stats["p50_ms"]["median"], stats["p99_ms"]["median"]
            log(f"{rate}/s {name}: p50 {p50} ms, p99 {p99} ms ({stats['ok']} ok)")


if __name__ == "__main__":
    main()
