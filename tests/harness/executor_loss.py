"""Executor loss on ``local-cluster[2,N,1024]``: kill -9 one executor JVM in a continuous run.

Each executor has its own state directory (``--state-dir-per-executor``), so a task that moves
finds no local state, as on another machine; stores are snapshotted after every commit
(``state.snapshot.interval.ms=0``, commits every 200 ms), under ``exactly_once_v2``. A first
wave of sales is processed, one executor JVM is killed, a second wave is produced at once, and
the run is stopped when every notification is committed. Sales are placed by Java's default
partitioner (:func:`~tests.harness.folds.product_partition`), as the runtime places the
notifications, so each task writes its own output partition and each committed notification
names the task that wrote it. :class:`LossLayout` sets the partitions (= tasks), the cores per executor,
``num.stream.threads``, an optional steady input alongside the waves, and how long to watch
Spark's executors (REST API) after the kill: when the loss was seen, when the lost tasks wrote
again, when the replacement registered and how many workers each executor ran over time.
Used by ``tests/integration/test_executor_loss.py`` (exactness) and ``bench/executor_loss.py``
(time).

With ``watch_queries`` the run also serves interactive queries (``--query-port 0``), and a key
of every task is looked up over and over from the kill on (``query_watch.py``). The moved
task's restore waits at its start for a gate (``GatedRestoreListener``, the gate removed just
before the kill) until a lookup of the moved task's key has answered 503, so that the time the
task is away is seen whatever the machine's speed; at the end, the committed value of every
watched key is waited for until it equals the reference fold.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from processor_api.kafka.partitioner import default_partition
from processor_api.query import QueryClient, TaskUnavailableError
from processor_api.runtime.host_client import HOST_FILE
from processor_api.spark.session import DEFAULT_DRIVER_JAVA_OPTIONS
from processor_api.store_queries import open_store_reader
from tests.harness.folds import (
    Comparison,
    Sale,
    compare,
    expected_notifications,
    fold_totals,
    make_sales,
    notifications_by_product,
    produce_sales,
    product_partition,
)
from tests.harness.local_cluster import executor_dirs, remove_executor_dirs
from tests.harness.processes import CliRun, cli_args
from tests.harness.query_watch import Lookup, QueryWatch
from tests.harness.topics import TopicReader, TopicRecord, committed_records, uid
from tests.integration.query_topologies import restore_gate

PARTITIONS = 2
SALES = "topologies.sales_aggregation:build_topology"
STORE = "PRODUCT_AGGREGATED_SALES"
LOCAL_CLUSTER = "local-cluster[2,1,1024]"
GATED_RESTORES = "tests.integration.query_topologies:GatedRestoreListener"


@dataclass
class MoveLookups:
    """The lookups of a run with ``watch_queries``."""

    #: the tasks the killed executor held, and the watched key of every task
    moved: list[str]
    keys: dict[str, str]  # key -> its task
    killed_at: float  # monotonic
    lookups: list[Lookup]
    #: every watched key's committed value once every notification was committed
    final: dict[str, Any]


#: the driver's log line when Spark's scheduler has seen an executor go (log4j2 pattern
#: ``yy/MM/dd HH:mm:ss``, with ``.SSS`` under ``LossLayout.spark_log4j``; the JVM's time zone:
#: UTC here)
LOST_EXECUTOR = re.compile(
    r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d{3})?) ERROR \S+: Lost executor (\S+)"
)


@dataclass(frozen=True)
class LossLayout:
    """The shape of one run: two executors of ``cores`` cores, ``partitions`` input
    partitions (one task each), ``threads`` workers per executor (None: Spark's default, one
    per core), ``products`` products (at least one per partition), ``rate_per_s`` sales a
    second produced after the second wave (0: only the two waves) and ``observe_s`` seconds after
    the kill for which Spark's executors are watched (0: not watched; the UI stays off)."""

    partitions: int = PARTITIONS
    cores: int = 1
    threads: int | None = None
    products: int = 12
    rate_per_s: int = 0
    observe_s: float = 0.0
    #: a log4j2 configuration for the driver and the executors instead of the run's own (the
    #: bench's ``--scheduler-log``: Spark's scheduler lines, with milliseconds)
    spark_log4j: Path | None = None

    @property
    def master(self) -> str:
        return f"local-cluster[2,{self.cores},1024]"


