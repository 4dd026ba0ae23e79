"""Where the start-up of ``run-topology --available-now`` goes (issue 11), under py-spy.

``python -m bench.startup_profile [RECORDS] [--idle]`` starts the embedded broker, produces
RECORDS (default 200,000: start-up dominates) for count per key and records the run's whole
process tree with ``py-spy record --subprocesses`` (``--idle``: waiting threads too, so the
driver's samples say which Spark call its wall time went to). Writes
``bench/results/raw/profile-startup-<RECORDS>[-idle].txt`` and prints the summary (per process
kind: samples, top self and inclusive functions) as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid

from bench import profiles
from bench.common import Broker, produce_input
from bench.throughput import KEYS, PARTITIONS, TOPIC_CONFIG, processor_api_cmd


def main(argv: list[str]) -> None:
    idle = "--idle" in argv
    args = [a for a in argv if not a.startswith("--")]
    records = int(args[0]) if args else 200_000
    from processor_api.logging import configure_logging

    configure_logging("console", level="WARNING")
    broker = Broker.start()
    try:
        topic = f"bench-startup-{records}"
        broker.create_topic(topic, PARTITIONS, TOPIC_CONFIG)
        produce_input(broker.bootstrap, topic, records, KEYS)
        state_dir = tempfile.mkdtemp(prefix="bench-startup-")
        cmd = processor_api_cmd(broker.bootstrap, topic, state_dir, f"st-{uuid.uuid4().hex[:6]}")
        name = f"profile-startup-{records}" + ("-idle" if idle else "")
        summary = profiles.run_profiled(cmd, name, timeout_s=900, idle=idle)
    finally:
        broker.stop()
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
