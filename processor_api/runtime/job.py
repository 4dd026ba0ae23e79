"""What the driver hands every executor for a run: the job spec, pickled into Spark's function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.runtime.worker_layout import LayoutLocation
from processor_api.topology import Topology


@dataclass(frozen=True)
class JobSpec:
    """Everything an executor needs to run tasks of one run (stable across its passes)."""

    run_id: str
    topology_ref: str | None
    topology_kwargs: dict[str, Any]
    topology_pickle: bytes | None
    bootstrap_servers: str
    state_dir: str
    config: dict[str, Any]
    log_format: str = "console"
    producer_config: dict[str, Any] = field(default_factory=dict)
    flush_timeout_s: float = 60.0
    bounded: bool = False  # the run stops at fixed end offsets (no waiting for data past them)
    task_ids: tuple[str, ...] = ()  # every task of the run, in order (commit marker partitions)
    #: Per worker id, the tasks it runs (``spark/assignment.py``).
    assignment: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kafka: KafkaClientConfig = field(default_factory=KafkaClientConfig)  # user client settings
    #: Epochs: where a task without a committed position starts, per input partition (the
    #: consumer group's offsets when the run started); then ``reset_policies`` per topic.
    start_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    reset_policies: dict[str, str] = field(default_factory=dict)
    #: How often each worker host sends its metrics to the run's metrics topic (seconds);
    #: None: no metrics (``run-topology`` without ``--metrics-port``).
    metrics_interval_s: float | None = None
    #: Each executor keeps its tasks under ``<state_dir>/executor-<id>/``
    #: (``runtime/executor_dirs.py``).
    state_dir_per_executor: bool = False
    #: Interactive queries (``--query-port``): the driver's query router as ``host:port``,
    #: which every worker host dials (``runtime/query_link.py``), and the run's secret it
    #: checks; None: no queries.
    query_router: str | None = None
    query_secret: str | None = None
    #: The driver's process id when it started the worker hosts itself, before its query
    #: (a local run, ``spark/early_start.py``): the epoch calls look for those hosts first.
    early_start_pid: int | None = None
    #: Where the run's layout is (``runtime/worker_layout.py``): the tasks each worker holds
    #: now, once the driver moved tasks while the run goes on; None: the assignment is fixed.
    layout: LayoutLocation | None = None

    @property
    def executor_state_dir(self) -> str:
        """The state directory of the executor this runs on."""
        from processor_api.runtime.executor_dirs import executor_state_dir

        return executor_state_dir(self.state_dir, self.state_dir_per_executor)

    def load_topology(self) -> Topology:
        """The run's topology: imported by reference, or unpickled."""
        if self.topology_ref is not None:
            from processor_api.topology.loader import load_topology

            return load_topology(self.topology_ref, self.topology_kwargs)
        from pyspark import cloudpickle

        assert self.topology_pickle is not None
        return cloudpickle.loads(self.topology_pickle)


def parse_task_id(task_id: str) -> tuple[int, int]:
    """``"<subtopology>_<partition>"`` -> (subtopology, partition)."""
    sub, _, partition = task_id.partition("_")
    return int(sub), int(partition)
