#!/usr/bin/env bash
# Count per key in process (bench.punctuation.check_overhead, "0 schedules": µs per record),
# an earlier library tree vs this one, alternating, 3 rounds; each line is the median of 3.
#   bench/engine_ab.sh /tmp/bench-baseline-XXXX   (a tree made by bench/snapshot.sh --baseline)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
baseline="$1"
for round in 1 2 3; do
    if (( round % 2 )); then order="$baseline $repo"; else order="$repo $baseline"; fi
    for lib in $order; do
        (cd "$lib" && PYTHONPATH="$lib" "$repo/.venv/bin/python" -c "
import json, processor_api
from bench.punctuation import check_overhead
result = check_overhead(200_000, 3)
print(json.dumps({'library': processor_api.__file__, 'us_per_record':
                  round(result['per_record_s']['0 schedules']['median'] * 1e6, 2)}))
" 2>/dev/null | tail -1)
    done
done
