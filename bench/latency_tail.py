"""Where the latency tail of ``run-topology`` falls in time: the slow records, second by second,
next to the tasks' commits.

``python -m bench.latency_tail [--reps 3] [--rate 2000] [--measure 30] [--probe-linger-ms 5]
[--broker-alone] [-- RUN-TOPOLOGY FLAGS]`` starts one embedded broker and runs the
``processor_api epochs`` contender of ``bench/latency.py`` (count per key with an output topic,
at_least_once) ``--reps`` times on it, with ``--log-level debug`` and any extra flags (e.g.
``--config commit.interval.ms=1000``). With ``BENCH_BASELINE_DIR``/``BENCH_BASELINE_REV`` set
(a checkout of an earlier commit) the same contender on that commit runs too, and with
``--broker-alone`` the probe alone (one hop through the broker, the same window): in each
repetition every contender once, in rotating order. ``--probe-linger-ms`` is the probe's
producer ``linger.ms`` (the embedded broker alone holds 2,000 records/s for 60 s at 50 ms, not
at 5: ``bench/broker_alone.py``). For every run it records p50/p90/p99, each second of produce
time that had records slower than ``--slow-ms`` (how many, the slowest) and the tasks'
``task_committed`` lines (time, duration, steps). Writes
``bench/results/<--name>-<date>.json`` (default ``latency-tail``; medians per contender in
``summary``), the runs' logs in ``bench/results/raw/<--name>-<date>/``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import latency
from bench.common import (
    RAW_DIR,
    REPO_DIR,
    Broker,
    command_line,
    log,
    machine_info,
    stats,
    write_result,
)

_COMMIT = re.compile(
    r"timestamp='([^']+)'.*event='task_committed'.*?task='([^']+)' duration_ms=([\d.]+) "
    r"step_ms=(\[[^\]]*\])"
)


class _TimedProbe(latency._Probe):
    """The latency probe, also counting per second of produce time the records slower than
    :attr:`slow_ms` (``slow_seconds`` in the run's result)."""

    slow_ms = 150

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slow: list[tuple[float, int]] = []
        super().__init__(*args, **kwargs)

    def measured(self, produced_ms: int, latency_ms: int) -> None:
        super().measured(produced_ms, latency_ms)
        if latency_ms > self.slow_ms:
            self.slow.append((produced_ms / 1000.0, latency_ms))

    def findings(self) -> dict[str, Any]:
        counts: Counter[str] = Counter()
        worst: dict[str, int] = {}
        for ts, waited in self.slow:
            second = time.strftime("%H:%M:%S", time.gmtime(ts))
            counts[second] += 1
            worst[second] = max(worst.get(second, 0), waited)
        return {
            "slow_seconds": [
                {"second": s, "slow_records": counts[s], "slowest_ms": worst[s]}
                for s in sorted(counts)
            ]
        }


def _commits(log_text: str) -> list[dict[str, Any]]:
    return [
        {"time": m.group(1)[11:23], "task": m.group(2), "duration_ms": float(m.group(3)),
         "step_ms": m.group(4)}
        for m in _COMMIT.finditer(log_text)
    ]  # fmt: skip


THIS_TREE = latency.EPOCHS_ALOS
BASELINE_DIR = os.environ.get("BENCH_BASELINE_DIR")
BEFORE = f"{latency.EPOCHS_ALOS} before ({os.environ.get('BENCH_BASELINE_REV', 'baseline')})"


def _contenders(broker_alone: bool) -> dict[str, tuple[str, Path, str]]:
    """Per contender: the ``bench/latency.py`` contender it runs, from which source tree, and
    the suffix of its log's name."""
    contenders = {THIS_TREE: (latency.EPOCHS_ALOS, REPO_DIR, "")}
    if BASELINE_DIR:
        contenders[BEFORE] = (latency.EPOCHS_ALOS, Path(BASELINE_DIR), "-before")
    if broker_alone:
        contenders[latency.BROKER_ALONE] = (latency.BROKER_ALONE, REPO_DIR, "")
    return contenders


def _summary(runs: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    summary = {}
    for name in names:
        good = [r for r in runs if r["contender"] == name and r.get("p99_ms") is not None]
        summary[name] = {
            "ok": len([r for r in good if not r.get("error")]),
            "runs": len([r for r in runs if r["contender"] == name]),
            **{key: stats([r[key] for r in good]) for key in ("p50_ms", "p99_ms", "max_ms")},
            "p99_ms_of_runs": [r["p99_ms"] for r in good],
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_tail")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--measure", type=float, default=30.0)
    parser.add_argument("--slow-ms", type=int, default=150)
    parser.add_argument("--probe-linger-ms", type=int, default=latency.PROBE_LINGER_MS)
    parser.add_argument("--broker-alone", action="store_true", help="the probe alone too")
    parser.add_argument("--name", default="latency-tail", help="result file and raw-log folder")
    parser.add_argument("flags", nargs="*", help="more run-topology flags (after --)")
    args = parser.parse_args(argv)
    extra = ["--log-level", "debug", *args.flags]
    _TimedProbe.slow_ms = args.slow_ms
    latency.PROBE_LINGER_MS = args.probe_linger_ms
    raw_dir = RAW_DIR / f"{args.name}-{time.strftime('%Y-%m-%d')}"  # keeps others' logs
    machine = machine_info()
    contenders = _contenders(args.broker_alone)
    names = list(contenders)
    runs = []
    broker = Broker.start()
    try:
        for rep in range(args.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                contender, directory, suffix = contenders[name]
                log(f"latency tail, {args.rate}/s, rep {rep + 1}/{args.reps}, {name}, {extra}")
                load = os.getloadavg()[0]
                result = latency.run_one(
                    broker, contender, args.rate, rep, 3.0, args.measure, 30.0,
                    extra_flags=extra, probe_type=_TimedProbe, raw_dir=raw_dir,
                    library_dir=directory, label_suffix=suffix,
                )  # fmt: skip
                result["contender"] = name
                result["loadavg_1m_at_start"] = load
                if contender != latency.BROKER_ALONE:
                    log_text = Path(result["log"]).read_text(errors="replace")
                    result["commits"] = _commits(log_text)
                runs.append(result)
                log(f"  -> p50 {result.get('p50_ms')} p99 {result.get('p99_ms')} ms")
                for second in result["slow_seconds"]:
                    log(f"     {second}")
                for commit in result.get("commits", []):
                    log(f"     commit {commit}")
    finally:
        broker.stop()
    machine["loadavg_at_end"] = list(os.getloadavg())
    summary = _summary(runs, names)
    for name, figures in summary.items():
        log(f"{name}: {figures}")
    write_result(
        args.name,
        {"command": command_line(), "flags": extra, "rate": args.rate, "slow_ms": args.slow_ms,
         "measure_s": args.measure, "probe_linger_ms": args.probe_linger_ms,
         "baseline_dir": BASELINE_DIR, "machine": machine, "summary": summary, "runs": runs},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
