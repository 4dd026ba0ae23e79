#!/usr/bin/env bash
# Run the benchmarks against a frozen copy of the library: the committed HEAD (git archive,
# read-only) plus this work tree's bench/ and count-per-key topology, so edits other people
# make to processor_api/ while a long run is going do not change what is measured. Results
# and RESULTS.md are written back into this work tree's bench/.
#   bench/snapshot.sh --full                       (any bench.run arguments)
#   bench/snapshot.sh --baseline bbd3af0 --full    (adds "processor_api epochs before (bbd3af0)":
#                                                   the same command on that commit's library;
#                                                   epochs are its default from bbd3af0 on)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [[ "${1:-}" == "--baseline" ]]; then
    base_rev="$(git -C "$repo" rev-parse --short "$2")"
    shift 2
    base="$(mktemp -d /tmp/bench-baseline-XXXXXX)"
    git -C "$repo" archive "$base_rev" | tar -x -C "$base"
    export BENCH_BASELINE_DIR="$base" BENCH_BASELINE_REV="$base_rev"
fi
snap="$(mktemp -d /tmp/bench-snapshot-XXXXXX)"
sha="$(git -C "$repo" rev-parse --short HEAD)"
git -C "$repo" archive HEAD | tar -x -C "$snap"
rm -rf "$snap/bench"
mkdir -p "$snap/bench"
cp "$repo"/bench/*.py "$repo"/bench/*.sh "$snap/bench/"
cp -r "$repo/bench/reports" "$snap/bench/"  # the report sections bench.run writes at its end
cp "$repo/topologies/count_per_key.py" "$snap/topologies/"
cd "$snap"
export PYTHONPATH="$snap${PYTHONPATH:+:$PYTHONPATH}"
export BENCH_OUTPUT_DIR="$repo/bench"
export BENCH_SOURCE="git archive of HEAD $sha + work-tree bench/ and topologies/count_per_key.py (snapshot $snap)"
exec "${BENCH_PYTHON:-$repo/.venv/bin/python}" -m bench.run "$@"
