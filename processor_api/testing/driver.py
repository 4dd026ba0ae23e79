"""The topology test driver: :class:`TopologyTestDriver` runs a topology with no broker and no Spark.

The driver runs a topology with the same task engine the Spark runtime uses, one task per
sub-topology on partition 0, with a mocked wall clock::

    with TopologyTestDriver(build_topology()) as driver:
        sales = driver.create_input_topic("sales-events-v1")
        notifications = driver.create_output_topic("notifications-events-v1")
        sales.pipe_input("product1", {"product": "product1", "value": 2500})
        assert notifications.read_key_value() == ("product1", {...})

Like Kafka Streams' driver it processes each piped record to completion (including records
that cross sub-topologies through repartition topics), checks stream-time punctuation after
each record, commits (flushes the stores' caches) after each record, and fires wall-clock
punctuation only when :meth:`TopologyTestDriver.advance_wall_clock_time` is called. The commit
does not write RocksDB's memtables to disk (:mod:`processor_api.testing.stores`). Every input
counts as caught up (nothing more on a broker), so with ``max.task.idle.ms`` > 0 a task with
several inputs holds a record back while another input is empty, until that input gets a
record or the mocked wall clock passes the idle deadline. What a logged store writes
goes to its changelog topic ``<application id>-<store>-changelog``, readable like any output
topic (one record per write; with caching, one per key and commit, i.e. per input record).

Global stores are filled from the records piped into (or produced to) their topics, before the
driver returns; every task's processors read them, and ``get_state_store`` and the typed
getters find them by name.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.global_task import GlobalTask
from processor_api.engine.records import InputRecord, ListCollector, OutputRecord
from processor_api.engine.task import Task
from processor_api.errors import StoreError, StreamsError
from processor_api.kafka.names import changelog_topic
from processor_api.serdes import Serde, Serdes
from processor_api.state.key_value import KeyValueStore
from processor_api.state.session import SessionStore
from processor_api.state.timestamped import TimestampedKeyValueStore
from processor_api.state.versioned import VersionedKeyValueStore
from processor_api.state.window import WindowStore
from processor_api.testing.stores import driver_store_factory
from processor_api.testing.topics import NoSuchElementError, TestInputTopic, TestOutputTopic, to_ms
from processor_api.topology import Topology

__all__ = [
    "NoSuchElementError",
    "TestInputTopic",
    "TestOutputTopic",
    "TopologyTestDriver",
]


class TopologyTestDriver:
    """Runs a :class:`Topology` in-process, record by record, for unit tests.

    Every task is created and its processors' ``init()`` run when the driver is constructed.
    Persistent stores are real RocksDB stores in a temporary state directory, removed by
    :meth:`close`; the commit after each record leaves their writes in RocksDB's memtables
    instead of writing an SST file each time (``approximate_num_entries()`` flushes them
    first, so that writes to the same key count once).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        topology: Topology,
        config: dict[str, Any] | None = None,
        initial_wall_clock_ms: int = 0,
    ) -> None:
        settings = {"application_id": "topology-test-driver"}
        settings.update(config or {})
        self.config = StreamsConfig.from_dict(settings)
        self._topology = topology
        self._wall_clock_ms = to_ms(initial_wall_clock_ms)
        self._state_dir = Path(tempfile.mkdtemp(prefix="processor-api-driver-"))
        self._collector = ListCollector(partitions=1)
        self._next_offset: dict[str, int] = {}
        self._output: dict[str, deque[OutputRecord]] = {}
        self._tasks: list[Task] = []
        self._task_by_topic: dict[str, Task] = {}
        self._global: GlobalTask | None = None
        self._global_topics: frozenset[str] = frozenset()
        self._changelog_topics: dict[str, str] = {}
        self._closed = False
        try:
            if topology.global_stores():
                global_dir = self._state_dir / self.config.application_id / "global"
                self._global = GlobalTask(
                    global_stores=topology.global_stores(),
                    store_factory=driver_store_factory(global_dir),
                    config=self.config,
                    clock=self._clock,
                )
                self._global.initialize()
                self._global_topics = frozenset(self._global.topics)
            for sub in topology.subtopologies():
                task_dir = self._state_dir / self.config.application_id / sub.task_id(0)
                task = Task(
                    subtopology=sub,
                    partition=0,
                    store_builders=topology.store_builders,
                    store_factory=driver_store_factory(task_dir),
                    collector=self._collector,
                    config=self.config,
                    clock=self._clock,
                    global_task=self._global,
                )
                self._tasks.append(task)
                for topic in sub.source_topics:
                    self._task_by_topic[topic] = task
            for task in self._tasks:
                task.initialize()
            self._complete_work()
        except BaseException:
            self.close()
            raise

    def _clock(self) -> int:
        return self._wall_clock_ms

    # ---------------------------------------------------------------- topics
    def create_input_topic(
        self,
        topic: str,
        key_serde: Serde | None = None,
        value_serde: Serde | None = None,
        *,
        start_timestamp: int | None = None,
        auto_advance: int | timedelta = 0,
    ) -> TestInputTopic:
        """An input topic; serdes default to those of the source reading ``topic``."""
        source = self._topology.source_node_for_topic(topic)
        if source is None:
            raise StreamsError(
                f"unknown input topic {topic!r}: no source of the topology reads it "
                f"(source topics: {sorted(self._topology.source_topics())})"
            )
        return TestInputTopic(
            self,
            topic,
            key_serde or source.key_serde,
            value_serde or source.value_serde,
            self._wall_clock_ms if start_timestamp is None else start_timestamp,
            to_ms(auto_advance),
        )

    def create_output_topic(
        self, topic: str, key_serde: Serde | None = None, value_serde: Serde | None = None
    ) -> TestOutputTopic:
        """An output topic; serdes default to those of the sink writing ``topic`` (else bytes)."""
        sink = self._topology.sink_for_topic(topic)
        default_key = sink.key_serde if sink else Serdes.bytes()
        default_value = sink.value_serde if sink else Serdes.bytes()
        return TestOutputTopic(self, topic, key_serde or default_key, value_serde or default_value)

    # ------------------------------------------------------------ processing
    def _pipe(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: tuple[tuple[str, bytes | None], ...],
    ) -> None:
        self._check_open()
        if topic in self._global_topics:
            self._feed_global(topic, key, value, timestamp, headers)
        else:
            task = self._task_by_topic.get(topic)
            if task is None:
                raise StreamsError(
                    f"unknown input topic {topic!r}: no source of the topology reads it"
                )
            self._feed(task, topic, key, value, timestamp, headers)
        self._complete_work()

    def _feed_global(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: tuple[tuple[str, bytes | None], ...],
    ) -> None:
        """One record of a global store's topic: the global processor updates its store."""
        assert self._global is not None
        offset = self._next_offset.get(topic, 0)
        self._next_offset[topic] = offset + 1
        self._global.process(InputRecord(topic, 0, offset, timestamp, key, value, headers))
        self._global.flush()
        for record in self._global.take_dead_letters():
            self._collector.send(record)

    def _feed(
        self,
        task: Task,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: tuple[tuple[str, bytes | None], ...],
    ) -> None:
        offset = self._next_offset.get(topic, 0)
        self._next_offset[topic] = offset + 1
        task.process_batch([InputRecord(topic, 0, offset, timestamp, key, value, headers)])

    def _complete_work(self) -> None:
        """Route produced records (feeding repartition topics back in), then commit."""
        collector, output = self._collector, self._output
        while collector.records:
            for record in collector.drain():
                topic = record.topic
                queue = output.get(topic)
                if queue is None:
                    queue = output[topic] = deque()
                queue.append(record)
                if topic in self._global_topics:
                    self._feed_global(
                        topic, record.key, record.value, record.timestamp, record.headers
                    )
                downstream = self._task_by_topic.get(topic)
                if downstream is not None:
                    self._feed(
                        downstream,
                        topic,
                        record.key,
                        record.value,
                        record.timestamp,
                        record.headers,
                    )
        for task in self._tasks:
            for store_name, changes in task.flush().items():
                # the store's changelog, readable like any output topic (as in Kafka Streams)
                topic = self._changelog_topic(store_name)
                queue = output.get(topic)
                if queue is None:
                    queue = output[topic] = deque()
                queue.extend(OutputRecord(topic, c.key, c.value, c.timestamp) for c in changes)
        # flushing caches may not forward anything in this runtime, but keep the loop honest
        if collector.records:
            self._complete_work()

    def _changelog_topic(self, store_name: str) -> str:
        topic = self._changelog_topics.get(store_name)
        if topic is None:
            topic = changelog_topic(self.config.application_id, store_name)
            self._changelog_topics[store_name] = topic
        return topic

    def advance_wall_clock_time(self, advance: int | timedelta) -> None:
        """Move the mocked system time forward, fire due WALL_CLOCK_TIME punctuations, and
        process records a task held back while ``max.task.idle.ms`` had not run out, and move
        stream time of idle tasks under ``stream.time.idle.advance.ms``."""
        self._check_open()
        ms = to_ms(advance)
        if ms < 0:
            raise ValueError(f"wall clock cannot go back (advance {advance!r})")
        self._wall_clock_ms += ms
        for task in self._tasks:
            task.maybe_punctuate_wall_clock(self._wall_clock_ms)
            if task.buffered():  # waiting for another input: max.task.idle.ms may be over
                task.process_batch([])
            task.advance_idle_stream_time(self._wall_clock_ms)
        self._complete_work()

    @property
    def wall_clock_ms(self) -> int:
        return self._wall_clock_ms

    # ------------------------------------------------------------- inspection
    def get_state_store(self, name: str) -> Any:
        """The store ``name`` of any kind: a task's store, or a global store."""
        return self._store(name, object, "a state store")

    def get_key_value_store(self, name: str) -> KeyValueStore:
        """The key-value store ``name`` (of whichever task owns it); ``StoreError`` if it is
        another kind (a timestamped key-value store is one)."""
        return self._store(name, KeyValueStore, "a key-value store")

    def get_timestamped_key_value_store(self, name: str) -> TimestampedKeyValueStore:
        """The timestamped key-value store ``name``; ``StoreError`` if it is another kind."""
        return self._store(name, TimestampedKeyValueStore, "a timestamped key-value store")

    def get_window_store(self, name: str) -> WindowStore:
        """The window store ``name``; ``StoreError`` if it is another kind."""
        return self._store(name, WindowStore, "a window store")

    def get_session_store(self, name: str) -> SessionStore:
        """The session store ``name``; ``StoreError`` if it is another kind."""
        return self._store(name, SessionStore, "a session store")

    def get_versioned_key_value_store(self, name: str) -> VersionedKeyValueStore:
        """The versioned key-value store ``name``; ``StoreError`` if it is another kind."""
        return self._store(name, VersionedKeyValueStore, "a versioned key-value store")

    def _store(self, name: str, kind: type, described: str) -> Any:
        stacks = [task.stores for task in self._tasks]
        if self._global is not None:
            stacks.append(self._global.stores)
        for stores in stacks:
            if name in stores:
                store = stores[name].store
                if not isinstance(store, kind):
                    raise StoreError(
                        f"state store {name!r} is not {described}: it is a {type(store).__name__}"
                    )
                return store
        known = sorted(name for stores in stacks for name in stores)
        raise StoreError(f"no state store named {name!r} in the topology (stores: {known})")

    def produced_topics(self) -> list[str]:
        """Topics that received at least one record."""
        return sorted(self._output)

    def _take(self, topic: str) -> OutputRecord:
        queue = self._output.get(topic)
        if not queue:
            raise NoSuchElementError(f"empty topic: {topic}")
        return queue.popleft()

    def _queue_size(self, topic: str) -> int:
        return len(self._output.get(topic, ()))

    # --------------------------------------------------------------- closing
    def _check_open(self) -> None:
        if self._closed:
            raise StreamsError("the TopologyTestDriver is closed")

    def close(self) -> None:
        """Close processors and stores and delete the temporary state directory."""
        if self._closed:
            return
        self._closed = True
        try:
            for task in self._tasks:
                task.close()
            if self._global is not None:
                self._global.close()
        finally:
            shutil.rmtree(self._state_dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
