"""Runs a topology on Spark Structured Streaming (driver side).

One streaming query per run::

    Kafka source (every source topic, repartition topics included)   ∪   task bootstrap rows
        -> column task = the group key of task "<subtopology>_<partition>" (task_keys.py:
           the task id, salted so that the tasks spread over Spark's shuffle partitions)
        -> groupBy(task).applyInPandasWithState(run_task, ProcessingTimeTimeout)
        -> foreachBatch: per-batch statistics (logged), positions for --available-now

``GroupState`` holds each task's committed metadata (input positions, stream time,
punctuation schedules, changelog offsets); the processing-time timeout wakes idle tasks so
wall-clock punctuation fires without input.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.errors import ConfigError, StreamsError
from processor_api.kafka.admin import TopicSpec, check_broker, ensure_topics
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.topics import TopicPlan, create_topics, plan_topics
from processor_api.logging import LEVEL_ENV, current_level, debug_enabled, get_logger
from processor_api.spark.host_client import close_hosts
from processor_api.spark.job import JobSpec
from processor_api.spark.resume import check_agreement, checkpoint_positions, starting_offsets_json
from processor_api.spark.spark_home import compiled_spark_home
from processor_api.spark.task_function import OUTPUT_SCHEMA, STATE_SCHEMA, run_task
from processor_api.spark.trigger import choose_trigger_s
from processor_api.topology import Topology

_log = get_logger("processor_api.runner")

STOP_GRACE_S = 60.0
MAX_AVAILABLE_NOW_PASSES = 20
#: How often a running query logs a ``progress`` event (records/s, lag per task).
PROGRESS_INTERVAL_S = 30.0
LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")


@dataclass
class RunSettings:
    """How to run a topology (the ``run-topology`` flags)."""

    bootstrap_servers: str
    application_id: str = "processor-api-app"
    state_dir: str = "./state"
    checkpoint_dir: str | None = None
    master: str = "local[*]"
    processing_guarantee: str = "at_least_once"
    #: None: chosen from the topology's wall-clock schedules (``spark/trigger.py``).
    trigger_interval_s: float | None = None
    available_now: bool = False
    max_records_per_batch: int = 200_000
    config: dict[str, Any] = field(default_factory=dict)
    log_format: str = "console"
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: Kafka client settings for every client of the run (``--kafka-config``); keys prefixed
    #: ``consumer.``, ``producer.`` or ``admin.`` apply to that role only (see
    #: :class:`~processor_api.kafka.client_config.KafkaClientConfig`).
    kafka_config: dict[str, Any] = field(default_factory=dict)

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


class _Progress:
    """Batch statistics collected by ``foreachBatch`` (runs on a py4j callback thread)."""

    def __init__(
        self,
        end_offsets_of: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]] | None = None,
        interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.lock = threading.Lock()
        self.result = RunResult()
        self.positions: dict[tuple[str, int], int] = {}
        self.completed_batches: set[int] = set()
        self._end_offsets_of = end_offsets_of
        self._interval_s = interval_s
        self._task_topics: dict[str, set[str]] = {}
        self._last_report = time.monotonic()
        self._records_at_report = 0

    def on_batch(self, frame: Any, batch_id: int) -> None:
        started = time.monotonic()
        rows = frame.collect()
        with self.lock:
            records = sum(r["records"] for r in rows)
            outputs = sum(r["outputs"] for r in rows)
            changelog = sum(r["changelog_records"] for r in rows)
            restored = sum(r["restored"] for r in rows)
            for row in rows:
                partition = int(row["task"].split("_", 1)[1])
                positions = json.loads(row["positions"])
                self._task_topics.setdefault(row["task"], set()).update(positions)
                for topic, position in positions.items():
                    key = (topic, partition)
                    self.positions[key] = max(self.positions.get(key, 0), int(position))
            result = self.result
            result.batches += 1
            result.records += records
            result.outputs += outputs
            result.changelog_records += changelog
            result.restored += restored
            self.completed_batches.add(batch_id)
        if records or outputs or restored:
            _log.info(
                "batch_done",
                batch=batch_id,
                tasks=len(rows),
                records=records,
                outputs=outputs,
                changelog_records=changelog,
                restored=restored,
                max_task_ms=round(max((r["duration_ms"] for r in rows), default=0.0), 1),
                collect_ms=round((time.monotonic() - started) * 1000, 1),
            )
        self._report_progress()

    def _report_progress(self) -> None:
        """Every ``interval_s``: a ``progress`` event with records/s and the lag per task.

        The lag of a task is the sum, over its input partitions, of the broker's end offset
        minus the position the task has committed (what ``kafka-consumer-groups --describe``
        shows as LAG); one end-offset look-up per report.
        """
        now = time.monotonic()
        elapsed = now - self._last_report
        if elapsed < self._interval_s:
            return
        with self.lock:
            records = self.result.records
            positions = dict(self.positions)
            task_topics = {task: set(topics) for task, topics in self._task_topics.items()}
        lag: dict[str, int] = {}
        if self._end_offsets_of is not None and positions:
            try:
                ends = self._end_offsets_of(sorted(positions))
            except StreamsError as exc:
                _log.debug("progress_lag_unknown", error=str(exc))
                ends = {}
            for task, topics in sorted(task_topics.items()):
                partition = int(task.split("_", 1)[1])
                keys = [(t, partition) for t in topics if (t, partition) in ends]
                if keys:
                    lag[task] = sum(max(0, ends[k] - positions.get(k, 0)) for k in keys)
        _log.info(
            "progress",
            records=records,
            records_per_s=round((records - self._records_at_report) / elapsed, 1),
            batches=self.result.batches,
            lag=sum(lag.values()) if lag else None,
            lag_by_task=lag or None,
        )
        self._last_report, self._records_at_report = now, records


def _python_path() -> str:
    entries = [os.getcwd(), *[p for p in sys.path if p and os.path.isdir(p)]]
    existing = os.environ.get("PYTHONPATH")
    if existing:
        entries.append(existing)
    return os.pathsep.join(dict.fromkeys(entries))


def build_spark_session(settings: RunSettings, app_name: str, task_count: int) -> Any:
    """A SparkSession for the run (workers can import the driver's modules).

    Quiet unless the log level is debug: Spark's log4j at ERROR from the JVM's start (see
    log4j2.properties; no banner, no WARN lines), no console progress bar, Python warnings
    (pandas' FutureWarning) off in the workers. The level reaches the workers as
    ``$PROCESSOR_API_LOG_LEVEL``.
    """
    from pyspark.sql import SparkSession

    python_path = _python_path()
    quiet = not debug_enabled()
    os.environ["PYTHONPATH"] = python_path
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if quiet:
        os.environ.setdefault("PYTHONWARNINGS", "ignore")  # inherited by local workers
    builder = (
        SparkSession.builder.master(settings.master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(max(1, task_count)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.executorEnv.PYTHONPATH", python_path)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.sql.streaming.stopTimeout", str(int(STOP_GRACE_S * 1000)))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false" if quiet else "true")
        .config(f"spark.executorEnv.{LEVEL_ENV}", current_level())
    )
    if quiet and "PYTHONWARNINGS" not in settings.spark_conf:
        builder = builder.config("spark.executorEnv.PYTHONWARNINGS", "ignore")
    for key, value in settings.spark_conf.items():
        builder = builder.config(key, value)
    _launch_jvm_in_own_session(_driver_launch_conf(settings, quiet), quiet)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    return session


#: JVM options of the driver (the executors too with ``local[...]``: one JVM). The JVM no
#: longer sees a record (tasks read their own input in task hosts): it plans offset ranges,
#: keeps a few rows of GroupState and schedules Spark tasks, so start-up matters more than
#: peak JIT code: C1 only (``TieredStopAtLevel=1``) compiles quickly, and the serial collector
#: starts no GC worker threads on a small machine. ``--spark-conf
#: spark.driver.extraJavaOptions=...`` replaces these (an empty value: the JVM's defaults);
#: ``PROCESSOR_API_DRIVER_JAVA_OPTIONS`` does the same from the environment.
DEFAULT_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _driver_launch_conf(settings: RunSettings, quiet: bool = True) -> dict[str, str]:
    """Settings the driver's JVM must get when it is launched, not from the builder.

    In local mode, ``spark.driver.*`` JVM settings set on the builder come too late (the JVM
    is already running when the session is built); ``spark-submit --conf`` applies them.
    The log4j2 configuration (log4j2.properties, levels from ``quiet``) always goes first, so
    that Spark is quiet from the JVM's first line.
    """
    conf = {
        key: value
        for key, value in settings.spark_conf.items()
        if key in ("spark.driver.extraJavaOptions", "spark.driver.memory")
    }
    options = conf.get(
        "spark.driver.extraJavaOptions",
        os.environ.get("PROCESSOR_API_DRIVER_JAVA_OPTIONS", DEFAULT_DRIVER_JAVA_OPTIONS),
    )
    logging_options = [
        f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}",
        f"-Dprocessor_api.spark.level={'ERROR' if quiet else 'WARN'}",
        f"-Dprocessor_api.spark.failure.level={'OFF' if quiet else 'ERROR'}",
    ]
    conf["spark.driver.extraJavaOptions"] = " ".join([*logging_options, options.strip()]).strip()
    return conf


#: Lines the JVM prints before any logging is set up, dropped unless the level is debug.
_JVM_NOISE = (re.compile(rb"^WARNING: Using incubator modules"),)


def _forward_jvm_stderr(stream: Any, quiet: bool) -> None:
    """Copy the JVM's stderr (its own and its Python workers' lines) to ours, line by line."""
    for line in iter(stream.readline, b""):
        if quiet and any(pattern.match(line) for pattern in _JVM_NOISE):
            continue
        try:
            os.write(2, line)
        except OSError:
            return


def _launch_jvm_in_own_session(
    launch_conf: dict[str, str] | None = None, quiet: bool = False
) -> None:
    """Start Spark's JVM (from the compiled ``SPARK_HOME``, see spark_home.py) in a session of its own.

    ``kill -TERM -<pgid>`` (or systemd's control-group stop) then reaches only this driver
    process, which stops the query after the batch in flight; the JVM would otherwise die at
    once and take the batch with it. The JVM still exits when the driver exits (it watches its
    standard input).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is None:
        spark_home = compiled_spark_home()  # workers import a byte-compiled pyspark.zip
        if spark_home:
            os.environ["SPARK_HOME"] = spark_home
        conf = SparkConf(loadDefaults=False).setAll(list((launch_conf or {}).items()))
        # the JVM's stderr goes through a pipe read from before it starts, so that what it
        # prints when it cannot start still reaches the terminal
        read_end, write_end = os.pipe()
        threading.Thread(
            target=_forward_jvm_stderr,
            args=(os.fdopen(read_end, "rb"), quiet),
            name="spark-jvm-stderr",
            daemon=True,
        ).start()
        try:
            gateway = launch_gateway(
                conf=conf, popen_kwargs={"start_new_session": True, "stderr": write_end}
            )
        finally:
            os.close(write_end)
        SparkContext._ensure_initialized(gateway=gateway)


_PYTHON_ERROR = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (.+)$", re.MULTILINE
)
_WRAPPER_PREFIXES = ("org.", "java.", "py4j.", "pyspark.errors.", "scala.")


def explain_failure(exc: BaseException) -> str:
    """The most useful line of a Spark failure: the Python error raised in the task."""
    text = str(exc)
    matches = [
        m
        for m in _PYTHON_ERROR.finditer(text)
        if not m.group(1).startswith(_WRAPPER_PREFIXES) and "py4j" not in m.group(1).lower()
    ]
    for match in reversed(matches):
        if "processor_api" in match.group(1) or match.group(1).endswith(
            ("ProcessingError", "StreamsError", "DeliveryError", "StoreError")
        ):
            return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}"
    if matches:
        return f"{matches[-1].group(1)}: {matches[-1].group(2).strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def failure_details(exc: BaseException) -> str:
    """Everything known about a Spark failure: its message (the task's Python traceback
    included) and the JVM stack trace, for the failure report file."""
    text = str(exc).rstrip()
    # pyspark's CapturedException keeps the JVM stack; str() shows it only when
    # spark.sql.pyspark.jvmStacktrace.enabled is set
    stack = getattr(exc, "_stackTrace", None)
    if stack and str(stack).strip() not in text:
        text += "\n\nJVM stack trace:\n" + str(stack).rstrip()
    return text