@dataclass
class Watch:
    """What the watched run saw, in wall-clock seconds (``time.time()``) where not said."""

    killed_at: float
    killed_executor: str
    #: the executor ids and their running workers (Spark tasks) just before the kill
    before: dict[str, int]
    #: the first REST sample without the killed executor among the active ones
    loss_seen_at: float | None = None
    #: the driver's ``Lost executor`` log line (whole seconds)
    loss_logged_at: float | None = None
    #: per task that restored after the kill (it moved), the executor it restored on first
    moved_to: dict[str, str] = field(default_factory=dict)
    #: per moved task, when its first notification of the input after the kill was seen
    moved_first_output_at: dict[str, float | None] = field(default_factory=dict)
    replacement: str | None = None
    replacement_registered_at: float | None = None
    #: the first sample from which on the replacement ran as many workers as before the kill
    replacement_share_at: float | None = None
    #: (seconds after the kill, {executor: running workers}) every 0.5 s
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    #: executor id -> its log events (restores, epochs) parsed from its stderr
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the tasks the killed executor's workers held just before the kill
    lost_tasks: list[str] = field(default_factory=list)
    #: per task, the longest time without a new committed notification from the kill to the
    #: end of the watch (seconds; ``OutputGaps``, sampled every 0.25 s)
    longest_output_gap_s: dict[str, float] = field(default_factory=dict)

    def after_loss_seen(self, at: float | None) -> float | None:
        """Seconds from the loss being seen (REST sample) to ``at``."""
        if at is None or self.loss_seen_at is None:
            return None
        return round(at - self.loss_seen_at, 2)


@dataclass
class ExecutorLoss:
    """What one executor-loss run saw."""

    sales: list[Sale]
    committed: list[TopicRecord]
    aborted: list[TopicRecord]
    store: dict[Any, Any]
    #: seconds from the kill until every task had a committed notification of the input
    #: produced after the kill (the moved tasks included)
    first_outputs_after_kill_s: float
    #: seconds from the kill until every notification was committed
    complete_after_kill_s: float
    #: executor log lines of restores that started from a snapshot
    restores_from_snapshots: list[str]
    #: with ``watch_queries``: the lookups made from the kill on
    queries: MoveLookups | None = None
    #: what watching the executors saw (``LossLayout.observe_s`` > 0)
    watch: Watch | None = None

    def comparison(self) -> Comparison:
        """The committed notifications and final stores against the reference fold."""
        return compare(
            expected_notifications(self.sales, threshold=0),
            notifications_by_product(self.committed),
            "exactly_once_v2",
            fold_totals(self.sales),
            self.store,
            threshold=0,
        )


class ExecutorLossFailed(AssertionError):
    """The run ended, or did not get there in time."""


def executor_pids(marker: str) -> list[int]:
    """Executor JVMs started with ``marker`` on their command line."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        backend = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"
        if marker.encode() in argv and backend in argv:
            pids.append(int(entry.name))
    return sorted(pids)


def _committed(bootstrap: str, topic: str) -> tuple[list[TopicRecord], list[TopicRecord]]:
    return committed_records(bootstrap, topic)


def _complete(
    committed: tuple[list[TopicRecord], list[TopicRecord]], total: int
) -> tuple[list[TopicRecord], list[TopicRecord]] | None:
    return committed if len(committed[0]) >= total else None


def _wait_until(what: str, done: Any, run: CliRun, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = done()
        if result:
            return result
        if not run.is_alive():
            raise ExecutorLossFailed(f"the run ended before {what}; {run.tail()}")
        if time.monotonic() > deadline:
            raise ExecutorLossFailed(f"no {what} within {timeout_s:g}s; {run.tail()}")
        time.sleep(0.2)


def executor_id_of(pid: int) -> str:
    """The Spark executor id of the executor JVM ``pid`` (its ``--executor-id``)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index("--executor-id") + 1]


def tasks_held(state_dir: Path, executor: str, app_id: str) -> list[str]:
    """The tasks a worker host of ``executor`` holds now (their directories name a host)."""
    app_dir = state_dir / f"executor-{executor}" / app_id
    return sorted(p.parent.name for p in app_dir.glob(f"*_*/{HOST_FILE}"))


