"""What the longer producer linger against Tansu costs a topology end to end.

``run-topology`` against Tansu gives the runtime's producers ``linger.ms`` 50
(:mod:`processor_api.kafka.local_broker`) instead of 5. This runs ``bench.latency``'s
``processor_api epochs`` contender (count per key, at_least_once, output to a topic) on the
embedded broker with each setting, alternating, and reports the latency of each:

    python -m bench.runtime_linger --rate 2000 --measure-s 30 --reps 1

It writes ``bench/results/runtime-linger-tansu-<date>.json``. The probe's own producer lingers
5 ms in both (``bench.latency``), so both runs pay the same for the input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Broker, log, write_result
from bench.latency import EPOCHS_ALOS, run_one

#: Label -> extra ``run-topology`` flags.
SETTINGS: dict[str, list[str]] = {
    "linger 50 (default against Tansu)": [],
    "linger 5 (librdkafka's default)": ["--kafka-config", "producer.linger.ms=5"],
}


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.runtime_linger``: see the module docs."""
    parser = argparse.ArgumentParser(prog="python -m bench.runtime_linger")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=30.0)
    parser.add_argument("--drain-s", type=float, default=15.0)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args(argv)
    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    runs: list[dict[str, Any]] = []
    labels = list(SETTINGS)
    raw_dir = Path(tempfile.mkdtemp(prefix="runtime-linger-"))  # the runs' logs, not kept
    log(f"run logs in {raw_dir}")
    for rep in range(args.reps):
        for label in labels[rep % 2 :] + labels[: rep % 2]:
            broker = Broker.start()  # a fresh broker each: its cost grows with what it holds
            try:
                log(f"runtime linger: {label}, rep {rep + 1}/{args.reps}")
                outcome = run_one(
                    broker,
                    EPOCHS_ALOS,
                    args.rate,
                    rep,
                    args.settle_s,
                    args.measure_s,
                    args.drain_s,
                    extra_flags=SETTINGS[label],
                    raw_dir=raw_dir,
                )
            finally:
                broker.stop()
            outcome.pop("log", None)
            outcome["setting"] = label
            log(f"  -> {json.dumps(outcome)}")
            runs.append(outcome)
    write_result(
        "runtime-linger-tansu",
        {
            "command": "python -m bench.runtime_linger " + " ".join(argv or sys.argv[1:]),
            "contender": EPOCHS_ALOS,
            "rate": args.rate,
            "settle_s": args.settle_s,
            "measure_s": args.measure_s,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
