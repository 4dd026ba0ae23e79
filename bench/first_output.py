"""Where the time to the first output record goes: a continuous ``run-topology`` from the
command's start, phase by phase (the issue's start-up target: first output <= 8 s).

``python -m bench.first_output [--reps 3] [--guarantee at_least_once|exactly_once_v2]
[--contender LABEL=DIR[,EARLY_START]]... [--name NAME]`` starts the embedded broker and, per
repetition and contender in turn (alternating), a fresh ``run-topology`` of count per key with
an output topic (3 partitions, ``--master local[2]``, ``--log-level debug``) while the latency
probe (``bench/latency.py``) trickles 20 records/s into its input until the first output
record comes back. A contender runs the code of the checkout ``DIR`` (its ``PYTHONPATH``; ``.``
is this one, the only contender by default) with ``--early-start EARLY_START`` if given; a
checkout is recorded by its label and its git revision (or that in its ``.bench-revision``
file), not its path. The run's log gives the timeline: each phase is the seconds from the
command's start to the first (``first``) or the last of the three tasks (``last``) to log an
event (``None``: not logged, as the early start's phases by a version without it); the first
output is the probe's wall clock. Writes ``bench/results/<NAME>-<date>.json`` (``NAME`` by
default ``first-output``): per contender the medians over the repetitions, and every run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import (
    RAW_DIR,
    REPO_DIR,
    RUN_MARKER,
    Broker,
    command_line,
    leftover_processes,
    log,
    machine_info,
    write_result,
)
from bench.latency import READY_TIMEOUT_S, TRICKLE_RATE, _Probe, _stop, contender_cmds
from bench.throughput import PARTITIONS, TOPIC_CONFIG

#: (phase, event in the run's log, which of the tasks' events), in the order they happen.
PHASES: list[tuple[str, str, str]] = [
    ("topology planned (driver: imports, topics)", "topology_planned", "first"),
    ("worker hosts started by the driver (early start)", "worker_hosts_started_early", "first"),
    ("every task started early (built, restored)", "task_started_early", "last"),
    ("query started (JVM, SparkSession, streaming query)", "query_started", "first"),
    ("first epoch call in a pyspark worker", "epoch_call_started", "first"),
    ("every task's epoch call begun", "epoch_call_started", "last"),
    ("every task host listening (a fresh run: nothing to restore)", "task_host_listening", "last"),
    ("first input records processed", "task_first_records", "first"),
]
_LINE = re.compile(r"timestamp='([^']+)'.*?event='([a-z_]+)'")


def _seconds_after(line_time: str, started_wall: float) -> float:
    stamp = datetime.fromisoformat(line_time.replace("Z", "+00:00")).timestamp()
    return round(stamp - started_wall, 2)


def timeline(log_text: str, started_wall: float) -> dict[str, float | None]:
    """Per phase, seconds from the command's start (``None``: the event is not in the log)."""
    seen: dict[str, list[float]] = {}
    for match in _LINE.finditer(log_text):
        seen.setdefault(match.group(2), []).append(_seconds_after(match.group(1), started_wall))
    out: dict[str, float | None] = {}
    for phase, event, which in PHASES:
        times = seen.get(event, [])[:PARTITIONS]
        out[phase] = (min(times) if which == "first" else max(times)) if times else None
    return out