def keys_by_task(sales: list[Sale], partitions: int) -> dict[str, str]:
    """A product of ``sales`` for every task (by the default partitioner): key -> task."""
    keys: dict[str, str] = {}
    for product in sorted({s.product for s in sales}):
        task = f"0_{default_partition(product.encode(), partitions)}"
        if task not in keys.values():
            keys[product] = task
    return keys


def _committed_values(client: QueryClient, keys: list[str]) -> dict[str, Any] | None:
    try:
        entries = {key: client.get(STORE, key, committed=True) for key in keys}
    except TaskUnavailableError:
        return None
    return {key: None if e is None else e["value"] for key, e in entries.items()}


def free_port() -> int:
    """A TCP port nothing listens on now (for Spark's UI)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spark_executors(port: int) -> list[dict[str, Any]] | None:
    """Spark's executor list from the UI's REST API (the driver left out), or None while it
    does not answer."""
    base = f"http://127.0.0.1:{port}/api/v1/applications"
    try:
        with urllib.request.urlopen(base, timeout=2) as answer:
            app = json.load(answer)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/executors", timeout=2) as answer:
            return [e for e in json.load(answer) if e["id"] != "driver"]
    except (OSError, ValueError, IndexError, KeyError):
        return None


def running_workers(port: int) -> dict[str, int]:
    """Active executor id -> Spark tasks (workers) running on it now."""
    return {e["id"]: e["activeTasks"] for e in spark_executors(port) or [] if e["isActive"]}


def log_events(stderr: str, names: set[str]) -> list[dict[str, Any]]:
    """The JSON log events called one of ``names`` in an executor's stderr, with ``at``: the
    event's log time in epoch seconds."""
    events = []
    for line in stderr.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") in names:
            stamp = event.get("log_timestamp") or event.get("timestamp")
            event["at"] = datetime.fromisoformat(str(stamp)).timestamp()
            events.append(event)
    return events


def lost_executor_logged(driver_log: str, executor: str) -> float | None:
    """When the driver logged ``Lost executor <executor>`` (epoch seconds; whole seconds unless
    the log has milliseconds)."""
    for line in driver_log.splitlines():
        match = LOST_EXECUTOR.match(line)
        if match and match.group(2) == executor:
            shape = "%y/%m/%d %H:%M:%S.%f" if "." in match.group(1) else "%y/%m/%d %H:%M:%S"
            stamp = datetime.strptime(match.group(1), shape)
            return stamp.replace(tzinfo=UTC).timestamp()
    return None


