"""Throughput, end to end: count per key (10,000 keys, 3 partitions) by four contenders.

* ``processor_api epochs``: ``run-topology topologies.count_per_key:build_topology
  --available-now --master local[2]`` (runs in epochs, the only runtime) as a subprocess
  (Spark start included); checked by reading the local RocksDB stores afterwards (sum of
  counts = records, 10,000 keys).
* ``hand_loop``: ``bench/hand_loop.py``, a confluent-kafka consumer loop updating rocksdict.
* ``quixstreams``: ``bench/quix_count.py`` in its own virtualenv (stateful ``apply``).
* ``transformWithStateInPandas``: ``bench/tws_count.py`` (Spark, RocksDB state store provider,
  input from the benchmark's own Kafka data source ``bench/tws_source.py``), ``local[2]``.

Every contender reads the same topic; the wall time of each subprocess (interpreter and Spark
start included) is the figure. Records per second = records / wall time.

The micro-batch runtime's contenders (``processor_api``, its ``before`` and its diagnostics:
1M-record batches, ``local[3]``, no whole-stage codegen; and ``engine without Spark``, which
replayed the micro-batch task path) went with that runtime. The epochs contenders keep the
names they were recorded under (``processor_api epochs ...``), so results in ``results/``
still match; a recorded ``processor_api`` is the micro-batch runtime.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import profiles
from bench.common import (
    BENCH_DIR,
    OUTPUT_DIR,
    PYTHON,
    QUIX_VENV,
    REPO_DIR,
    Broker,
    RunOutcome,
    alternate,
    last_json_line,
    log,
    outcome_dicts,
    ratio,
    run_command,
    run_topology_module,
    summarize,
    topic_end_offsets,
)

PARTITIONS = 3
KEYS = 10_000
MASTER = "local[2]"
#: Records of one transformWithStateInPandas micro-batch at most (``bench/tws_count.py``): the
#: size the micro-batch contender of processor_api used, so its recorded figures stay comparable.
TWS_RECORDS_PER_BATCH = 200_000
TWS_EXTRA = OUTPUT_DIR / ".venvs" / "tws-extra"  # protobuf for transformWithStateInPandas
#: Tansu only returns configs that were set explicitly; Quix Streams needs retention.* of its
#: input topic to derive its changelog topics, so the input topic is created with them.
TOPIC_CONFIG = {"retention.ms": "604800000", "retention.bytes": "-1"}


def run_topology_bin() -> str:
    return str(Path(PYTHON).parent / "run-topology")


#: Before/after contender: the same run-topology command on a frozen copy of an earlier commit
#: of the library (``BENCH_BASELINE_DIR``, e.g. made by ``bench/snapshot.sh --baseline REV``),
#: so the speed-up of this tree's changes is measured side by side in one run. The command
#: does not ask for a runtime, so the baseline runs its default: epochs from bbd3af0 on (an
#: older baseline would run micro-batches).
BASELINE_DIR = os.environ.get("BENCH_BASELINE_DIR")
#: Extra run-topology arguments of every run-topology contender (``--debug-log`` of
#: ``bench.throughput_epochs`` sets ``--log-level debug``: the start-up timeline in the results).
RUN_EXTRA: tuple[str, ...] = ()
BASELINE_REV = os.environ.get("BENCH_BASELINE_REV", "baseline")


def before_env() -> dict[str, str]:
    return {"PYTHONPATH": str(BASELINE_DIR)}


def before_cmd(
    bootstrap: str, topic: str, state_dir: str, app_id: str, extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        PYTHON,
        "-m",
        run_topology_module(str(BASELINE_DIR)),
        *processor_api_cmd(bootstrap, topic, state_dir, app_id, extra)[3:],
    ]


def processor_api_cmd(
    bootstrap: str, topic: str, state_dir: str, app_id: str, extra: tuple[str, ...] = ()
) -> list[str]:
    # ``python -m`` rather than the virtualenv's ``run-topology`` script: an environment
    # installed before the ``cli/`` package has a script that imports the old module
    return [
        PYTHON,
        "-m",
        run_topology_module(str(REPO_DIR)),
        "topologies.count_per_key:build_topology",
        "--bootstrap-servers",
        bootstrap,
        "--application-id",
        app_id,
        "--state-dir",
        state_dir,
        "--available-now",
        "--master",
        MASTER,
        "--topology-arg",
        f"input_topic={json.dumps(topic)}",
        *extra,
    ]


#: The run-topology contender. Named for the runtime when there were two; the name is kept so
#: that results recorded since (``throughput-epochs-*.json``) match.
EPOCHS = "processor_api epochs"
EPOCHS_BEFORE = f"processor_api epochs before ({BASELINE_REV})"
#: The baseline on one core (``--master local[1]``), beside :data:`EPOCHS_ONE_CORE`.
EPOCHS_BEFORE_ONE_CORE = f"processor_api epochs local[1] before ({BASELINE_REV})"
#: Python workers forked by the JVM one by one instead of from pyspark's daemon process.
EPOCHS_NO_DAEMON = "processor_api epochs no pyspark daemon (diagnostic)"
#: The same count per key and one-minute tumbling window in a window store (RocksDB segments):
#: a windowed aggregation end to end, next to the key-value count. (Recorded with the
#: micro-batch runtime as ``processor_api windowed count``.)
EPOCHS_WINDOWED = "processor_api epochs windowed count"

#: Diagnostic contenders: the same run with one user-level or runner-level knob changed (the
#: micro-batch runtime's were recorded as ``processor_api caching (diagnostic)`` and
#: ``processor_api JVM defaults (diagnostic)``).
EPOCHS_CACHING = "processor_api epochs caching (diagnostic)"
#: The driver JVM with the JVM's own defaults (C2, G1) instead of the runner's start-up options.
EPOCHS_JVM_DEFAULTS = "processor_api epochs JVM defaults (diagnostic)"
#: One core, as the hand loop has: ``--master local[1]`` (one worker running every task).
EPOCHS_ONE_CORE = "processor_api epochs local[1]"
#: Three workers on ``local[2]`` (``num.stream.threads=3``; the runner sizes the master to
#: ``local[3]``): one task each over 3 equal partitions, against the default's 2 + 1 on two
#: workers (issue 35's balance question; the two cores are shared by three hosts).
EPOCHS_THREE_WORKERS = "processor_api epochs 3 workers"
JVM_DEFAULTS_ENV = {"PROCESSOR_API_DRIVER_JAVA_OPTIONS": " "}

#: Extra run-topology arguments and environment of each run-topology contender.
PROCESSOR_API_VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str] | None]] = {
    EPOCHS: ((), None),
    EPOCHS_BEFORE: ((), None),
    EPOCHS_BEFORE_ONE_CORE: (("--master", "local[1]"), None),
    EPOCHS_NO_DAEMON: (("--spark-conf", "spark.python.use.daemon=false"), None),
    EPOCHS_WINDOWED: (("--topology-arg", "windowed=true"), None),
    EPOCHS_CACHING: (("--topology-arg", "caching=true"), None),
    EPOCHS_JVM_DEFAULTS: ((), JVM_DEFAULTS_ENV),
    EPOCHS_ONE_CORE: (("--master", "local[1]"), None),
    EPOCHS_THREE_WORKERS: (("--config", "num.stream.threads=3"), None),
}


def hand_loop_cmd(bootstrap: str, topic: str, records: int, state_dir: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "bench.hand_loop",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions",
        str(PARTITIONS),
        "--records",
        str(records),
        "--state-dir",
        state_dir,
    ]


def quix_cmd(bootstrap: str, topic: str, records: int, state_dir: str) -> list[str]:
    return [
        str(QUIX_VENV / "bin" / "python"),
        str(BENCH_DIR / "quix_count.py"),
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--records",
        str(records),
        "--state-dir",
        state_dir,
    ]


def tws_cmd(bootstrap: str, topic: str, records: int, ends: dict[int, int], checkpoint: str):
    end_json = json.dumps({topic: {str(p): n for p, n in ends.items()}})
    return [
        PYTHON,
        "-m",
        "bench.tws_count",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--end-offsets",
        end_json,
        "--records",
        str(records),
        "--checkpoint",
        checkpoint,
        "--master",
        MASTER,
        "--partitions",
        str(PARTITIONS),
        "--records-per-batch",
        str(TWS_RECORDS_PER_BATCH),
    ]


def tws_env() -> dict[str, str]:
    return {"PYTHONPATH": f"{TWS_EXTRA}:{REPO_DIR}"}


def _verify_windowed(bootstrap: str, topic: str, app_id: str) -> dict[str, Any]:
    """Keys and total count of the windowed run, read from its committed changelog."""
    from processor_api import read_store

    keys, total, windows = set(), 0, 0
    for entry in read_store(
        bootstrap,
        app_id,
        "topologies.count_per_key:build_topology",
        "counts",
        topology_kwargs={"input_topic": topic, "windowed": True},
    ):
        keys.add(entry.key.key)
        total += entry.value
        windows += 1
    return {"keys": len(keys), "sum_counts": total, "windows": windows}


def _verify_processor_api(state_dir: str, app_id: str, records: int) -> dict[str, Any]:
    from processor_api.serdes import Serdes
    from processor_api.state.inspect import read_local_store

    counts = read_local_store(state_dir, app_id, "counts", Serdes.string(), Serdes.long())
    return {"keys": len(counts), "sum_counts": sum(counts.values())}


def _phase_times(log_path: Path, started_epoch: float | None = None) -> dict[str, Any]:
    """Where a run-topology run's time went, from the run's own log.

    * ``start_to_query_started_s``/``start_to_first_batch_s``: from the process start (the
      harness' clock) to ``query_started`` and to the first ``batch_done`` with records;
    * ``planned_to_query_started_s``, ``query_started_to_first_batch_s``,
      ``query_started_to_finished_s``;
    * ``first_batch``: Spark's ``durationMs`` of batch 0 (``spark_batch_timings``), if logged;
    * ``steady_records_per_s``: records of the batches after the first / time between the
      first and the last ``batch_done`` (the first batch's start-up excluded); an
      ``--available-now`` run in epochs usually logs one ``batch_done``, so it has none;
    * ``batches``: (records, seconds since the previous batch_done) per batch;
    * with a debug log (``--debug-log``): ``start_to_hosts_processing_s`` (the first
      ``task_first_records``), ``start_to_last_early_commit_s`` (the last ``task_committed``
      before the first epoch's call: the hosts' end when they reached the run's ends first)
      and ``start_to_epoch_call_s`` (the first ``epoch_call_started``).
    """
    import re
    from datetime import datetime

    def epoch(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    stamps: dict[str, float] = {}
    batches: list[tuple[float, int]] = []
    timings: dict[int, dict[str, int]] = {}
    pattern = re.compile(r"timestamp='([^']+)' level='\w+' event='(\w+)'")
    for line in log_path.read_text(errors="replace").splitlines():
        match = pattern.search(line)
        if not match:
            continue
        event, stamp = match.group(2), epoch(match.group(1))
        if event not in stamps:
            stamps[event] = stamp
        if event == "task_committed" and "epoch_call_started" not in stamps:
            stamps["last_commit_before_call"] = stamp
        if event == "batch_done":
            records = re.search(r" records=(\d+)", line)
            if records and int(records.group(1)) > 0:
                batches.append((stamp, int(records.group(1))))
        elif event == "spark_batch_timings":
            batch = re.search(r" batch=(\d+)", line)
            if batch and int(batch.group(1)) not in timings:
                timings[int(batch.group(1))] = {
                    k: int(v) for k, v in re.findall(r" (\w+_ms)=(\d+)", line)
                }
    out: dict[str, Any] = {}
    if "topology_planned" in stamps and "query_started" in stamps:
        out["planned_to_query_started_s"] = round(
            stamps["query_started"] - stamps["topology_planned"], 2
        )
    if started_epoch is not None:
        if "query_started" in stamps:
            out["start_to_query_started_s"] = round(stamps["query_started"] - started_epoch, 2)
        if batches:
            out["start_to_first_batch_s"] = round(batches[0][0] - started_epoch, 2)
    if batches and "query_started" in stamps:
        out["query_started_to_first_batch_s"] = round(batches[0][0] - stamps["query_started"], 2)
    if "query_started" in stamps and "run_finished" in stamps:
        out["query_started_to_finished_s"] = round(
            stamps["run_finished"] - stamps["query_started"], 2
        )
    if started_epoch is not None:
        for key, event in (
            ("start_to_hosts_processing_s", "task_first_records"),
            ("start_to_last_early_commit_s", "last_commit_before_call"),
            ("start_to_epoch_call_s", "epoch_call_started"),
        ):
            if event in stamps:
                out[key] = round(stamps[event] - started_epoch, 2)
    if 0 in timings:
        out["first_batch"] = timings[0]
    if len(batches) >= 2:
        span = batches[-1][0] - batches[0][0]
        steady = sum(r for _, r in batches[1:])
        out["steady_records_per_s"] = round(steady / span) if span > 0 else None
        out["steady_batches"] = len(batches) - 1
    out["batches"] = [
        (
            records,
            round(stamp - (batches[i - 1][0] if i else stamps.get("query_started", stamp)), 2),
        )
        for i, (stamp, records) in enumerate(batches)
    ]
    return out


def contenders(
    broker: Broker,
    topic: str,
    records: int,
    ends: dict[int, int],
    tag: str,
    timeout_s: float,
    include: set[str] | None = None,
) -> dict[str, Any]:
    bootstrap = broker.bootstrap

    def processor_api(rep: int, name: str) -> RunOutcome:
        extra, extra_env = PROCESSOR_API_VARIANTS[name]
        extra = (*RUN_EXTRA, *extra)
        state_dir = tempfile.mkdtemp(prefix="bench-pa-")
        app_id = f"bench-cpk-{tag}-{rep}-{uuid.uuid4().hex[:6]}"
        label = {
            EPOCHS: "processor_api_epochs",
            EPOCHS_BEFORE: "processor_api_epochs_before",
            EPOCHS_BEFORE_ONE_CORE: "processor_api_epochs_local1_before",
            EPOCHS_NO_DAEMON: "processor_api_epochs_no_daemon",
            EPOCHS_WINDOWED: "processor_api_epochs_windowed",
            EPOCHS_CACHING: "processor_api_epochs_caching",
            EPOCHS_JVM_DEFAULTS: "processor_api_epochs_jvm_defaults",
            EPOCHS_ONE_CORE: "processor_api_epochs_local1",
            EPOCHS_THREE_WORKERS: "processor_api_epochs_3_workers",
        }[name]
        if name in (EPOCHS_BEFORE, EPOCHS_BEFORE_ONE_CORE):
            cmd, env, cwd = (
                before_cmd(bootstrap, topic, state_dir, app_id, extra),
                before_env(),
                Path(str(BASELINE_DIR)),
            )
        else:
            cmd, env, cwd = (
                processor_api_cmd(bootstrap, topic, state_dir, app_id, extra),
                extra_env,
                REPO_DIR,
            )
        memory: dict[str, Any] = {}
        started_epoch = time.time()
        wall, code, out, log_path = run_command(
            cmd,
            label=f"throughput-{tag}-{label}-{rep}",
            timeout_s=timeout_s,
            env=env,
            cwd=cwd,
            memory=memory,
        )
        metrics: dict[str, Any] = {}
        error = None
        if code == 0:
            if name == EPOCHS_WINDOWED:
                metrics = _verify_windowed(bootstrap, topic, app_id)
            else:
                metrics = _verify_processor_api(state_dir, app_id, records)
            metrics.update(_phase_times(log_path, started_epoch))
            metrics["memory"] = memory
            if metrics["sum_counts"] != records or metrics["keys"] != KEYS:
                error = f"wrong counts: {metrics}"
        else:
            error = f"exit {code}, see {log_path}"
        return RunOutcome(name, rep, wall, error is None, metrics, error, str(log_path))

    def hand_loop(rep: int) -> RunOutcome:
        state_dir = tempfile.mkdtemp(prefix="bench-hand-")
        memory: dict[str, Any] = {}
        wall, code, out, log_path = run_command(
            hand_loop_cmd(bootstrap, topic, records, state_dir),
            label=f"throughput-{tag}-hand_loop-{rep}",
            timeout_s=timeout_s,
            memory=memory,
        )
        metrics = last_json_line(out)
        metrics["memory"] = memory
        ok = code == 0 and metrics.get("sum_counts") == records and metrics.get("keys") == KEYS
        return RunOutcome(
            "hand_loop",
            rep,
            wall,
            ok,
            metrics,
            None if ok else f"exit {code}: {metrics}",
            str(log_path),
        )

    def quixstreams(rep: int) -> RunOutcome:
        state_dir = tempfile.mkdtemp(prefix="bench-quix-")
        memory: dict[str, Any] = {}
        wall, code, out, log_path = run_command(
            quix_cmd(bootstrap, topic, records, state_dir),
            label=f"throughput-{tag}-quixstreams-{rep}",
            timeout_s=timeout_s,
            memory=memory,
        )
        metrics = last_json_line(out)
        metrics["memory"] = memory
        ok = code == 0 and metrics.get("records") == records
        return RunOutcome(
            "quixstreams",
            rep,
            wall,
            ok,
            metrics,
            None if ok else f"exit {code}: {metrics}",
            str(log_path),
        )

    def tws(rep: int) -> RunOutcome:
        checkpoint = tempfile.mkdtemp(prefix="bench-tws-")
        memory: dict[str, Any] = {}
        wall, code, out, log_path = run_command(
            tws_cmd(bootstrap, topic, records, ends, checkpoint + "/cp"),
            label=f"throughput-{tag}-tws-{rep}",
            timeout_s=timeout_s,
            env=tws_env(),
            memory=memory,
        )
        metrics = last_json_line(out)
        metrics["memory"] = memory
        ok = code == 0 and metrics.get("records") == records
        return RunOutcome(
            "transformWithStateInPandas",
            rep,
            wall,
            ok,
            metrics,
            None if ok else f"exit {code}: {metrics}",
            str(log_path),
        )

    def run_topology(name: str) -> Callable[[int], RunOutcome]:
        return lambda rep: processor_api(rep, name)

    all_contenders: dict[str, Callable[[int], RunOutcome]] = {
        EPOCHS: run_topology(EPOCHS),
        "hand_loop": hand_loop,
        "quixstreams": quixstreams,
        "transformWithStateInPandas": tws,
        **{name: run_topology(name) for name in PROCESSOR_API_VARIANTS if name != EPOCHS},
    }
    unknown = sorted((include or set()) - set(all_contenders))
    if unknown:
        raise SystemExit(
            f"unknown contender(s) {', '.join(map(repr, unknown))}; known: "
            f"{', '.join(map(repr, all_contenders))}"
        )
    if not BASELINE_DIR:
        all_contenders.pop(EPOCHS_BEFORE)
        all_contenders.pop(EPOCHS_BEFORE_ONE_CORE)
    if not (QUIX_VENV / "bin" / "python").exists():
        log("  quixstreams venv missing (bench/.venvs/quix): Quix Streams not run")
        all_contenders.pop("quixstreams")
    return {k: v for k, v in all_contenders.items() if include is None or k in include}


def run_size(
    broker: Broker,
    records: int,
    reps: int,
    include: set[str] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Produce ``records`` to a fresh topic and run every contender ``reps`` times on it."""
    from bench.common import produce_input

    tag = f"{records // 1000}k" if records < 1_000_000 else f"{records // 1_000_000}M"
    topic = f"bench-count-{tag}"
    broker.create_topic(topic, PARTITIONS, TOPIC_CONFIG)
    log(f"throughput {tag}: producing {records} records to {topic}")
    produced = produce_input(broker.bootstrap, topic, records, KEYS)
    ends = topic_end_offsets(broker.bootstrap, topic, PARTITIONS)
    assert sum(ends.values()) == records, ends
    timeout = timeout_s or max(600.0, records / 2_000)
    runs = alternate(contenders(broker, topic, records, ends, tag, timeout, include), reps)
    summary = summarize(runs, records)
    pa = summary.get(EPOCHS, {}).get("records_per_s_median")
    ratios = {
        f"{EPOCHS} / {name}": ratio(pa, s.get("records_per_s_median"))
        for name, s in summary.items()
        if name != EPOCHS
    }
    return {
        "records": records,
        "keys": KEYS,
        "partitions": PARTITIONS,
        "topic": topic,
        "produce": produced,
        "end_offsets": ends,
        "reps": reps,
        "master": MASTER,
        "tws_records_per_batch": TWS_RECORDS_PER_BATCH,
        "commands": {name: command_text(name, topic, records, ends) for name in summary},
        "runs": outcome_dicts(runs),
        "summary": summary,
        "throughput_ratios": {
            k: v for k, v in ratios.items() if v is not None and not math.isnan(v)
        },
    }


def command_text(name: str, topic: str, records: int, ends: dict[int, int]) -> str:
    """The command of contender ``name`` as recorded (BOOTSTRAP etc. for the run's values)."""
    if name == "hand_loop":
        return " ".join(hand_loop_cmd("BOOTSTRAP", topic, records, "STATE_DIR"))
    if name == "quixstreams":
        return " ".join(quix_cmd("BOOTSTRAP", topic, records, "STATE_DIR"))
    if name == "transformWithStateInPandas":
        return " ".join(tws_cmd("BOOTSTRAP", topic, records, ends, "CHECKPOINT"))
    if name not in PROCESSOR_API_VARIANTS:
        return "?"
    extra, extra_env = PROCESSOR_API_VARIANTS[name]
    extra = (*RUN_EXTRA, *extra)
    if name in (EPOCHS_BEFORE, EPOCHS_BEFORE_ONE_CORE):
        return "PYTHONPATH=BASELINE_DIR (cwd BASELINE_DIR) " + " ".join(
            before_cmd("BOOTSTRAP", topic, "STATE_DIR", "APP", extra)
        )
    env = " ".join(f"{k}={v!r}" for k, v in (extra_env or {}).items())
    cmd = " ".join(processor_api_cmd("BOOTSTRAP", topic, "STATE_DIR", "APP", extra))
    return f"{env} {cmd}" if env else cmd


def profile_processor_api(broker: Broker, topic: str, records: int, tag: str) -> dict[str, Any]:
    state_dir = tempfile.mkdtemp(prefix="bench-pa-prof-")
    app_id = f"bench-cpk-prof-{tag}-{uuid.uuid4().hex[:6]}"
    cmd = processor_api_cmd(broker.bootstrap, topic, state_dir, app_id)
    return profiles.run_profiled(
        cmd, f"profile-throughput-{tag}-processor_api_epochs", timeout_s=max(900.0, records / 1000)
    )