@dataclass(frozen=True)
class Contender:
    """A checkout to run, and its ``--early-start`` (None: the version's default)."""

    label: str
    directory: Path
    early_start: str | None

    @classmethod
    def parse(cls, text: str) -> Contender:
        label, sep, rest = text.partition("=")
        if not sep or not label or not rest:
            raise argparse.ArgumentTypeError(f"expected LABEL=DIR[,EARLY_START], got {text!r}")
        directory, _, early_start = rest.partition(",")
        path = (REPO_DIR / directory).resolve()
        if not (path / "processor_api").is_dir():
            raise argparse.ArgumentTypeError(f"{directory!r} holds no processor_api checkout")
        if early_start not in ("", "process", "open", "off"):
            raise argparse.ArgumentTypeError(f"unknown early start {early_start!r} in {text!r}")
        return cls(label, path, early_start or None)

    def revision(self) -> str:
        """The checkout's git revision (its ``.bench-revision`` file, else git's)."""
        recorded = self.directory / ".bench-revision"
        if recorded.exists():
            return recorded.read_text().strip()
        done = subprocess.run(
            ["git", "-C", str(self.directory), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or "unknown"


def run_once(broker: Broker, guarantee: str, rep: int, contender: Contender) -> dict[str, Any]:
    tag = f"{rep}-{uuid.uuid4().hex[:6]}"
    in_topic, out_topic = f"first-in-{tag}", f"first-out-{tag}"
    broker.create_topic(in_topic, PARTITIONS, TOPIC_CONFIG)
    broker.create_topic(out_topic, PARTITIONS, TOPIC_CONFIG)
    state_dir = tempfile.mkdtemp(prefix="bench-first-")
    cmd, env = contender_cmds(broker.bootstrap, in_topic, out_topic, state_dir)[
        "processor_api epochs"
    ]
    cmd = [*cmd, "--processing-guarantee", guarantee, "--log-level", "debug"]
    if contender.early_start is not None:
        cmd += ["--early-start", contender.early_start]
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    log_path = RAW_DIR / f"first-output-{guarantee}-{contender.label}-{rep}.log"
    probe = _Probe(broker.bootstrap, in_topic, out_topic)
    marker = uuid.uuid4().hex
    result: dict[str, Any] = {
        "rep": rep,
        "contender": contender.label,
        "guarantee": guarantee,
        "log": log_path.name,
    }
    with open(log_path, "w") as err:
        err.write("$ " + " ".join(cmd) + "\n")
        err.flush()
        source = {"PYTHONPATH": str(contender.directory)}
        started_wall, started = time.time(), time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=contender.directory,
            env={**os.environ, **env, **source, RUN_MARKER: marker},
            start_new_session=True,
        )
        try:
            probe.produce_for(TRICKLE_RATE, READY_TIMEOUT_S, until=probe.first_output)
            if probe.first_output.is_set():
                result["first_output_s"] = round(time.monotonic() - started, 2)
            else:
                result["error"] = f"no output within {READY_TIMEOUT_S:g}s"
        finally:
            result["exit_code"] = _stop(proc)
            probe.close()
            for pid in leftover_processes(marker):
                os.kill(pid, 9)
    result["phases_s"] = timeline(log_path.read_text(errors="replace"), started_wall)
    return result


def _medians(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    ok = [r for r in runs if "first_output_s" in r]
    medians: dict[str, float | None] = {}
    for phase, _, _ in PHASES:
        values = [r["phases_s"][phase] for r in ok if r["phases_s"][phase] is not None]
        medians[phase] = statistics.median(values) if values else None
    medians["first output record seen by the probe"] = (
        statistics.median(r["first_output_s"] for r in ok) if ok else None
    )
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_output")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once_v2"]
    )
    parser.add_argument(
        "--contender",
        type=Contender.parse,
        action="append",
        default=None,
        help="LABEL=DIR[,EARLY_START] (repeatable; default: this checkout as it is)",
    )
    parser.add_argument("--name", default="first-output", help="the result file's name")
    args = parser.parse_args(argv)
    contenders: list[Contender] = args.contender or [Contender("this", REPO_DIR, None)]
    machine = machine_info()
    started = time.time()
    broker = Broker.start()
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(args.reps):
            for contender in contenders:
                log(f"first output, {args.guarantee}, {contender.label}, rep {rep + 1}/{args.reps}")
                runs.append(run_once(broker, args.guarantee, rep, contender))
                log(f"  -> {runs[-1].get('first_output_s')} s {runs[-1]['phases_s']}")
    finally:
        broker.stop()
    machine["loadavg_at_end"] = list(os.getloadavg())
    medians = {
        c.label: _medians([r for r in runs if r["contender"] == c.label]) for c in contenders
    }
    command = command_line()
    for contender in contenders:  # the checkouts' paths are this machine's, not the result's
        command = command.replace(str(contender.directory), f"<{contender.label} checkout>")
    write_result(
        args.name,
        {
            "command": command,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "machine": machine,
            "guarantee": args.guarantee,
            "contenders": {
                c.label: {"revision": c.revision(), "early_start": c.early_start}
                for c in contenders
            },
            "median_s": medians,
            "runs": runs,
        },
    )
    for label, phases in medians.items():
        print(label)
        for phase, seconds in phases.items():
            print(f"{seconds!s:>8} s  {phase}")
    return 0 if all("first_output_s" in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