def query_failed(exc: BaseException) -> StreamsError:
    """The one-line error of a failed query; ``details`` holds the full text."""
    error = StreamsError(f"the streaming query failed: {explain_failure(exc)}")
    error.details = failure_details(exc)
    return error


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
        self._topology_kwargs = dict(topology_kwargs or {})
        if isinstance(topology, str):
            from processor_api.loader import load_topology

            self._topology_ref: str | None = topology
            self.topology = load_topology(topology, self._topology_kwargs)
        else:
            self._topology_ref = None
            self.topology = topology
        self._spark = spark
        self._own_spark = spark is None
        self._query: Any = None
        self.kafka = KafkaClientConfig.from_dict(settings.kafka_config)
        self._progress = _Progress(
            partial(end_offsets, settings.bootstrap_servers, kafka=self.kafka, timeout_s=5.0)
        )
        self._run_id = uuid.uuid4().hex  # one per run: task hosts keep their tasks across passes
        self._stop_requested = threading.Event()
        self.plan: TopicPlan | None = None

    # --------------------------------------------------------------- prepare
    def prepare(self) -> TopicPlan:
        """Check the broker, plan and create topics. Errors are clear and fast."""
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
        # both guarantees keep each task's commit markers there (spark/guarantee.py)
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

    def _job_spec(self, wall_clock_timeouts: bool) -> JobSpec:
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
            config={
                "application_id": self.config.application_id,
                "processing_guarantee": self.config.processing_guarantee.value,
                "deserialization_exception_handler": self.config.deserialization_exception_handler,
                "processing_exception_handler": self.config.processing_exception_handler,
                "production_exception_handler": self.config.production_exception_handler,
                "dead_letter_topic": self.config.dead_letter_topic,
                **self.config.extra,
            },
            log_format=self.settings.log_format,
            wall_clock_timeouts=wall_clock_timeouts,
            task_ids=tuple(self.plan.task_ids) if self.plan else (),
            kafka=self.kafka,
        )

    # ----------------------------------------------------------------- start
    def start(
        self,
        end_offsets_cap: dict[tuple[str, int], int] | None = None,
        available_now: bool = False,
    ) -> Any:
        """Start the streaming query (prepares topics first if needed).

        ``available_now`` uses Spark's ``Trigger.AvailableNow``: the query processes what the
        topics hold when it starts (capped by ``end_offsets_cap``) and then stops by itself.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.streaming.state import GroupStateTimeout

        from processor_api.spark.bootstrap_source import BOOTSTRAP_FORMAT, TaskBootstrapSource
        from processor_api.spark.kafka_source import KafkaRangeDataSource
        from processor_api.spark.task_keys import load_or_plan_group_keys

        plan = self.plan or self.prepare()
        self._check_checkpoint_mode(available_now)
        if self._spark is None:
            self._spark = build_spark_session(
                self.settings, f"run-topology:{self.config.application_id}", len(plan.task_ids)
            )
        spark = self._spark
        spark.dataSource.register(KafkaRangeDataSource)
        spark.dataSource.register(TaskBootstrapSource)

        reader = (
            spark.readStream.format(KafkaRangeDataSource.name())
            .option("bootstrap.servers", self.settings.bootstrap_servers)
            .option("topics", ",".join(plan.source_topics))
            .option("max.records.per.batch", str(self.settings.max_records_per_batch))
            .option("starting.offsets", self._resume_offsets(plan))
            .option("isolation.level", self.config.processing_guarantee.isolation_level)
            .options(**{f"kafka.{k}": str(v) for k, v in self.kafka.settings.items()})
        )
        if end_offsets_cap:
            caps: dict[str, dict[str, int]] = {}
            for (topic, partition), offset in end_offsets_cap.items():
                caps.setdefault(topic, {})[str(partition)] = offset
            reader = reader.option("end.offsets", json.dumps(caps))
        ranges = reader.load()
        mapping = F.create_map(
            *[
                item
                for topic, sub in plan.topic_to_subtopology.items()
                for item in (F.lit(topic), F.lit(str(sub)))
            ]
        )
        group_keys = load_or_plan_group_keys(
            self.settings.resolved_checkpoint_dir,
            plan.task_ids,
            int(spark.conf.get("spark.sql.shuffle.partitions")),
        )
        group_key_of = F.create_map(
            *[item for task_id, key in group_keys.items() for item in (F.lit(task_id), F.lit(key))]
        )
        task_column = F.element_at(
            group_key_of,
            F.concat(
                F.element_at(mapping, F.col("topic")),
                F.lit("_"),
                F.col("partition").cast("string"),
            ),
        )
        columns = ["topic", "partition", "start", "end"]
        keyed = ranges.select(task_column.alias("task"), *columns)
        bootstrap = (
            spark.readStream.format(BOOTSTRAP_FORMAT)
            .option("tasks", json.dumps([group_keys[task_id] for task_id in plan.task_ids]))
            .load()
        )
        rows = keyed.unionByName(bootstrap.select("task", *columns))
        # Trigger.AvailableNow never ends while a processing-time timeout asks for no-data
        # batches, so bounded runs use NoTimeout; wall-clock punctuation is still checked
        # whenever a task runs.
        timeout = (
            GroupStateTimeout.NoTimeout
            if available_now
            else GroupStateTimeout.ProcessingTimeTimeout
        )
        results = rows.groupBy("task").applyInPandasWithState(
            partial(run_task, self._job_spec(wall_clock_timeouts=not available_now)),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=timeout,
        )
        writer = (
            results.writeStream.foreachBatch(self._progress.on_batch)
            .option("checkpointLocation", self.settings.resolved_checkpoint_dir)
            .queryName(re.sub(r"\W", "_", self.config.application_id))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            trigger_s = self.settings.trigger_interval_s or choose_trigger_s(
                self.topology, self.config
            )
            writer = writer.trigger(processingTime=f"{trigger_s} seconds")
        self._query = writer.start()
        _log.info(
            "query_started",
            application_id=self.config.application_id,
            master=spark.sparkContext.master,
            checkpoint=self.settings.resolved_checkpoint_dir,
            state_dir=self.settings.state_dir,
            guarantee=self.config.processing_guarantee.value,
        )
        return self._query

    def _check_checkpoint_mode(self, available_now: bool) -> None:
        """Refuse to resume a checkpoint written in the other mode.

        Continuous runs use a processing-time GroupState timeout and available-now runs none
        (Spark never ends an AvailableNow query otherwise); Spark stores the state with a
        different schema in each case and cannot resume one from the other.
        """
        mode = "available-now" if available_now else "continuous"
        checkpoint = Path(self.settings.resolved_checkpoint_dir)
        marker = checkpoint / "processor_api_mode"
        if marker.exists():
            recorded = marker.read_text().strip()
            if recorded != mode:
                raise ConfigError(
                    f"the Spark checkpoint {checkpoint} was written by a {recorded} run and "
                    f"cannot be resumed by a {mode} run (Spark's state schema differs); run in "
                    f"{recorded} mode, or use another --checkpoint-dir/--application-id"
                )
            return
        if (checkpoint / "offsets").exists():
            return  # a checkpoint from before the marker existed: let Spark decide
        checkpoint.mkdir(parents=True, exist_ok=True)
        marker.write_text(mode + "\n")

    def _resume_offsets(self, plan: TopicPlan) -> str:
        """The source's starting offsets: see ``resume.py`` (checkpoint, group, or policy)."""
        partitions = [
            (topic, p)
            for topics in (plan.external_sources, plan.internal)
            for topic, count in topics.items()
            for p in range(count)
        ]
        group_id = self.config.application_id
        group = committed_offsets(
            self.settings.bootstrap_servers, group_id, partitions, kafka=self.kafka
        )
        checkpoint = self.settings.resolved_checkpoint_dir
        positions = checkpoint_positions(checkpoint)
        if positions is not None:
            check_agreement(checkpoint, *positions, group, group_id)
            return self._starting_offsets()  # Spark resumes from its checkpoint
        if group:
            _log.info(
                "resuming_from_consumer_group",
                group=group_id,
                partitions=len(group),
                detail="no Spark checkpoint: the source starts at the group's committed "
                "offsets and tasks adopt their last commit marker",
            )
            return starting_offsets_json(group)
        return self._starting_offsets()

    def _starting_offsets(self) -> str:
        policies = {
            node.offset_reset
            for node in self.topology.nodes.values()
            if hasattr(node, "offset_reset")
        }
        return "latest" if policies == {"latest"} else "earliest"

    # ------------------------------------------------------------------- run
    def run(self) -> RunResult:
        """Run the topology.

        Continuous by default: until SIGTERM/SIGINT or :meth:`request_stop`, after which the
        micro-batch in flight is allowed to finish. With ``available_now``: everything in the
        input topics at start goes through every sub-topology (repartition topics included),
        then the run ends. Raises :class:`StreamsError` with the task's error if a batch fails.
        """
        started = time.monotonic()
        self.plan or self.prepare()
        restore_handlers = self._install_signal_handlers()
        try:
            if self.settings.available_now:
                self._run_available_now()
            else:
                self._run_continuous()
        finally:
            restore_handlers()
            self.close()
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

    def _run_continuous(self) -> None:
        query = self.start()
        while not self._await(query, 0.2):
            if self._stop_requested.is_set():
                self._graceful_stop()
                break
        self._raise_if_failed(query)

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
            query = self.start(end_offsets_cap=cap, available_now=True)
            while not self._await(query, 0.2):
                if self._stop_requested.is_set():
                    self._graceful_stop()
                    break
            self._raise_if_failed(query)
            if self._stop_requested.is_set():
                return
            self._log_batch_timings(query)
            backlog = self._repartition_backlog(query)
            _log.info("available_now_pass_done", run_pass=attempt, repartition_backlog=backlog)
            if backlog == 0:
                return
        raise StreamsError(
            f"repartition topics still had unprocessed records after "
            f"{MAX_AVAILABLE_NOW_PASSES} available-now passes"
        )

    @staticmethod
    def _log_batch_timings(query: Any) -> None:
        """Where each micro-batch's time went, as Spark measured it (``durationMs``)."""
        for progress in query.recentProgress or []:
            durations = progress.get("durationMs") or {}
            _log.debug(
                "spark_batch_timings",
                batch=progress.get("batchId"),
                input_rows=progress.get("numInputRows"),
                **{f"{name}_ms": value for name, value in sorted(durations.items())},
            )

    def _repartition_backlog(self, query: Any) -> int:
        """Records in repartition topics beyond what the source has read."""
        assert self.plan is not None
        internal = [(t, p) for t, n in self.plan.internal.items() for p in range(n)]
        if not internal:
            return 0
        read = self._source_positions(query)
        ends = end_offsets(self.settings.bootstrap_servers, internal, kafka=self.kafka)
        return sum(max(0, end - read.get(tp, 0)) for tp, end in ends.items())

    @staticmethod
    def _source_positions(query: Any) -> dict[tuple[str, int], int]:
        """Per topic-partition, the offset the Kafka source has read up to (last progress)."""
        positions: dict[tuple[str, int], int] = {}
        for progress in query.recentProgress or []:
            for source in progress.get("sources", []):
                try:
                    end = json.loads(source.get("endOffset") or "null")
                except (TypeError, ValueError):
                    continue
                if not isinstance(end, dict) or "emitted" in end:
                    continue
                for topic, partitions in end.items():
                    if not isinstance(partitions, dict):
                        continue
                    for partition, offset in partitions.items():
                        key = (topic, int(partition))
                        positions[key] = max(positions.get(key, 0), int(offset))
        return positions

    def _raise_if_failed(self, query: Any) -> None:
        error = query.exception()
        if error is not None:
            raise query_failed(error) from None

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop after the batch in flight."""
        self._stop_requested.set()

    def _graceful_stop(self) -> None:
        """Stop the query between micro-batches when possible.

        The batch in flight (if any) is allowed to complete (bounded by ``STOP_GRACE_S``); the
        query is stopped right after the next progress report. A batch interrupted anyway is
        not committed: it is re-run on the next start.
        """
        query = self._query
        if query is None:
            return
        if query.status.get("isTriggerActive"):
            last = (query.lastProgress or {}).get("batchId", -1)
            deadline = time.monotonic() + STOP_GRACE_S
            while query.isActive and time.monotonic() < deadline:
                if (query.lastProgress or {}).get("batchId", -1) != last:
                    break
                if not query.status.get("isTriggerActive"):
                    break
                time.sleep(0.02)
        query.stop()
        _log.info("query_stopped", application_id=self.config.application_id)

    def _install_signal_handlers(self):  # noqa: ANN202
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

        Tasks live in host processes between micro-batches (``task_host.py``); closing them
        runs the processors' ``close()``. Hosts on other machines exit with their executor.
        """
        if self._query is not None and self._query.isActive:
            self._query.stop()
        if self.plan is not None:
            closed = close_hosts(
                Path(self.settings.state_dir).resolve(),
                self.config.application_id,
                self.plan.task_ids,
            )
            _log.debug("tasks_closed", tasks=closed)
        if self._own_spark and self._spark is not None:
            self._spark.stop()
            self._spark = None


def run_topology(topology: Topology | str, settings: RunSettings, **kwargs: Any) -> RunResult:
    """Convenience: plan, start and run a topology to completion."""
    if settings.trigger_interval_s is not None and settings.trigger_interval_s <= 0:
        raise ConfigError(f"trigger interval must be > 0 s, got {settings.trigger_interval_s}")
    return TopologyRunner(topology, settings, **kwargs).run()
