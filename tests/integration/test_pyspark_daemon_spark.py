"""The run's pyspark workers are forked from ``processor_api.spark.pyspark_daemon``, which has
imported pyarrow (and pandas and the epoch function) before it forks them, and a run on them
still counts every record exactly once.

``run-topology`` runs in a subprocess (the session is built by ``spark/session.py``, as for a
user); while it runs, the daemon is found among the CLI's descendants: the pyspark workers are
its children, forked (the same command line), and pyarrow's library is mapped in the daemon
itself, so the workers got it from the fork and share its pages.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from processor_api.serdes import Serdes
from processor_api.spark.session import DAEMON_MODULE
from processor_api.state.inspect import read_local_store
from tests.harness.processes import CliRun, cli_args, descendants
from tests.harness.topics import create_topics_now, produce, uid

pytestmark = pytest.mark.integration

RECORDS = 3_000
KEYS = 30


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().decode(errors="replace").split("\0")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read().decode(errors="replace")
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def test_workers_are_forked_from_the_preloading_daemon_and_count_exactly(kafka, tmp_path: Path):
    topic = f"daemon-in-{uid()}"
    app_id = f"daemon-{uid()}"
    create_topics_now(kafka.bootstrap_servers, {topic: 3})
    produce(
        kafka.bootstrap_servers,
        topic,
        [(f"key-{i % KEYS}".encode(), b"v", i % 3) for i in range(RECORDS)],
    )
    args = cli_args(
        "topologies.count_per_key:build_topology",
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        tmp_path / "checkpoint",
        available_now=False,
        topology_args={"input_topic": topic},
        extra=["--epoch-interval", "5"],
    )
    with CliRun(args, tmp_path / "run.log") as run:
        run.wait_processed(RECORDS, timeout_s=240)
        tree = descendants(run.pid)
        forked = [pid for pid in tree if DAEMON_MODULE in _cmdline(pid)]
        daemons = [pid for pid in forked if _parent(pid) not in forked]
        assert len(daemons) == 1, f"daemons among {[_cmdline(p) for p in tree]}"
        daemon = daemons[0]
        workers = [pid for pid in tree if _parent(pid) == daemon]
        assert workers, "the daemon has forked no worker"
        assert all(_cmdline(pid) == _cmdline(daemon) for pid in workers)
        assert "libarrow.so" in _maps(daemon)
        run.signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.tail()
    counts = read_local_store(
        str(tmp_path / "state"), app_id, "counts", Serdes.string(), Serdes.long()
    )
    assert counts == {f"key-{k}": RECORDS // KEYS for k in range(KEYS)}
