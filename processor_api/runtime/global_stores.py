"""The global stores of a worker host (or of one task run alone), kept current from their
topics (Kafka Streams' ``GlobalStreamThread`` and ``GlobalStateManagerImpl``, run inside the
tasks' poll loop).

A worker host keeps one copy for all its tasks (``worker_globals.py``); a task runner used on
its own keeps one under ``<task dir>/global`` (why, and what it costs: ARCHITECTURE.md). :meth:`GlobalStores.catch_up` reads every partition of every
global topic from the position the copy holds up to its current end (partition EOF: the high
watermark, or the last stable offset under ``read_committed``), all partitions in one
bounded read (``kafka.reader.read_to_end``), hands the records to the global processors
(:class:`~processor_api.engine.global_task.GlobalTask`), flushes the stores and writes the
checkpoint. The first task runner that needs the copy restores it before its task is built (records with
a null key are skipped, as in Kafka Streams' global restore); then the tasks' poll loops catch
it up at most once a second between them (``epoch_runner.GLOBAL_CATCH_UP_S``), so a task sees
global records about a second after they were committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.global_task import GlobalTask
from processor_api.engine.records import OutputRecord
from processor_api.engine.task import wall_clock_ms
from processor_api.kafka.admin import topic_partitions
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.reader import LARGE_FETCH, PartitionReader
from processor_api.logging import get_logger
from processor_api.runtime.input_records import to_input_records
from processor_api.runtime.job import JobSpec
from processor_api.state.global_state import GlobalStateDirectory
from processor_api.topology import Topology

_log = get_logger("processor_api.global_stores")


@dataclass(frozen=True)
class CatchUp:
    """What one :meth:`GlobalStores.catch_up` did."""

    records: int
    partitions_read: int  # partitions that had new records
    duration_s: float
    restoring: bool


#: A catch-up without progress for this long raises (and is retried by the task's patience).
STALL_TIMEOUT_S = 10.0


class GlobalStores:
    """The global stores of ``topology`` in ``directory``, fed from Kafka (see module docs)."""

    def __init__(
        self,
        topology: Topology,
        directory: Path,
        *,
        bootstrap_servers: str,
        isolation_level: str,
        config: StreamsConfig,
        kafka: KafkaClientConfig | None = None,
        role: str = "global",
    ) -> None:
        nodes = topology.global_stores()
        self._bootstrap = bootstrap_servers
        self._isolation = isolation_level
        self._kafka = kafka
        self._role = role
        self.state = GlobalStateDirectory(
            directory,
            {node.store_name: node.builder for node in nodes},
            {node.store_name: node.topic for node in nodes},
        )
        counts = topic_partitions(bootstrap_servers, [node.topic for node in nodes], kafka=kafka)
        self.partitions = [(topic, p) for topic, count in counts.items() for p in range(count)]
        self.task = GlobalTask(
            global_stores=nodes, store_factory=self.state.build, config=config, clock=wall_clock_ms
        )
        self._reader: PartitionReader | None = None
        #: monotonic time of the last :meth:`before_batch` (tasks sharing a copy catch it up
        #: at most once a second between them: ``epoch_runner.GLOBAL_CATCH_UP_S``)
        self.last_catch_up = 0.0
        self._restored = False
        self._current = False  # caught up, and no batch started since
        try:
            self.task.positions.update(self.state.positions())
            self.task.initialize()
        except BaseException:
            self.task.close()
            raise

    @classmethod
    def restored(
        cls,
        topology: Topology,
        directory: Path,
        spec: JobSpec,
        config: StreamsConfig,
        *,
        isolation_level: str,
        role: str,
    ) -> GlobalStores:
        """The global stores of a worker host of run ``spec``, opened and caught up (restored)."""
        stores = cls(
            topology,
            directory,
            bootstrap_servers=spec.bootstrap_servers,
            isolation_level=isolation_level,
            config=config,
            kafka=spec.kafka,
            role=role,
        )
        try:
            stores.catch_up()
        except BaseException:
            stores.close()
            raise
        stores._current = True
        return stores

    def before_batch(self, send: Callable[[OutputRecord], None]) -> None:
        """Catch up (unless just restored) and hand the deserialization handler's dead-letter
        records to ``send``, to be produced with the batch."""
        if not self._current:
            self.catch_up()
        self._current = False
        for record in self.task.take_dead_letters():
            send(record)

    def catch_up(self) -> CatchUp:
        """Read every global partition up to its current end; returns what it did."""
        restoring = not self._restored
        started = time.monotonic()
        if self._reader is None:
            self._reader = PartitionReader(
                self._bootstrap,
                self._role,
                isolation_level=self._isolation,
                fail_on_data_loss=False,  # a compacted topic may start past the position
                # an idle partition answers fast: its EOF is the end
                fetch={**LARGE_FETCH, "fetch.wait.max.ms": 10},
                kafka=self._kafka,
                # short: a task's wait for an unreachable broker retries it (task.timeout.ms)
                stall_timeout_s=STALL_TIMEOUT_S,
            )
        task, positions = self.task, self.task.positions
        starts = {key: positions.get(key, 0) for key in self.partitions}
        count = 0
        read: set[tuple[str, int]] = set()
        for batch in self._reader.read_to_end(starts):
            if batch.messages:
                self.state.begin_update()
                read.add((batch.topic, batch.partition))
                for raw in to_input_records(batch.topic, batch.partition, batch.messages):
                    task.process(raw, restoring=restoring)
                count += len(batch.messages)
            if batch.end is not None:  # past markers and compacted offsets too
                task.set_position(batch.topic, batch.partition, batch.end)
        if read:
            task.flush()
        if read or restoring or any(positions.get(k, 0) != o for k, o in starts.items()):
            self.state.checkpoint({key: positions.get(key, 0) for key in self.partitions})
        self._restored = True
        done = CatchUp(count, len(read), time.monotonic() - started, restoring)
        if read or restoring:
            _log.info(
                "global_restore_done" if restoring else "global_catch_up",
                records=count,
                partitions_read=len(read),
                duration_ms=round(done.duration_s * 1000, 1),
            )
        return done

    def store(self, name: str) -> Any:
        """The global store ``name`` (the writable store; tasks get read-only views)."""
        return self.task.stores[name].store

    def close(self) -> None:
        """Close the global processors and stores, and the consumer."""
        try:
            self.task.close()
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