class SteadySales(threading.Thread):
    """Produces ``rate_per_s`` sales a second (in batches every 0.5 s) until stopped; the
    sales produced are in :attr:`sales`."""

    def __init__(self, bootstrap: str, topic: str, layout: LossLayout) -> None:
        super().__init__(name="steady-sales", daemon=True)
        self._servers, self._topic, self._layout = bootstrap, topic, layout
        self._stopping = threading.Event()
        self.sales: list[Sale] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        batch = max(1, self._layout.rate_per_s // 2)
        seed = 43
        try:
            while not self._stopping.wait(0.5):
                start_ts = 1_900_000_000_000 + len(self.sales)
                sales = make_sales(batch, self._layout.products, seed=seed, start_ts=start_ts)
                produce_sales(self._servers, self._topic, sales, self._layout.partitions)
                self.sales.extend(sales)
                seed += 1
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by stop()
            self.error = exc

    def stop(self) -> list[Sale]:
        """Stop producing; the sales produced (raises what stopped it early, if anything)."""
        self._stopping.set()
        self.join(60)
        if self.error is not None:
            raise ExecutorLossFailed(f"the steady input failed: {self.error!r}")
        return self.sales


class OutputGaps(threading.Thread):
    """Tails the output topic (``read_committed``) and keeps, per task (each writes its own
    output partition), the longest time from the kill on without a new committed record
    (those committed before the kill, ``before``, left out), sampled every 0.25 s; the gap
    still open at :meth:`stop` counts too."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        killed_at: float,
        before: set[tuple[int, int]],
    ) -> None:
        super().__init__(name="output-gaps", daemon=True)
        self._reader = TopicReader(bootstrap, topic, isolation="read_committed")
        self._partitions, self._killed_at, self._before = partitions, killed_at, before
        self._stopping = threading.Event()
        self.longest: dict[str, float] = {}

    def run(self) -> None:
        with self._reader:
            counts: dict[int, int] = {}
            last: dict[int, float] = dict.fromkeys(range(self._partitions), self._killed_at)
            while not self._stopping.wait(0.25):
                now = time.time()
                seen: dict[int, int] = {}
                for record in self._reader.records:
                    if (record.partition, record.offset) not in self._before:
                        seen[record.partition] = seen.get(record.partition, 0) + 1
                for partition in range(self._partitions):
                    if seen.get(partition, 0) != counts.get(partition, 0):
                        counts[partition] = seen.get(partition, 0)
                        self._gap(partition, now - last[partition])
                        last[partition] = now
            now = time.time()
            for partition in range(self._partitions):
                self._gap(partition, now - last[partition])

    def _gap(self, partition: int, gap_s: float) -> None:
        task = f"0_{partition}"
        self.longest[task] = round(max(self.longest.get(task, 0.0), gap_s), 2)

    def stop(self) -> dict[str, float]:
        """Stop; the longest gap per task."""
        self._stopping.set()
        self.join(30)
        return dict(sorted(self.longest.items()))


class ExecutorWatcher(threading.Thread):
    """Samples Spark's running workers per executor every 0.5 s into ``watch.timeline``."""

    def __init__(self, port: int, watch: Watch) -> None:
        super().__init__(name="executor-watch", daemon=True)
        self._port, self.watch = port, watch
        self._stopping = threading.Event()

    def run(self) -> None:
        watch = self.watch
        while not self._stopping.is_set():
            now = time.time()
            running = running_workers(self._port)
            if running:
                watch.timeline.append((round(now - watch.killed_at, 2), running))
                if watch.loss_seen_at is None and watch.killed_executor not in running:
                    watch.loss_seen_at = now
                fresh = sorted(set(running) - set(watch.before))
                if fresh and watch.replacement is None:
                    watch.replacement, watch.replacement_registered_at = fresh[0], now
                wanted = watch.before[watch.killed_executor]
                if (
                    watch.replacement is not None
                    and watch.replacement_share_at is None
                    and running.get(watch.replacement, 0) >= wanted
                ):
                    watch.replacement_share_at = now
            self._stopping.wait(0.5)

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)


def _task_of(record: TopicRecord, partitions: int) -> str:
    """The task (``<sub-topology>_<partition>``) whose notification ``record`` is."""
    return f"0_{product_partition(record.key.decode(), partitions)}"


def _all_running(port: int, workers: int) -> dict[str, int] | None:
    running = running_workers(port)
    return running if len(running) == 2 and sum(running.values()) == workers else None


