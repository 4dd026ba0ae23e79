"""The driver's SparkSession: a quiet JVM (log4j at ERROR unless debug, no banner, no
progress bar), launched in its own session so a Ctrl-C reaches the driver first, with workers
that import the driver's modules."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from processor_api.logging import LEVEL_ENV, current_level, debug_enabled
from processor_api.spark.settings import STOP_GRACE_S, RunSettings
from processor_api.spark.spark_home import compiled_spark_home

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")

#: pyspark's daemon with pandas, pyarrow and the epoch function imported before it forks the
#: Python workers, which then share those pages (pyspark_daemon.py). ``--spark-conf
#: spark.python.daemon.module=pyspark.daemon`` goes back to pyspark's own.
DAEMON_MODULE = "processor_api.spark.pyspark_daemon"


#: Spark settings for a quick failover when an executor is lost (``--spark-conf`` wins). The
#: only shuffle of a run is its epoch's rows (one per worker, a few bytes), so a fetch from a
#: lost executor should fail fast (1 retry after 1 s instead of 3 after 5 s each): Spark then
#: recomputes the one tiny map task and the lost workers' epochs start that much sooner.
FAILOVER_CONF = {
    "spark.shuffle.io.maxRetries": "1",
    "spark.shuffle.io.retryWait": "1s",
}


def python_path() -> str:
    """The ``PYTHONPATH`` of the run's Python workers: the driver's modules first."""
    entries = [os.getcwd(), *[p for p in sys.path if p and os.path.isdir(p)]]
    existing = os.environ.get("PYTHONPATH")
    if existing:
        entries.append(existing)
    return os.pathsep.join(dict.fromkeys(entries))


def build_spark_session(settings: RunSettings, app_name: str, worker_count: int) -> Any:
    """A SparkSession for the run (workers can import the driver's modules).

    Quiet unless the log level is debug: Spark's log4j at ERROR from the JVM's start (see
    log4j2.properties; no banner, no WARN lines), no console progress bar, Python warnings
    (pandas' FutureWarning) off in the workers. The level reaches the workers as
    ``$PROCESSOR_API_LOG_LEVEL``. The Python workers are forked from ``DAEMON_MODULE``.
    """
    from pyspark.sql import SparkSession

    workers_path = python_path()
    quiet = not debug_enabled()
    os.environ["PYTHONPATH"] = workers_path
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if quiet:
        os.environ.setdefault("PYTHONWARNINGS", "ignore")  # inherited by local workers
    from processor_api.spark.epochs import local_master

    master = local_master(settings.master, worker_count)  # a worker holds a slot for its epoch
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(settings, worker_count, workers_path, quiet).items():
        builder = builder.config(key, value)
    _launch_jvm_in_own_session(_driver_launch_conf(settings, quiet), quiet)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    return session


def session_conf(
    settings: RunSettings, worker_count: int, workers_path: str, quiet: bool = True
) -> dict[str, str]:
    """The Spark settings of the run's session: the runner's, then ``FAILOVER_CONF``, then
    the user's ``--spark-conf`` (which win), then the executors' JVM options."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(max(1, worker_count)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.executorEnv.PYTHONPATH": workers_path,
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.streaming.stopTimeout": str(int(STOP_GRACE_S * 1000)),
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.showConsoleProgress": "false" if quiet else "true",
        f"spark.executorEnv.{LEVEL_ENV}": current_level(),
        "spark.python.daemon.module": DAEMON_MODULE,
        **FAILOVER_CONF,
    }
    if quiet and "PYTHONWARNINGS" not in settings.spark_conf:
        conf["spark.executorEnv.PYTHONWARNINGS"] = "ignore"
    conf.update(settings.spark_conf)
    executor_options = _executor_java_options(settings, quiet)
    if executor_options is not None:
        conf["spark.executor.extraJavaOptions"] = executor_options
    return conf


#: JVM options of the driver (the executors too with ``local[...]``: one JVM). The JVM no
#: longer sees a record (tasks read their own input in worker hosts): it plans offset ranges,
#: keeps a few rows of GroupState and schedules Spark tasks, so start-up matters more than
#: peak JIT code: C1 only (``TieredStopAtLevel=1``) compiles quickly, and the serial collector
#: starts no GC worker threads on a small machine. The heap starts at 32 MB and gives memory
#: back (the JVM's default initial heap is 1/64 of the machine's memory, and its young
#: generation, sized from it, is touched page by page as the planner allocates: resident
#: memory then grows to it although little stays live). The young generation is held at
#: 16 MB (``-Xmn16m``): it grew to some 38 MB, all resident, for no gain in wall time
#: (bench/workers.py: about 20 MiB less PSS, wall time within 3 %). ``--spark-conf
#: spark.driver.extraJavaOptions=...`` replaces these (an empty value: the JVM's defaults);
#: ``PROCESSOR_API_DRIVER_JAVA_OPTIONS`` does the same from the environment.
DEFAULT_DRIVER_JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms32m -Xmn16m -XX:MinHeapFreeRatio=10 "
    "-XX:MaxHeapFreeRatio=30"
)


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
    logging_options = _logging_options("ERROR" if quiet else "WARN", "OFF" if quiet else "ERROR")
    conf["spark.driver.extraJavaOptions"] = " ".join([*logging_options, options.strip()]).strip()
    return conf


def _logging_options(spark_level: str, failure_level: str) -> list[str]:
    return [
        f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}",
        f"-Dprocessor_api.spark.level={spark_level}",
        f"-Dprocessor_api.spark.failure.level={failure_level}",
    ]


def _executor_java_options(settings: RunSettings, quiet: bool = True) -> str | None:
    """``spark.executor.extraJavaOptions`` for a cluster master (None with ``local[...]``:
    the executors are the driver's JVM).

    Executors on a cluster log to files on their workers (``work/<app>/<executor>/stderr``);
    they get the same log4j2 file (the library is installed at the same path on every node,
    as the Python interpreter is) at ERROR, WARN with debug, and keep task failures with their
    stacks, which is where the operator looks for them. The user's own options follow.
    """
    if settings.master.startswith("local[") or settings.master == "local":
        return None
    user = settings.spark_conf.get("spark.executor.extraJavaOptions", "")
    options = _logging_options("ERROR" if quiet else "WARN", "ERROR")
    return " ".join([*options, user.strip()]).strip()


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
