"""Move the raw logs a result file points to into ``results/raw/<name>/`` and rewrite its paths.

``python -m bench.move_raw throughput-full-task-hosts-2M-2026-11-23`` (a result file's name)
keeps a run's logs apart from the logs of earlier runs of the same sizes
(``raw/throughput-2M-processor_api-0.log`` is the name every run
of that size writes).
"""

from __future__ import annotations

import json
import shutil
import sys

from bench.common import RAW_DIR, RESULTS_DIR


def main(name: str) -> None:
    path = RESULTS_DIR / f"{name}.json"
    data = json.loads(path.read_text())
    target = RAW_DIR / name
    target.mkdir(parents=True, exist_ok=True)
    runs = [r for s in data.get("sizes", {}).values() for r in s.get("runs", [])]
    runs += data.get("runs", [])
    for run in runs:
        for key in ("log_file", "log"):
            source = run.get(key)
            if (
                source
                and source.startswith(str(RAW_DIR))
                and "/" not in source[len(str(RAW_DIR)) + 1 :]
            ):
                moved = target / source.rsplit("/", 1)[1]
                shutil.move(source, moved)
                run[key] = str(moved)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"{len(runs)} runs, logs in {target}")


if __name__ == "__main__":
    main(sys.argv[1])