def run_executor_loss(
    kafka: Any,
    tmp_path: Path,
    layout: LossLayout | None = None,
    *,
    watch_queries: bool = False,
) -> ExecutorLoss:
    """One run (see the module docstring) of ``layout`` (default: 2 partitions, one core per
    executor, not watched)."""
    layout = layout or LossLayout()
    bootstrap = kafka.bootstrap_servers
    run_id = uid()
    input_topic, output_topic = f"loss-in-{run_id}", f"loss-out-{run_id}"
    # the restore gate is found by the application id: no dash in it
    app_id = f"loss{run_id}" if watch_queries else f"loss-{run_id}"
    kafka.create_topic(input_topic, layout.partitions)
    kafka.create_topic(output_topic, layout.partitions)
    marker = f"-Dprocessor_api.test.run={run_id}"
    topology_args = {"input_topic": input_topic, "output_topic": output_topic, "threshold": 0}
    config = {"state.snapshot.interval.ms": "0", "commit.interval.ms": "200"}
    if layout.threads is not None:
        config["num.stream.threads"] = str(layout.threads)
    port = free_port() if layout.observe_s > 0 else None
    confs = [] if port is None else ["spark.ui.enabled=true", f"spark.ui.port={port}"]
    executor_options = marker
    if layout.spark_log4j is not None:
        # a later -D wins: after the run's own log4j2 file on both command lines
        log4j = f"-Dlog4j2.configurationFile={layout.spark_log4j.resolve().as_uri()}"
        executor_options = f"{marker} {log4j}"
        confs += [f"spark.driver.extraJavaOptions={DEFAULT_DRIVER_JAVA_OPTIONS} {log4j}"]
    gate = restore_gate(app_id)
    queries_flags: list[str] = []
    if watch_queries:
        config["state.restore.listener"] = GATED_RESTORES
        queries_flags = ["--query-port", "0"]
        gate.touch()  # the first restores go on; the gate is removed before the kill
    args = cli_args(
        SALES,
        bootstrap,
        app_id,
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args=topology_args,
        config=config,
        extra=[
            "--epoch-interval",
            "5",
            "--state-dir-per-executor",
            "--spark-conf",
            f"spark.executor.extraJavaOptions={executor_options}",
            # the run sizes its workers from the executors registered when its query starts:
            # Spark waits for both (up to 30 s) only when it knows how many cores to expect
            "--spark-conf",
            f"spark.cores.max={2 * layout.cores}",
            "--spark-conf",
            "spark.scheduler.minRegisteredResourcesRatio=1.0",
            *(arg for conf in confs for arg in ("--spark-conf", conf)),
            *queries_flags,
        ],
    )
    args[args.index("local[2]")] = layout.master
    placed = {
        product_partition(f"product-{i:04d}", layout.partitions) for i in range(layout.products)
    }
    if len(placed) < layout.partitions:
        raise ValueError(
            f"LossLayout: {layout.products} products leave partitions of "
            f"{layout.partitions} without input ({len(placed)} get some): give more products"
        )
    first = make_sales(600, layout.products, seed=41)
    second = make_sales(600, layout.products, seed=42, start_ts=1_800_000_000_000)
    tasks = {f"0_{p}" for p in range(layout.partitions)}
    run = CliRun(args, tmp_path / "run.log").start()
    query_watch: QueryWatch | None = None
    steady = SteadySales(bootstrap, input_topic, layout) if layout.rate_per_s else None
    watcher: ExecutorWatcher | None = None
    gaps: OutputGaps | None = None
    try:
        produce_sales(bootstrap, input_topic, first, layout.partitions)
        _wait_until(
            "the first wave's outputs",
            lambda: len(_committed(bootstrap, output_topic)[0]) >= len(first),
            run,
            240,
        )
        executors = executor_pids(marker)
        if len(executors) != 2:
            raise ExecutorLossFailed(f"expected 2 executor JVMs with {marker}: {executors}")
        workers = 2 * (layout.threads or layout.cores)
        before_workers: dict[str, int] = (
            _wait_until("every worker running", lambda: _all_running(port, workers), run, 120)
            if port is not None
            else {}
        )
        victim = executors[0]
        victim_id = str(executor_id_of(victim))  # read while it lives: /proc goes with it
        lost_tasks = tasks_held(tmp_path / "state", victim_id, app_id)
        before = {(r.partition, r.offset) for r in _committed(bootstrap, output_topic)[0]}
        if watch_queries:
            url = run.wait_event("query_server_started", 60).event["url"]
            moved = tasks_held(tmp_path / "state", victim_id, app_id)
            if not moved:
                raise ExecutorLossFailed(f"the executor to kill holds no task; {run.tail()}")
            keys = keys_by_task(first, layout.partitions)
            moved_keys = [key for key, task in keys.items() if task in moved]
            gate.unlink()
        os.kill(victim, signal.SIGKILL)
        killed_at_wall, killed_at = time.time(), time.monotonic()
        if watch_queries:
            query_watch = QueryWatch(url, STORE, sorted(keys)).start()
        if port is not None:
            if victim_id not in before_workers:
                raise ExecutorLossFailed(
                    f"killed executor {victim_id} is not among Spark's {before_workers}"
                )
            watch = Watch(killed_at_wall, victim_id, before_workers, lost_tasks=lost_tasks)
            watcher = ExecutorWatcher(port, watch)
            watcher.start()
            gaps = OutputGaps(bootstrap, output_topic, layout.partitions, killed_at_wall, before)
            gaps.start()
        produce_sales(bootstrap, input_topic, second, layout.partitions)
        if query_watch is not None:
            _wait_until(
                "a 503 for a key of the moved task",
                lambda: all(query_watch.unavailable(key) for key in moved_keys),
                run,
                120,
            )
            gate.touch()  # the moved task's restore goes on
        if steady is not None:
            # after the second wave, so that each product's sales are in list order
            steady.start()
        first_new: dict[str, float] = {}

        def every_task_has_new_output() -> bool:
            kept = _committed(bootstrap, output_topic)[0]
            now = time.time()
            for record in kept:
                if (record.partition, record.offset) not in before:
                    first_new.setdefault(_task_of(record, layout.partitions), now)
            return set(first_new) == tasks

        _wait_until("a new output of every task", every_task_has_new_output, run, 240)
        first_outputs_s = time.monotonic() - killed_at
        if watcher is not None:
            time.sleep(max(0.0, killed_at + layout.observe_s - time.monotonic()))
            watcher.stop()
            if gaps is not None:
                watcher.watch.longest_output_gap_s = gaps.stop()
        sales = first + second + (steady.stop() if steady is not None else [])
        kept, aborted = _wait_until(
            "every notification",
            lambda: _complete(_committed(bootstrap, output_topic), len(sales)),
            run,
            240,
        )
        complete_s = time.monotonic() - killed_at
        queries = None
        if query_watch is not None:
            totals = fold_totals(sales)
            client = QueryClient(url)

            def final_values() -> dict[str, Any] | None:
                values = _committed_values(client, sorted(keys))
                return values if values == {k: totals[k] for k in keys} else None

            final = _wait_until("the final totals in the watched lookups", final_values, run, 60)
            queries = MoveLookups(moved, keys, killed_at, query_watch.stop(), final)
        run.signal(signal.SIGTERM)
        if run.wait(120) != 0:
            raise ExecutorLossFailed(f"the run did not stop cleanly; {run.tail()}")
        stderr = {
            directory.name: (directory / "stderr").read_text(errors="replace")
            for directory in executor_dirs(marker)
        }
        for name, text in stderr.items():  # kept beside run.log: Spark's work dirs go below
            (tmp_path / f"executor-{name}.stderr").write_text(text)
        if watcher is not None:
            watch = watcher.watch
            names = {"restore_start", "restore_done", "task_taken_over", "epoch_abandoned"}
            watch.events = {name: log_events(text, names) for name, text in stderr.items()}
            # a task restores when it starts on an executor without its state (a first start
            # restores nothing): after the kill, those are the tasks that moved
            restores = sorted(
                (e["at"], f"0_{e['partition']}", executor)
                for executor, events in watch.events.items()
                for e in events
                if e["event"] == "restore_start" and e["at"] > watch.killed_at
            )
            for _, task, executor in restores:
                watch.moved_to.setdefault(task, executor)
            watch.moved_first_output_at = {
                task: first_new.get(task) for task in sorted(watch.moved_to)
            }
            watch.loss_logged_at = lost_executor_logged(
                (tmp_path / "run.log").read_text(errors="replace"), watch.killed_executor
            )
    finally:
        if query_watch is not None:
            query_watch.stop()
        gate.unlink(missing_ok=True)
        if watcher is not None:
            watcher.stop()
        if gaps is not None and gaps.is_alive():
            gaps.stop()
        if steady is not None and steady.is_alive():
            steady.stop()
        if run.is_alive():
            run.kill9()
        remove_executor_dirs(marker)
    reader = open_store_reader(bootstrap, app_id, SALES, STORE, topology_kwargs=topology_args)
    return ExecutorLoss(
        sales=sales,
        committed=kept,
        aborted=aborted,
        store={entry.key: entry.value for _, entry in reader.read()},
        first_outputs_after_kill_s=first_outputs_s,
        complete_after_kill_s=complete_s,
        restores_from_snapshots=[
            line
            for text in stderr.values()
            for line in text.splitlines()
            if "restore_start" in line and "snapshot_offset" in line
        ],
        queries=queries,
        watch=watcher.watch if watcher is not None else None,
    )
