"""Sends a worker host's metrics to the driver, through the run's metrics topic.

Why a topic: the driver cannot reach a host on another machine (hosts listen on local Unix
sockets), but every host and the driver reach the broker. Each host sends one
:class:`~processor_api.runtime.metrics.HostReport` (JSON) every ``interval_s`` from a thread of
its own, so reports keep coming while the main thread restores a store, waits for the broker
or commits; the driver keeps the newest report per task (``spark/metrics_collector.py``).
The producer is a plain one (not the task's transactional producer): reports are not part of
any commit, and losing one only makes the next one count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import KafkaException, Producer

from processor_api.kafka.admin import client_config
from processor_api.kafka.names import metrics_topic
from processor_api.logging import get_logger
from processor_api.runtime.job import JobSpec
from processor_api.runtime.metrics import HostReport, ProcessSnapshot, TaskMetrics

#: How long the last report may take to be delivered when the host stops.
FINAL_FLUSH_S = 2.0


class MetricsPublisher:
    """A thread sending this host's report every ``spec.metrics_interval_s``.

    ``tasks`` returns the metrics of the tasks the host runs now (read without a lock: a
    snapshot copies small dicts and lists, which the GIL keeps whole).
    """

    def __init__(self, spec: JobSpec, tasks: Callable[[], list[TaskMetrics]]) -> None:
        assert spec.metrics_interval_s is not None
        self._run_id = spec.run_id
        self._interval_s = spec.metrics_interval_s
        self._tasks = tasks
        self._topic = metrics_topic(spec.config["application_id"])
        self._producer = Producer(
            client_config(
                spec.bootstrap_servers,
                "metrics-producer",
                role="producer",
                kafka=spec.kafka,
                defaults={"linger.ms": 0, "acks": 1, "message.timeout.ms": 10_000},
            )
        )
        self._stop = threading.Event()
        self._log = get_logger("processor_api.metrics")
        self._thread = threading.Thread(target=self._run, name="metrics-publisher", daemon=True)
        self._thread.start()

    @property
    def run_id(self) -> str:
        return self._run_id

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.publish()

    def publish(self) -> None:
        """Send one report now (errors are logged at debug: the next report makes up)."""
        try:
            report = HostReport(
                ProcessSnapshot.now(), tuple(m.snapshot(self._run_id) for m in self._tasks())
            )
            self._producer.produce(self._topic, report.to_json())
            self._producer.poll(0)
        except (KafkaException, BufferError, RuntimeError) as exc:
            # RuntimeError: a dict changed size while it was copied (the next report has it)
            self._log.debug("metrics_report_not_sent", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Send a last report and stop."""
        self._stop.set()
        self._thread.join(timeout=self._interval_s + 1)
        self.publish()
        self._producer.flush(FINAL_FLUSH_S)
