"""What batch stamps cost: word count through a repartition topic under exactly_once_v2.

Two contenders run the same ``run-topology topologies.word_count:build_topology
--available-now --processing-guarantee exactly_once_v2`` on one input topic of the embedded
broker, alternating: this tree's library (every repartition record stamped, every one checked
downstream) and a frozen copy of an earlier commit without stamps (``BENCH_BASELINE_DIR``, made
by ``bench/snapshot.sh --baseline REV``). Each run is checked: the counts store's total equals
the number of words. Figures: wall time of the whole command (Spark start included), medians,
the ratio after/before, the load average.

The recorded result (``results/repartition-eos-100000-2026-11-23.json``, baseline a5e94e6) ran
both in micro-batches of at most 100,000 records (``--max-records-per-batch``). That runtime is
gone and the command now runs in epochs. Every commit that has epochs (251ad5a on) also stamps
its batches (17118ef), so stamps against no stamps cannot be measured again in epochs; the
script still compares this tree with any baseline that runs in epochs by default (bbd3af0 or
later). The commands below are those of the recorded run.

    base=$(mktemp -d) && git archive a5e94e6 | tar -x -C "$base"
    snap=$(mktemp -d) && git archive HEAD | tar -x -C "$snap" && cd "$snap"
    BENCH_BASELINE_DIR=$base BENCH_BASELINE_REV=a5e94e6 BENCH_OUTPUT_DIR=<repo>/bench \
      PYTHONPATH=$snap <repo>/.venv/bin/python -m bench.repartition_eos --lines 100000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import uuid
from pathlib import Path

from bench.common import (
    PYTHON,
    REPO_DIR,
    Broker,
    RunOutcome,
    alternate,
    command_line,
    log,
    machine_info,
    outcome_dicts,
    ratio,
    run_command,
    run_topology_module,
    stats,
    write_result,
)

PARTITIONS = 3
WORDS_PER_LINE = 5
VOCABULARY = [f"word{n:04d}" for n in range(2000)]
AFTER = "processor_api (batch stamps)"


def produce_lines(bootstrap: str, topic: str, lines: int) -> int:
    """``lines`` lines of random words, round robin over the partitions; returns the words."""
    from confluent_kafka import Producer

    rnd = random.Random(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all"})
    for i in range(lines):
        line = " ".join(rnd.choice(VOCABULARY) for _ in range(WORDS_PER_LINE))
        while True:
            try:
                producer.produce(topic, line.encode(), b"l%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("input not delivered")
    return lines * WORDS_PER_LINE


def _run(
    label: str, library: str, bootstrap: str, topic: str, words: int, workdir: Path, rep: int
) -> RunOutcome:
    app_id = f"bench-rep-eos-{uuid.uuid4().hex[:8]}"
    state_dir = workdir / app_id
    topics = {
        "input_topic": topic,
        "repartition_topic": f"{app_id}-words",
        "output_topic": f"{app_id}-counts",
    }
    cmd = [
        PYTHON,
        "-m",
        run_topology_module(library),
        "topologies.word_count:build_topology",
        "--bootstrap-servers",
        bootstrap,
        "--application-id",
        app_id,
        "--state-dir",
        str(state_dir),
        "--available-now",
        "--master",
        "local[2]",
        "--processing-guarantee",
        "exactly_once_v2",
        *[a for k, v in topics.items() for a in ("--topology-arg", f"{k}={json.dumps(v)}")],
    ]
    safe = label.split(" ")[0] + ("-before" if "before" in label else "")
    wall, code, _, log_path = run_command(
        cmd,
        label=f"repartition-eos-{safe}-{rep}",
        timeout_s=1800,
        env={"PYTHONPATH": library},
    )
    if code != 0:
        return RunOutcome(label, rep, wall, False, error=f"exit {code}, see {log_path}")
    from processor_api.serdes import Serdes
    from processor_api.state.inspect import read_local_store

    counts = read_local_store(state_dir, app_id, "counts-store", Serdes.string(), Serdes.long())
    total = sum(counts.values())
    ok = total == words
    return RunOutcome(
        label,
        rep,
        wall,
        ok,
        metrics={"counted_words": total},
        error=None if ok else f"counted {total} words, expected {words}",
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    baseline_dir = os.environ.get("BENCH_BASELINE_DIR")
    before = f"processor_api before ({os.environ.get('BENCH_BASELINE_REV', 'baseline')})"
    load_before = os.getloadavg()
    broker = Broker.start()
    try:
        topic = f"bench-lines-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, PARTITIONS)
        words = produce_lines(broker.bootstrap, topic, args.lines)
        with tempfile.TemporaryDirectory(prefix="bench-rep-eos-") as tmp:
            workdir = Path(tmp)
            library = os.environ.get("PYTHONPATH", str(REPO_DIR)).split(os.pathsep)[0]
            contenders = {
                AFTER: lambda rep: _run(
                    AFTER, library, broker.bootstrap, topic, words, workdir, rep
                )
            }
            if baseline_dir:
                contenders[before] = lambda rep: _run(
                    before, baseline_dir, broker.bootstrap, topic, words, workdir, rep
                )
            outcomes = alternate(contenders, args.reps)
    finally:
        broker.stop()
    summary = {}
    for name in contenders:
        walls = [o.wall_s for o in outcomes if o.contender == name and o.ok]
        summary[name] = {
            "ok": len(walls),
            "wall_s": stats(walls),
            "words_per_s_median": words / statistics.median(walls) if walls else None,
        }
    pairs = None
    if baseline_dir:
        pairs = ratio(summary[AFTER]["wall_s"]["median"], summary[before]["wall_s"]["median"])
    payload = {
        "benchmark": "repartition-eos",
        "command": command_line(),
        "lines": args.lines,
        "words": words,
        "machine": machine_info(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "summary": summary,
        "wall_ratio_after_over_before": pairs,
        "outcomes": outcome_dicts(outcomes),
    }
    write_result(f"repartition-eos-{args.lines}", payload)
    log(json.dumps({"summary": summary, "ratio": pairs}, default=str))


if __name__ == "__main__":
    main()
