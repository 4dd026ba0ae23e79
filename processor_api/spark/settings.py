"""What a run is told (``RunSettings``, the ``run-topology`` flags) and what it did (``RunResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The values of ``RunSettings.early_start``.
EARLY_START_MODES = ("process", "open", "off")

#: How long stopping a query waits for the Spark batch (epoch) in flight to end.
STOP_GRACE_S = 60.0


@dataclass
class RunSettings:
    """How to run a topology (the ``run-topology`` flags)."""

    bootstrap_servers: str
    application_id: str = "processor-api-app"
    state_dir: str = "./state"
    checkpoint_dir: str | None = None
    master: str = "local[*]"
    processing_guarantee: str = "at_least_once"
    #: Process what the input topics hold at the start, then end (``--available-now``).
    available_now: bool = False
    #: Length of a continuous epoch (``--epoch-interval``); why 60 s: the manual's "Epochs"
    #: page (``docs/running/epochs.md``).
    epoch_interval_s: float = 60.0
    config: dict[str, Any] = field(default_factory=dict)
    log_format: str = "console"
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: Kafka client settings for every client of the run (``--kafka-config``); keys prefixed
    #: ``consumer.``, ``producer.`` or ``admin.`` apply to that role only (see
    #: :class:`~processor_api.kafka.client_config.KafkaClientConfig`).
    kafka_config: dict[str, Any] = field(default_factory=dict)
    #: Serve ``/metrics`` and the health probes on this port (``--metrics-port``; 0: a free
    #: one, logged and kept in ``TopologyRunner.metrics_port``); None: no metrics.
    metrics_port: int | None = None
    #: Each executor keeps its tasks under ``<state_dir>/executor-<id>/`` (separate disks on
    #: one machine: ``runtime/executor_dirs.py``); the driver's files stay in ``state_dir``.
    state_dir_per_executor: bool = False
    #: Serve interactive queries of the stores on this port (``--query-port``; 0: a free one,
    #: logged and kept in ``TopologyRunner.query_port``); None: no queries.
    query_port: int | None = None
    #: The address the query endpoint binds (``--query-host``): loopback unless told.
    query_host: str = "127.0.0.1"
    #: The bearer token every query must carry (``--query-token-file``); None: none.
    query_token: str | None = None
    #: Local masters: the driver starts the worker hosts while Spark starts (``--early-start``,
    #: ``spark/early_start.py``): ``process`` (a new checkpoint's tasks process until the first
    #: epoch), ``open`` (the tasks are opened and restored only) or ``off``.
    early_start: str = "process"

    @property
    def resolved_checkpoint_dir(self) -> str:
        if self.checkpoint_dir:
            return self.checkpoint_dir
        return str(Path(self.state_dir) / self.application_id / "_spark_checkpoint")

    @property
    def logs_dir(self) -> Path:
        """Where failure reports go: ``STATE_DIR/APP_ID/logs``."""
        return Path(self.state_dir) / self.application_id / "logs"


@dataclass
class RunResult:
    """What a finished run did."""

    batches: int = 0
    records: int = 0
    outputs: int = 0
    changelog_records: int = 0
    restored: int = 0
    duration_s: float = 0.0
