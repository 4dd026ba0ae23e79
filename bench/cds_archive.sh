#!/usr/bin/env bash
# Make a dynamic AppCDS archive of the classes Spark's driver JVM loads in a run-topology run
# (JDK 13+: -XX:ArchiveClassesAtExit), for the "processor_api AppCDS (diagnostic)" contender:
#   bench/cds_archive.sh [ARCHIVE]      (default /tmp/bench-spark-cds.jsa)
# One available-now run of count per key over an embedded broker with 20k records; the JVM
# writes the archive when it exits.
set -euo pipefail
archive="${1:-/tmp/bench-spark-cds.jsa}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${BENCH_PYTHON:-$repo/.venv/bin/python}"
rm -f "$archive"
state="$(mktemp -d /tmp/bench-cds-XXXXXX)"
cd "$repo"
PROCESSOR_API_DRIVER_JAVA_OPTIONS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ArchiveClassesAtExit=$archive" \
  "$python" - "$state" <<'PY'
import subprocess, sys, uuid
from bench.common import Broker, produce_input
from bench.throughput import KEYS, PARTITIONS, TOPIC_CONFIG, processor_api_cmd
broker = Broker.start()
try:
    broker.create_topic("cds-input", PARTITIONS, TOPIC_CONFIG)
    produce_input(broker.bootstrap, "cds-input", 20_000, KEYS)
    cmd = processor_api_cmd(broker.bootstrap, "cds-input", sys.argv[1], f"cds-{uuid.uuid4().hex[:6]}")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
finally:
    broker.stop()
PY
ls -la "$archive"
