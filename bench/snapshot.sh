#!/usr/bin/env bash
# Run the benchmarks against a frozen copy of the library: the committed HEAD (git archive,
# read-only) plus this work tree's bench/ and count-per-key topology, so edits other people
# make to processor_api/ while a long run is going do not change what is measured. Results
# and RESULTS.md are written back into this work tree's bench/.
#   bench/snapshot.sh --full            (any bench.run arguments)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
snap="$(mktemp -d /tmp/bench-snapshot-XXXXXX)"
sha="$(git -C "$repo" rev-parse --short HEAD)"
git -C "$repo" archive HEAD | tar -x -C "$snap"
rm -rf "$snap/bench"
mkdir -p "$snap/bench"
cp "$repo"/bench/*.py "$repo"/bench/*.sh "$snap/bench/"
cp "$repo/topologies/count_per_key.py" "$snap/topologies/"
cd "$snap"
export PYTHONPATH="$snap${PYTHONPATH:+:$PYTHONPATH}"
export BENCH_OUTPUT_DIR="$repo/bench"
export BENCH_SOURCE="git archive of HEAD $sha + work-tree bench/ and topologies/count_per_key.py (snapshot $snap)"
exec "$repo/.venv/bin/python" -m bench.run "$@"
