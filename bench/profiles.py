"""py-spy profiles: record a command (with its subprocesses) and summarize the hot spots.

``py-spy record --subprocesses --format raw`` writes collapsed stacks
(``frame;frame;... count``) where the outer frames name the process tree; the innermost
``process PID:"cmd"`` frame is the sampled process. :func:`summarize` groups samples by process
kind and lists the functions with the most self (leaf) and total (inclusive) samples.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RAW_DIR, log

_PROCESS = re.compile(r'^process \d+:"(.*)"$', re.S)


def py_spy() -> str | None:
    candidate = Path(sys.executable).parent / "py-spy"
    if candidate.exists():
        return str(candidate)
    return shutil.which("py-spy")


def profile_command(
    cmd: Sequence[str], name: str, rate: int = 100, idle: bool = False
) -> list[str]:
    """The command wrapped in ``py-spy record`` (raw collapsed stacks to RAW_DIR/name.txt)."""
    spy = py_spy()
    if spy is None:
        raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    out = RAW_DIR / f"{name}.txt"
    return [
        spy,
        "record",
        "--subprocesses",
        *(["--idle"] if idle else []),
        "--rate",
        str(rate),
        "--format",
        "raw",
        "-o",
        str(out),
        "--",
        *cmd,
    ]


def flamegraph(name: str) -> Path | None:
    """Render RAW_DIR/name.txt as an SVG next to it, when flamegraph tooling exists (optional)."""
    return None


def process_kind(cmd: str) -> str:
    if "worker_host" in cmd:
        return "worker host"
    if "task_host" in cmd:
        return "task host"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
        return "spark python worker (pyspark.daemon)"
    if "python_streaming_source_runner" in cmd:
        return "spark data source planner"
    if "pyspark.worker" in cmd:
        return "spark python worker"
    if "run-topology" in cmd or "bench.tws_count" in cmd:
        return "driver"
    if "quix" in cmd:
        return "quix"
    return cmd.split(" ")[0][-60:]


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"; keep processor_api paths readable
    match = re.match(r"^(.*) \((.*?):(\d+)\)$", frame)
    if not match:
        return frame
    func, path, _ = match.groups()
    for anchor in ("processor_api/", "pyspark/", "topologies/", "bench/", "site-packages/"):
        if anchor in path:
            path = path[path.index(anchor) + (len(anchor) if anchor == "site-packages/" else 0) :]
            break
    else:
        path = Path(path).name
    return f"{func} ({path})"


def summarize(path: Path, top: int = 15) -> dict[str, Any]:
    """Samples per process kind, with the top self and inclusive functions of each."""
    per_kind_total: Counter[str] = Counter()
    self_counts: dict[str, Counter[str]] = defaultdict(Counter)
    incl_counts: dict[str, Counter[str]] = defaultdict(Counter)
    if not path.exists():
        return {"error": f"no profile at {path}"}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = stack.split(";")
        kind = "?"
        first_code = 0
        for index, frame in enumerate(frames):
            match = _PROCESS.match(frame)
            if match:
                kind = process_kind(match.group(1))
                first_code = index + 1
        code = [_short(f) for f in frames[first_code:] if not f.startswith("thread ")]
        if not code:
            continue
        per_kind_total[kind] += count
        self_counts[kind][code[-1]] += count
        for frame in set(code):
            incl_counts[kind][frame] += count
    total = sum(per_kind_total.values())
    kinds = {}
    for kind, samples in per_kind_total.most_common():
        kinds[kind] = {
            "samples": samples,
            "share": round(samples / total, 3) if total else None,
            "top_self": [
                {"function": f, "samples": n, "share_of_process": round(n / samples, 3)}
                for f, n in self_counts[kind].most_common(top)
            ],
            "top_inclusive": [
                {"function": f, "samples": n, "share_of_process": round(n / samples, 3)}
                for f, n in incl_counts[kind].most_common(top + 60)
            ],
        }
    return {"file": str(path), "samples": total, "processes": kinds}


def run_profiled(
    cmd: Sequence[str],
    name: str,
    timeout_s: float,
    rate: int = 100,
    idle: bool = False,
    env: dict[str, str] | None = None,
) -> dict:
    """Run ``cmd`` under py-spy and return the summary (not timed: py-spy slows it down).

    ``idle``: also sample threads that wait (where a process spends wall time, not CPU)."""
    import os

    wrapped = profile_command(cmd, name, rate, idle)
    log(f"  profiling {name} with py-spy")
    with open(RAW_DIR / f"{name}.log", "w") as err:
        proc = subprocess.run(
            wrapped,
            stdout=err,
            stderr=err,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
        )
    summary = summarize(RAW_DIR / f"{name}.txt")
    summary["exit_code"] = proc.returncode
    summary["command"] = " ".join(cmd)
    return summary
