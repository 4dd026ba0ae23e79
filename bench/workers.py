"""What a run costs as its task count grows: workers against one host process per task.

``python -m bench.workers [--records N] [--reps R] [--layout P[xS]] ...``: count per key
(``topologies/count_per_key.py``) ``--available-now`` on ``--master local[2]`` over P input
partitions, with ``xS`` = ``x2`` through a repartition topic (two sub-topologies: 2P tasks).
Every layout's input topic is filled once; each repetition runs each contender once, in
rotating order, from a cold start (fresh state directory, application id and repartition
topic), sampling the peak PSS of all the run's processes (``bench/common.MemorySampler``).
Contenders: ``workers`` (this tree) and, with ``BENCH_BASELINE_DIR``/``BENCH_BASELINE_REV``
set (a checkout of an earlier commit), ``task hosts`` (that commit); ``--variant NAME=ARGS``
adds this tree run with ARGS added to run-topology (e.g. ``--spark-conf`` settings; a word
``env:KEY=VALUE`` sets an environment variable of the run instead), named NAME. Each run's counts are
read back from its local stores and must sum to the records. ``--guarantee exactly_once_v2``
runs every contender under exactly-once (one transactional producer per task before issue 35's
producer per worker, one per worker since). Writes
``bench/results/workers-<records>[-<guarantee>][-<tag>]-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    PYTHON,
    REPO_DIR,
    Broker,
    RunOutcome,
    alternate,
    log,
    machine_info,
    outcome_dicts,
    produce_input,
    run_command,
    run_topology_module,
    stats,
    write_result,
)

MASTER = "local[2]"
#: The processing guarantee of every run (``--guarantee``).
GUARANTEE = "at_least_once"
KEYS = 10_000
TIMEOUT_S = 1_800.0
BASELINE_DIR = os.environ.get("BENCH_BASELINE_DIR")
BASELINE_REV = os.environ.get("BENCH_BASELINE_REV", "baseline")
WORKERS = "workers"
TASK_HOSTS = f"task hosts ({BASELINE_REV})"
#: Other contenders on this tree: name -> arguments added to run-topology (``--variant``).
VARIANTS: dict[str, list[str]] = {}
#: A variant's word ``env:KEY=VALUE`` sets KEY in the run's environment instead.
ENV_PREFIX = "env:"


def _command(
    topic: str,
    repartition: str | None,
    state_dir: str,
    app_id: str,
    library: Path = REPO_DIR,
    extra: Sequence[str] = (),
) -> list[str]:
    cmd = [
        PYTHON, "-m", run_topology_module(library), "topologies.count_per_key:build_topology",
        "--bootstrap-servers", "BOOTSTRAP", "--application-id", app_id, "--state-dir", state_dir,
        "--available-now", "--master", MASTER, "--processing-guarantee", GUARANTEE,
        "--topology-arg", f"input_topic={json.dumps(topic)}",
    ]  # fmt: skip
    if repartition is not None:
        cmd += ["--topology-arg", f"repartition_topic={json.dumps(repartition)}"]
    return cmd + list(extra)


def _counts(state_dir: str, app_id: str) -> dict[str, int]:
    from processor_api.serdes import Serdes
    from processor_api.state.inspect import read_local_store

    counts = read_local_store(state_dir, app_id, "counts", Serdes.string(), Serdes.long())
    return {"keys": len(counts), "sum_counts": sum(counts.values())}


def run_layout(
    broker: Broker, partitions: int, subtopologies: int, records: int, reps: int
) -> dict:
    topic = f"workers-in-{partitions}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, partitions)
    produced = produce_input(broker.bootstrap, topic, records, KEYS)
    tag = f"{partitions}x{subtopologies}"
    log(
        f"layout {tag}: {records} records on {partitions} partitions, {subtopologies} sub-topologies"
    )

    def contender(name: str, directory: Path, extra: Sequence[str] = ()) -> Any:
        def run(rep: int) -> RunOutcome:
            state_dir = tempfile.mkdtemp(prefix="bench-workers-")
            app_id = f"bench-workers-{tag}-{rep}-{uuid.uuid4().hex[:6]}"
            repartition = f"{app_id}-rp" if subtopologies == 2 else None
            if repartition is not None:
                broker.create_topic(repartition, partitions)
            args = [word for word in extra if not word.startswith(ENV_PREFIX)]
            env = dict(
                word[len(ENV_PREFIX) :].split("=", 1)
                for word in extra
                if word.startswith(ENV_PREFIX)
            )
            cmd = _command(topic, repartition, state_dir, app_id, directory, args)
            cmd[cmd.index("BOOTSTRAP")] = broker.bootstrap
            memory: dict[str, Any] = {}
            wall, code, _, log_path = run_command(
                cmd,
                label=f"workers-{tag}-{name.split()[0]}-{rep}",
                timeout_s=TIMEOUT_S,
                env={"PYTHONPATH": str(directory), **env},
                cwd=directory,
                memory=memory,
            )
            metrics: dict[str, Any] = {"memory": memory}
            ok = code == 0
            if ok:
                metrics.update(_counts(state_dir, app_id))
                ok = metrics["sum_counts"] == records and metrics["keys"] == KEYS
            return RunOutcome(name, rep, wall, ok, metrics, None if ok else f"exit {code}",
                              str(log_path))  # fmt: skip

        return run

    contenders = {WORKERS: contender(WORKERS, REPO_DIR)}
    if BASELINE_DIR:
        contenders[TASK_HOSTS] = contender(TASK_HOSTS, Path(BASELINE_DIR))
    for name, extra in VARIANTS.items():
        contenders[name] = contender(name, REPO_DIR, extra)
    outcomes = alternate(contenders, reps)
    summary = {}
    for name in contenders:
        good = [o for o in outcomes if o.contender == name and o.ok]
        summary[name] = {
            "ok": len(good),
            "runs": len([o for o in outcomes if o.contender == name]),
            "wall_s": stats([o.wall_s for o in good]),
            "peak_pss_mib": stats([o.metrics["memory"]["peak_pss_mib"] for o in good]),
            "processes_at_peak": stats([o.metrics["memory"]["processes_at_peak"] for o in good]),
        }
        log(f"  {tag} {name}: {json.dumps(summary[name])}")
    return {
        "layout": tag,
        "partitions": partitions,
        "subtopologies": subtopologies,
        "tasks": partitions * subtopologies,
        "produced": produced,
        "command": " ".join(
            _command(topic, "REPARTITION" if subtopologies == 2 else None, "STATE_DIR", "APP")
        ),  # fmt: skip
        "variants": {name: " ".join(extra) for name, extra in VARIANTS.items()},
        "runs": outcome_dicts(outcomes),
        "summary": summary,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--layout", action="append", default=None,
                        help="P or PxS (S=2: through a repartition topic); repeatable")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="another contender: this tree with ARGS (shell words) added to "
                        "run-topology; repeatable")  # fmt: skip
    parser.add_argument("--tag", default="", help="added to the result file's name")
    parser.add_argument("--guarantee", default="at_least_once",
                        choices=["at_least_once", "exactly_once_v2"])  # fmt: skip
    args = parser.parse_args()
    global GUARANTEE
    GUARANTEE = args.guarantee
    for variant in args.variant:
        name, _, words = variant.partition("=")
        VARIANTS[name] = shlex.split(words)
    layouts = []
    for text in args.layout or ["3", "24"]:
        partitions, _, subtopologies = text.partition("x")
        layouts.append((int(partitions), int(subtopologies or 1)))
    broker = Broker.start()
    started_load = list(os.getloadavg())
    try:
        results = [run_layout(broker, p, s, args.records, args.reps) for p, s in layouts]
    finally:
        broker.stop()
    tag = (
        f"{args.records // 1000}k" if args.records < 1_000_000 else f"{args.records // 1_000_000}M"
    )
    suffix = "" if GUARANTEE == "at_least_once" else f"-{GUARANTEE.replace('_', '-')}"
    suffix += f"-{args.tag}" if args.tag else ""
    write_result(
        f"workers-{tag}{suffix}",
        {
            "machine": machine_info(),
            "master": MASTER,
            "records": args.records,
            "guarantee": GUARANTEE,
            "keys": KEYS,
            "loadavg_at_start": started_load,
            "loadavg_at_end": list(os.getloadavg()),
            "layouts": results,
        },
        indent=1,
        sort_keys=True,
    )


if __name__ == "__main__":
    main()
