"""Runs a topology on Spark Structured Streaming (driver side).

One streaming query per run, in epochs (``epochs.py``)::

    Spark's rate-micro-batch source: one row per task per epoch (no offsets cross Spark)
        -> groupBy(task).applyInPandasWithState(run_epoch, NoTimeout): each task's call hands
           the epoch to its host, which runs Kafka Streams' poll loop until the epoch ends
        -> foreachBatch: per-epoch statistics (logged), positions for --available-now

``GroupState`` holds each task's committed metadata (input positions, stream time,
punctuation schedules, changelog offsets), which the task's host hands back at each epoch's
end; the tasks' input offsets are committed to the consumer group with every commit.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.setup_check import check_setup
from processor_api.errors import ConfigError, StreamsError
from processor_api.kafka.admin import TopicSpec, check_broker, ensure_topics
from processor_api.kafka.backlog import PartitionBacklog, group_backlog, wait_until_readable
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic, metrics_topic
from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.topics import TopicPlan, create_topics, plan_topics
from processor_api.logging import get_logger
from processor_api.runtime.executor_dirs import state_dirs_here
from processor_api.runtime.host_client import close_hosts
from processor_api.runtime.job import JobSpec, parse_task_id
from processor_api.runtime.protocol import EpochEnd
from processor_api.runtime.worker_layout import LayoutLocation
from processor_api.spark.epoch_function import OUTPUT_SCHEMA, STATE_SCHEMA
from processor_api.spark.failures import query_failed
from processor_api.spark.progress import Progress, log_batch_timings, observed
from processor_api.spark.resume import check_checkpoint_mode
from processor_api.spark.session import build_spark_session
from processor_api.spark.settings import (
    EARLY_START_MODES,
    STOP_GRACE_S,
    RunResult,
    RunSettings,
)
from processor_api.topology import Topology

_log = get_logger("processor_api.runner")

MAX_AVAILABLE_NOW_PASSES = 20
#: How long an available-now run waits for repartition records past an open transaction: a
#: broker aborts a transaction whose producer is gone after the transaction timeout (60 s).
OPEN_TRANSACTION_WAIT_S = 90.0

__all__ = ["RunResult", "RunSettings", "TopologyRunner", "build_spark_session", "run_topology"]


class TopologyRunner:
    """Runs one topology as one Spark streaming query.

    ``topology`` is a :class:`Topology` or a ``"module:function"`` reference (preferred:
    executors import it instead of unpickling user classes).
    """

    def __init__(
        self,
        topology: Topology | str,
        settings: RunSettings,
        *,
        topology_kwargs: dict[str, Any] | None = None,
        spark: Any = None,
    ) -> None:
        self.settings = settings
        self.config = StreamsConfig.from_dict(
            {
                **settings.config,
                "application_id": settings.application_id,
                "processing_guarantee": settings.processing_guarantee,
            }
        )
        if settings.early_start not in EARLY_START_MODES:
            raise ConfigError(
                f"early_start must be one of {', '.join(EARLY_START_MODES)}, "
                f"got {settings.early_start!r}"
            )
        if settings.epoch_interval_s <= 0:
            raise ConfigError(f"--epoch-interval must be > 0 s, got {settings.epoch_interval_s}")
        self._topology_kwargs = dict(topology_kwargs or {})
        if isinstance(topology, str):
            from processor_api.topology.loader import load_topology

            self._topology_ref: str | None = topology
            self.topology = load_topology(topology, self._topology_kwargs)
        else:
            self._topology_ref = None
            self.topology = topology
        self._spark = spark
        self._own_spark = spark is None
        self._query: Any = None
        self.kafka = KafkaClientConfig.from_dict(settings.kafka_config)
        self._progress = Progress(
            partial(end_offsets, settings.bootstrap_servers, kafka=self.kafka, timeout_s=5.0)
        )
        self._run_id = uuid.uuid4().hex  # one per run: worker hosts keep their tasks across passes
        self._stop_requested = threading.Event()
        self._warned_slots = False
        #: Epochs of a fixed length, with seconds between triggers in which a stop is safe
        #: (not available-now, not bounded: their next batch starts at once).
        self._timed_epochs = False
        #: This driver's pid once it started the worker hosts itself (``early_start.py``):
        #: every job spec of the run names it, so the epoch calls find those hosts.
        self._early_start_pid: int | None = None
        self._closed = False
        self._executor_watch: Any = None  # an ExecutorWatch on a cluster with timed epochs
        self._failover: Any = None  # a failover.Failover on a cluster with timed epochs
        self.plan: TopicPlan | None = None
        self._metrics: RunMetrics | None = None
        self._queries: Any = None  # query.service.RunQueries, once the job spec names it

    # --------------------------------------------------------------- prepare
    def prepare(self) -> TopicPlan:
        """Check the topology's setup on the driver (every processor's ``init()``, see
        ``engine/setup_check.py``) and the Spark checkpoint, then the broker; plan and create
        topics. Errors are clear and fast, and come before anything changes."""
        check_setup(self.topology, self.config)
        check_checkpoint_mode(self.settings.resolved_checkpoint_dir, self.config)
        kafka = self.kafka
        check_broker(self.settings.bootstrap_servers, kafka=kafka)
        plan = plan_topics(
            self.topology, self.settings.bootstrap_servers, self.config.application_id, kafka=kafka
        )
        create_topics(plan, self.settings.bootstrap_servers, kafka=kafka)
        dead_letter = self.config.dead_letter_topic
        if dead_letter:
            partitions = max(plan.partitions_by_subtopology.values(), default=1)
            ensure_topics(
                self.settings.bootstrap_servers,
                [TopicSpec(dead_letter, partitions, {})],
                kafka=kafka,
            )
        # both guarantees keep each task's commit markers there (kafka/markers.py)
        ensure_topics(
            self.settings.bootstrap_servers,
            [
                TopicSpec(
                    commit_marker_topic(self.config.application_id),
                    len(plan.task_ids),
                    {"cleanup.policy": "compact"},
                )
            ],
            kafka=kafka,
        )
        if self.settings.metrics_port is not None:
            ensure_topics(
                self.settings.bootstrap_servers,
                [TopicSpec(metrics_topic(self.config.application_id), 1, METRICS_TOPIC_CONFIG)],
                kafka=kafka,
            )
        self.plan = plan
        _log.info(
            "topology_planned",
            application_id=self.config.application_id,
            tasks=len(plan.task_ids),
            sources=sorted(plan.external_sources),
            repartition=sorted(plan.internal),
            changelogs=sorted(plan.changelogs),
        )
        return plan

    def _snapshot_location(self) -> str:
        """``state.snapshot.location``, by default ``<checkpoint-dir>/state-snapshots`` (the
        checkpoint location is shared by every executor on a real cluster)."""
        if self.config.state_snapshot_location:
            return self.config.state_snapshot_location
        checkpoint = self.settings.resolved_checkpoint_dir
        if "://" not in checkpoint:
            checkpoint = str(Path(checkpoint).resolve())
        return f"{checkpoint.rstrip('/')}/state-snapshots"

    def _job_spec(self, bounded: bool = False, **epoch_fields: Any) -> JobSpec:
        pickled = None
        if self._topology_ref is None:
            from pyspark import cloudpickle

            pickled = cloudpickle.dumps(self.topology)
        return JobSpec(
            run_id=self._run_id,
            topology_ref=self._topology_ref,
            topology_kwargs=self._topology_kwargs,
            topology_pickle=pickled,
            bootstrap_servers=self.settings.bootstrap_servers,
            state_dir=str(Path(self.settings.state_dir).resolve()),
            # every setting, so a new one reaches the executors without being listed here
            config={**self.config.to_dict(), "state_snapshot_location": self._snapshot_location()},
            log_format=self.settings.log_format,
            bounded=bounded,
            task_ids=tuple(self.plan.task_ids) if self.plan else (),
            kafka=self.kafka,
            metrics_interval_s=None if self.settings.metrics_port is None else METRICS_INTERVAL_S,
            state_dir_per_executor=self.settings.state_dir_per_executor,
            **self._query_fields(),
            **epoch_fields,
        )

    def _query_fields(self) -> dict[str, Any]:
        """The job spec's query router fields; starts the run's query endpoint (router and
        HTTP server) the first time (``--query-port``)."""
        if self.settings.query_port is None:
            return {}
        if self._queries is None:
            from processor_api.query.service import RunQueries

            assert self.plan is not None and self._spark is not None
            self._queries = RunQueries(
                self.topology,
                self.plan.task_ids,
                driver_host=self._spark.conf.get("spark.driver.host", "127.0.0.1"),
                host=self.settings.query_host,
                port=self.settings.query_port,
                token=self.settings.query_token,
                application_id=self.config.application_id,
                registry=self.config.schema_registry,
            )
        return {"query_router": self._queries.router.address,
                "query_secret": self._queries.router.secret}  # fmt: skip

    @property
    def query_port(self) -> int | None:
        """The port interactive queries are served on while :meth:`run` runs (None: none)."""
        return None if self._queries is None else self._queries.server.port

    # ----------------------------------------------------------------- start
    def start(
        self,
        end_offsets_cap: dict[tuple[str, int], int] | None = None,
        available_now: bool = False,
    ) -> Any:
        """Start the streaming query (prepares topics first if needed).

        ``available_now``: one epoch (``Trigger.AvailableNow``) in which every task processes
        up to ``end_offsets_cap``, then the query stops by itself.
        """
        from processor_api.spark.checkpoint_files import open_checkpoint
        from processor_api.spark.epochs import (
            epoch_rows,
            epoch_trigger_s,
            executors_of,
            local_cores,
            local_master,
            slots_of,
            worker_count,
        )

        plan = self.plan or self.prepare()
        checkpoint = self.settings.resolved_checkpoint_dir
        threads = self.config.num_stream_threads
        files = open_checkpoint(checkpoint, self.config)
        layout: _Layout | None = None
        if self._spark is None:
            cores = local_cores(self.settings.master)
            sizing = (
                len(plan.task_ids)
                if cores is None
                else worker_count(len(plan.task_ids), cores, 1, threads)
            )
            if cores is not None and self._early_start_possible():
                # the executor is this machine: its worker hosts start while Spark does
                self._early_start_pid = os.getpid()
                local = local_cores(local_master(self.settings.master, sizing))
                assert local is not None
                workers = worker_count(len(plan.task_ids), local, 1, threads)
                layout = self._layout(
                    files, workers, available_now, end_offsets_cap, bounded_epochs=False
                )
                self._start_hosts_early(layout, files, available_now)
            self._spark = build_spark_session(
                self.settings, f"run-topology:{self.config.application_id}", sizing
            )
        spark = self._spark
        if layout is None:
            slots = slots_of(spark)
            cores = local_cores(spark.sparkContext.master)
            workers = worker_count(
                len(plan.task_ids), slots if cores is None else cores, executors_of(spark), threads
            )
            bounded_epochs = not available_now and slots < workers
            # on a cluster, continuous epochs: tasks move between workers while the run goes on
            moving = cores is None and not available_now and not bounded_epochs
            layout = self._layout(
                files, workers, available_now, end_offsets_cap, bounded_epochs, moving
            )
        spark.conf.set("spark.sql.shuffle.partitions", str(layout.partitions))
        bounded_epochs = layout.end.caught_up
        workers = len(layout.workers)
        self._timed_epochs = not available_now and not bounded_epochs
        if bounded_epochs and not self._warned_slots:
            self._warned_slots = True
            _log.warning(
                "bounded_epochs",
                workers=workers,
                slots=slots_of(spark),
                detail="fewer Spark task slots than workers: each epoch ends once its tasks "
                "caught up, so workers take turns (latency is then the epoch cadence); give the "
                "run at least as many executor cores as num.stream.threads per executor",
            )
        spec, end, ids, group_keys = layout.spec, layout.end, layout.workers, layout.group_keys
        from pyspark.sql.streaming.state import GroupStateTimeout

        from processor_api.spark.epoch_function import run_epoch

        results = (
            epoch_rows(spark, group_keys, ids)
            .groupBy("task")
            .applyInPandasWithState(
                partial(run_epoch, spec, end),
                outputStructType=OUTPUT_SCHEMA,
                stateStructType=STATE_SCHEMA,
                outputMode="append",
                timeoutConf=GroupStateTimeout.NoTimeout,
            )
        )
        writer = (
            observed(results)
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", checkpoint)
            .queryName(re.sub(r"\W", "_", self.config.application_id))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        elif not bounded_epochs:
            writer = writer.trigger(processingTime=f"{epoch_trigger_s(end)} seconds")
        started_at = time.time()
        self._query = writer.start()
        if self._timed_epochs and local_cores(spark.sparkContext.master) is None:
            if spec.layout is not None:
                self._failover = self._make_failover(layout, files, spark, started_at)
            self._watch_executors(spark)
        _log.info(
            "query_started",
            application_id=self.config.application_id,
            master=spark.sparkContext.master,
            checkpoint=checkpoint,
            state_dir=self.settings.state_dir,
            guarantee=self.config.processing_guarantee.value,
            tasks=len(plan.task_ids),
            workers=workers,
            epochs="bounded"
            if bounded_epochs
            else "one"
            if available_now
            else (f"{self.settings.epoch_interval_s:g}s"),
        )
        return self._query

    def _watch_executors(self, spark: Any) -> None:
        """Watch Spark's executors for the run (once): when one is lost, the worker hosts on
        this machine end their running epochs, so that Spark runs the lost workers in their
        slots at once instead of at the epoch's end (``executor_watch.py``)."""
        from processor_api.spark.executor_watch import ExecutorWatch, spark_executors

        if self._executor_watch is not None:
            return
        self._executor_watch = ExecutorWatch(
            lambda: spark_executors(spark),
            self._on_executors_lost,
            on_added=self._on_executors_added,
        )
        self._executor_watch.start()

    def _make_failover(self, layout: _Layout, files: Any, spark: Any, started_at: float) -> Any:
        """The run's :class:`~processor_api.spark.failover.Failover` (tasks move between
        workers when executors go and come)."""
        from processor_api.spark.epochs import slots_of
        from processor_api.spark.failover import Failover

        spec = layout.spec
        assert spec.layout is not None and self.plan is not None
        return Failover(
            location=spec.layout,
            checkpoint=files,
            run_id=self._run_id,
            application_id=self.config.application_id,
            task_ids=self.plan.task_ids,
            assignment=dict(spec.assignment),
            stateful=layout.stateful,
            state_dirs=self._state_dirs_here,
            started_at=started_at,
            slots=lambda: slots_of(spark),
            fence=self._fence_workers if self.config.exactly_once else None,
        )

    def _on_batch(self, frame: Any, batch_id: int) -> None:
        """``foreachBatch``: the batch's statistics, then a spread of the tasks over every
        worker if executors came back (``failover.py``)."""
        self._progress.on_batch(frame, batch_id)
        failover = self._failover
        if failover is not None:
            try:
                failover.after_batch(self._progress.last_epoch)
            except Exception as exc:  # noqa: BLE001 - the tasks stay where they are
                _log.warning("tasks_not_spread", error=f"{type(exc).__name__}: {exc}")

    def _on_executors_lost(self, lost: set[str], executors: set[str]) -> None:
        """The executor watch saw executors go: move their workers' tasks to the running
        workers (``failover.py``), or else cut the running epochs."""
        if self.plan is None or self._stop_requested.is_set() or self._closed:
            return
        failover = self._failover
        if failover is not None:
            from processor_api.spark.failover import LossOutcome

            try:
                if failover.on_lost() is not LossOutcome.UNKNOWN:
                    return
            except Exception as exc:  # noqa: BLE001 - the cut below frees the slots instead
                _log.warning("tasks_not_moved", error=f"{type(exc).__name__}: {exc}")
        self._cut_epochs(lost, executors)

    def _on_executors_added(self, added: set[str], executors: set[str]) -> None:
        if self._failover is not None and not self._closed:
            self._failover.on_added()

    def _cut_epochs(self, lost: set[str], executors: set[str]) -> None:
        from processor_api.spark.epochs import cut_epochs

        if self.plan is None or self._stop_requested.is_set() or self._closed:
            return
        hosts = sum(
            cut_epochs(directory, self.config.application_id, self.plan.task_ids, self._run_id)
            for directory in self._state_dirs_here()
        )
        _log.info("epochs_cut", lost=sorted(lost), hosts=hosts)

    def _layout(
        self,
        files: Any,
        workers: int,
        available_now: bool,
        end_offsets_cap: dict[tuple[str, int], int] | None,
        bounded_epochs: bool,
        moving: bool = False,
    ) -> _Layout:
        """The run's workers, their tasks and group keys, the job spec and the epochs' end,
        for ``workers`` workers (capped by the checkpoint's shuffle partitions); ``moving``:
        the job spec names the run's layout file (tasks move between workers meanwhile)."""
        from processor_api.spark.assignment import load_or_assign, worker_ids
        from processor_api.spark.epochs import reset_policies
        from processor_api.spark.task_keys import load_or_plan_group_keys, recorded_partitions

        plan = self.plan
        assert plan is not None
        partitions = recorded_partitions(files) or workers
        if workers > partitions:
            _log.warning(
                "workers_capped",
                workers=workers,
                partitions=partitions,
                detail="the Spark checkpoint was started with fewer shuffle partitions than "
                "this run has workers, and Spark keeps them: each worker needs one",
            )
            workers = partitions
        ids = worker_ids(workers)
        subtopologies = {sub.id: sub for sub in self.topology.subtopologies()}
        stateful = {
            task_id
            for task_id in plan.task_ids
            if subtopologies[parse_task_id(task_id)[0]].store_names
        }
        assignment = load_or_assign(files, plan.task_ids, ids, stateful, self._fence_moved)
        group_keys = load_or_plan_group_keys(files, ids, partitions)
        topic_partitions = [
            (topic, p)
            for topics in (plan.external_sources, plan.internal)
            for topic, count in topics.items()
            for p in range(count)
        ]
        spec = self._job_spec(
            bounded=available_now,
            start_offsets=committed_offsets(
                self.settings.bootstrap_servers,
                self.config.application_id,
                topic_partitions,
                kafka=self.kafka,
            ),
            reset_policies=reset_policies(self.topology, sorted(plan.internal)),
            assignment=assignment,
            early_start_pid=self._early_start_pid,
            layout=self._layout_location() if moving else None,
        )
        end = EpochEnd(
            duration_s=None if available_now or bounded_epochs else self.settings.epoch_interval_s,
            end_offsets=end_offsets_cap if available_now else None,
            caught_up=bounded_epochs,
        )
        return _Layout(ids, group_keys, spec, end, partitions, frozenset(stateful))

    def _layout_location(self) -> LayoutLocation:
        """Where this run's layout file is: in its Spark checkpoint (``worker_layout.py``)."""
        from processor_api.spark.checkpoint_files import filesystem_options

        checkpoint = self.settings.resolved_checkpoint_dir
        if "://" not in checkpoint:
            checkpoint = str(Path(checkpoint).resolve())
        return LayoutLocation(checkpoint, filesystem_options(checkpoint, self.config))

    def _fence_workers(self, workers: list[str]) -> None:
        """Fence the transactional producers of ``workers`` (their tasks moved elsewhere)."""
        from processor_api.kafka.names import worker_transactional_id
        from processor_api.kafka.transactions import fence_transactional_ids

        fence_transactional_ids(
            self.settings.bootstrap_servers,
            [worker_transactional_id(self.config.application_id, w) for w in workers],
            kafka=self.kafka,
        )

    def _fence_moved(
        self, previous: Mapping[str, str], assignment: dict[str, tuple[str, ...]]
    ) -> None:
        """Exactly-once: fence the producers of the workers that lose tasks to others since
        the last run, before any host of this run reads those tasks' commit markers (within
        a run a worker's hosts fence each other with the worker's transactional id, and the
        driver fences a lost worker whose tasks it moves: ``failover.py``)."""
        from processor_api.spark.assignment import moved_from

        if not self.config.exactly_once:
            return
        workers = moved_from(previous, assignment)
        if workers:
            self._fence_workers(workers)

    def _early_start_possible(self) -> bool:
        """Whether this run's driver starts the worker hosts itself (``early_start.py``):
        asked to, and one state directory (an executor's own would be unknown here)."""
        return self.settings.early_start != "off" and not self.settings.state_dir_per_executor

    def _start_hosts_early(self, layout: _Layout, files: Any, available_now: bool) -> None:
        """Start the worker hosts with their tasks before the session and the query. Only
        for a new checkpoint (Spark then hands over no state) are the tasks built, and, when
        asked to, processed before the first epoch: an available-now run's up to the end
        offsets its epoch gets (fixed before the hosts start, so the same "now")."""
        from processor_api.spark.early_start import host_environment, start_hosts_early

        build = not files.batches("commits")
        process = build and self.settings.early_start == "process"
        end = EpochEnd(end_offsets=layout.end.end_offsets) if available_now else EpochEnd()
        start_hosts_early(
            layout.spec, build, process, host_environment(self.settings.spark_conf), end
        )
        if process:
            threading.Thread(
                target=self._end_early_epochs_on_stop, name="early-stop", daemon=True
            ).start()

    def _end_early_epochs_on_stop(self) -> None:
        """A stop requested while the query starts ends the hosts' own epochs at once (each
        task commits what it processed); once the query runs, :meth:`_graceful_stop` does."""
        from processor_api.spark.epochs import end_epochs

        while not self._stop_requested.wait(0.2):
            if self._query is not None or self._closed:
                return
        assert self.plan is not None
        for directory in self._state_dirs_here():
            end_epochs(directory, self.config.application_id, self.plan.task_ids, self._run_id)

    # ------------------------------------------------------------------- run
    def run(self) -> RunResult:
        """Run the topology.

        Continuous by default: until SIGTERM/SIGINT or :meth:`request_stop`, after which the
        running epochs end, each task committing what it processed. With ``available_now``:
        everything in the input topics at start goes through every sub-topology (repartition
        topics included), then the run ends. Raises :class:`StreamsError` with the task's
        error if an epoch fails.
        """
        started = time.monotonic()
        self.plan or self.prepare()
        restore_handlers = self._install_signal_handlers()
        try:
            if self.settings.metrics_port is not None:
                self._metrics = self._start_metrics(self.settings.metrics_port)
            if self.settings.available_now:
                self._run_available_now()
            else:
                self._run_continuous()
        finally:
            restore_handlers()
            self.close()
            if self._metrics is not None:
                self._metrics.close()
                self._metrics = None
            if self._queries is not None:
                self._queries.close()
                self._queries = None
        result = self._progress.result
        result.duration_s = time.monotonic() - started
        _log.info(
            "run_finished",
            batches=result.batches,
            records=result.records,
            outputs=result.outputs,
            changelog_records=result.changelog_records,
            restored=result.restored,
            duration_s=round(result.duration_s, 2),
        )
        return result

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` is served on while :meth:`run` runs (None: no metrics)."""
        return None if self._metrics is None else self._metrics.server.port

    def _start_metrics(self, port: int) -> RunMetrics:
        """The metrics feed, collector and HTTP server of this run (``--metrics-port``)."""
        from prometheus_client import CollectorRegistry, ProcessCollector

        from processor_api.spark.metrics_collector import MetricsFeed, RunCollector, readiness
        from processor_api.spark.metrics_server import MetricsServer

        plan = self.plan
        assert plan is not None
        subtopologies = {sub.id: sub for sub in self.topology.subtopologies()}
        inputs = {}
        for task_id in plan.task_ids:
            sub, partition = parse_task_id(task_id)
            inputs[task_id] = [(t, partition) for t in subtopologies[sub].source_topics]
        feed = MetricsFeed(
            self.settings.bootstrap_servers,
            self.config.application_id,
            self._run_id,
            inputs,
            kafka=self.kafka,
        )
        registry = CollectorRegistry()
        registry.register(RunCollector(feed, lambda: self._progress.result.batches))
        ProcessCollector(registry=registry)  # the driver's own process_* metrics
        try:
            server = MetricsServer(
                registry, self._liveness, lambda: readiness(feed, plan.task_ids), port
            )
        except BaseException:
            feed.close()
            raise
        return RunMetrics(feed, server)

    def _liveness(self) -> tuple[bool, str]:
        query = self._query
        if query is not None and not query.isActive and query.exception() is not None:
            return False, "the streaming query failed"
        return True, "the driver runs"

    def _run_continuous(self) -> None:
        self._run_query(self.start)

    def _run_query(self, start: Callable[[], Any]) -> Any:
        """Start a query and wait until it ends (a stop request stops it gracefully)."""
        query = start()
        while not self._await(query, 0.2):
            if self._stop_requested.is_set():
                self._graceful_stop()
                break
        self._raise_if_failed(query)
        return query

    @staticmethod
    def _await(query: Any, timeout_s: float) -> bool:
        """``awaitTermination`` that turns a failed query into a :class:`StreamsError`."""
        from pyspark.errors import StreamingQueryException

        try:
            return bool(query.awaitTermination(timeout_s))
        except StreamingQueryException as exc:
            raise query_failed(exc) from None

    def _run_available_now(self) -> None:
        """``Trigger.AvailableNow`` passes until no repartition topic has unprocessed records.

        A pass reads every source topic up to its end at the pass's start (input topics are
        capped at their end when the run started) and stops on its own after its last batch,
        so no batch is ever interrupted. Records a pass writes to repartition topics are read
        by the next pass.
        """
        assert self.plan is not None
        external = [(t, p) for t, n in self.plan.external_sources.items() for p in range(n)]
        cap = (
            end_offsets(self.settings.bootstrap_servers, external, kafka=self.kafka)
            if external
            else {}
        )
        _log.info("available_now_targets", records=sum(cap.values()), partitions=len(cap))
        for attempt in range(1, MAX_AVAILABLE_NOW_PASSES + 1):
            # this pass reads repartition topics up to their end now
            bounds = {**cap, **self._repartition_ends()}
            query = self._run_query(partial(self.start, end_offsets_cap=bounds, available_now=True))
            if self._stop_requested.is_set():
                return
            log_batch_timings(query)
            backlog = self._repartition_backlog()
            _log.info(
                "available_now_pass_done",
                run_pass=attempt,
                repartition_backlog=sum(b.records for b in backlog),
            )
            if backlog and not any(b.readable for b in backlog):
                # only records of transactions still open: a next pass would plan nothing
                backlog = wait_until_readable(
                    self.settings.bootstrap_servers,
                    self.config.application_id,
                    backlog,
                    OPEN_TRANSACTION_WAIT_S,
                    kafka=self.kafka,
                )
                if backlog and not any(b.readable for b in backlog):
                    raise StreamsError(
                        f"repartition topics have records past transactions that stayed open "
                        f"{OPEN_TRANSACTION_WAIT_S:g}s after every task committed, so no "
                        f"read_committed reader gets to them: "
                        + "; ".join(b.describe() for b in backlog)
                    )
            if not backlog:
                return
        raise StreamsError(
            f"repartition topics still had unprocessed records after "
            f"{MAX_AVAILABLE_NOW_PASSES} available-now passes: "
            + "; ".join(b.describe() for b in backlog)
        )

    def _repartition_ends(self) -> dict[tuple[str, int], int]:
        assert self.plan is not None
        internal = [(t, p) for t, n in self.plan.internal.items() for p in range(n)]
        if not internal:
            return {}
        return end_offsets(
            self.settings.bootstrap_servers,
            internal,
            isolation_level=self.config.processing_guarantee.isolation_level,
            kafka=self.kafka,
        )

    def _repartition_backlog(self) -> list[PartitionBacklog]:
        """Repartition partitions the tasks have not read to their end: the group's committed
        offsets (every task commit commits them) against the end offsets."""
        assert self.plan is not None
        return group_backlog(
            self.settings.bootstrap_servers,
            self.config.application_id,
            [(t, p) for t, n in self.plan.internal.items() for p in range(n)],
            self.config.processing_guarantee.isolation_level,
            kafka=self.kafka,
        )

    def _raise_if_failed(self, query: Any) -> None:
        error = query.exception()
        if error is not None:
            raise query_failed(error) from None

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop after the batch in flight."""
        self._stop_requested.set()

    def _graceful_stop(self) -> None:
        """End the running epochs, then stop the query between two batches when possible.

        Every worker host is told to end its epoch (each task commits what it processed and
        answers); the batch in flight is allowed to complete (bounded by ``STOP_GRACE_S``) and
        the query is stopped once no trigger is active (bounded and available-now epochs:
        after the batch in flight). Work a task did after its last commit in an epoch
        interrupted anyway is done again on the next start.
        """
        query = self._query
        if query is None:
            return
        if self.plan is not None:
            from processor_api.spark.epochs import end_epochs

            ended = sum(
                end_epochs(directory, self.config.application_id, self.plan.task_ids, self._run_id)
                for directory in self._state_dirs_here()
            )
            _log.debug("epochs_ended", tasks=ended)
        if query.status.get("isTriggerActive"):
            last = (query.lastProgress or {}).get("batchId", -1)
            deadline = time.monotonic() + STOP_GRACE_S
            while query.isActive and time.monotonic() < deadline:
                # timed epochs: an overdue trigger starts the next epoch at once, so wait for
                # the pause before the next trigger (an epoch of an ended run answers at
                # once); stopping inside an epoch interrupts foreachBatch, and Spark then
                # matches the long Py4J error against a regex that can overflow the stream
                # thread's stack (StreamExecution.PROXY_ERROR)
                moved_on = (query.lastProgress or {}).get("batchId", -1) != last
                if moved_on and not self._timed_epochs:
                    break
                if not query.status.get("isTriggerActive"):
                    break
                time.sleep(0.02)
        query.stop()
        _log.info("query_stopped", application_id=self.config.application_id)

    def _state_dirs_here(self) -> list[Path]:
        """The executors' state directories on this machine (one unless per executor)."""
        return state_dirs_here(
            Path(self.settings.state_dir).resolve(), self.settings.state_dir_per_executor
        )

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {}

        def handler(signum: int, frame: Any) -> None:
            _log.info("stop_requested", signal=signal.Signals(signum).name)
            self._stop_requested.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore

    def close(self) -> None:
        """Stop the query if running, close the tasks, stop the SparkSession if this runner
        created it.

        Tasks live in worker host processes across epochs (``worker_host.py``); closing them
        runs the processors' ``close()``. Hosts on other machines exit with their executor.
        """
        self._closed = True
        if self._executor_watch is not None:
            self._executor_watch.stop()
        if self._query is not None and self._query.isActive:
            self._query.stop()
        if self.plan is not None:
            closed = sum(
                close_hosts(directory, self.config.application_id, self.plan.task_ids)
                for directory in self._state_dirs_here()
            )
            _log.debug("tasks_closed", tasks=closed)
        if self._own_spark and self._spark is not None:
            self._spark.stop()
            self._spark = None


@dataclass(frozen=True)
class _Layout:
    """How a run's tasks reach Spark: its workers, their group keys, the job spec, the end
    of its epochs and the shuffle partitions."""

    workers: list[str]
    group_keys: dict[str, str]
    spec: JobSpec
    end: EpochEnd
    partitions: int
    stateful: frozenset[str] = frozenset()  # the tasks with stores


class RunMetrics:
    """A run's metrics feed and HTTP server, closed together."""

    def __init__(self, feed: Any, server: Any) -> None:
        self.feed = feed
        self.server = server

    def close(self) -> None:
        """Stop serving and following."""
        try:
            self.server.close()
        finally:
            self.feed.close()


#: How often every worker host sends its metrics report (seconds).
METRICS_INTERVAL_S = 1.0
#: The metrics topic keeps reports ten minutes (in one-minute segments, so that the broker
#: can delete them): the driver reads only new ones. 100 tasks send about 0.6 MB/s.
METRICS_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "600000", "segment.ms": "60000"}


def run_topology(topology: Topology | str, settings: RunSettings, **kwargs: Any) -> RunResult:
    """Convenience: plan, start and run a topology to completion."""
    return TopologyRunner(topology, settings, **kwargs).run()
