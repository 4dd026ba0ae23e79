"""The setup check: every processor of a topology built and its ``init()`` run, on the driver.

``run-topology`` runs it before it contacts the broker or starts Spark
(``TopologyRunner.prepare``), so a mistake in ``init()`` stops the run at once with the error
the running task would raise, instead of failing the first epoch on an executor.

The check builds the tasks the way the runtime does (:class:`Task`, and :class:`GlobalTask`
for global stores), one per sub-topology on partition 0 as the test driver does: real stores
of the declared kinds in a temporary directory, a collector that drops what the sinks send,
schedules registered and never fired. Each processor's ``init()`` runs against a checking
context, then every ``close()``; the directory is deleted.

Which failures stop the run: the errors the context's own calls raise (an unknown or
unconnected store, a bad punctuation interval, start time or type, a forward to an unknown
child or of something else than a :class:`Record`, what a global processor may not do), a
:class:`StoreError` (a store used wrongly, e.g. a write to a global store from a task), and an
``AttributeError`` on a store object (a store used as another kind). They are the
runtime's setup errors, raised again as :class:`SetupCheckError`. Anything else ``init()``
raises is the processor's own code, which may need the running environment (a service only
the executors reach, a file on their disks): it is logged as a warning
(``setup_check_init_failed``) and the run goes on, its executors running ``init()`` again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from processor_api.config import StreamsConfig
from processor_api.engine.context import InitErrorHandler, ProcessorContextImpl
from processor_api.engine.global_task import GLOBAL_TASK_ID, GlobalProcessorContext, GlobalTask
from processor_api.engine.nodes import ProcessorNode
from processor_api.engine.records import OutputRecord
from processor_api.engine.task import Task
from processor_api.errors import ProcessingError, SetupCheckError, StoreError, StreamsError
from processor_api.logging import get_logger
from processor_api.processor import (
    Cancellable,
    ProcessorContext,
    PunctuationType,
    Record,
    _check_timestamp,
)
from processor_api.state.builder import store_factory_in
from processor_api.topology import Topology
from processor_api.topology.nodes import SubTopology

_log = get_logger("processor_api.setup_check")

#: Where a setup error was found, after the error's own message.
FOUND = "found by the setup check on the driver, before the run started"


@dataclass(frozen=True)
class InitFailure:
    """A failure of a processor's own code during the check (logged, not fatal): ``phase``
    is ``"supplier"``, ``"init"`` or ``"close"``."""

    task_id: str
    processor: str | None
    phase: str
    error: BaseException


class SetupCalls:
    """The errors the checking contexts' calls raised: the runtime's own setup errors."""

    def __init__(self) -> None:
        self._raised: list[BaseException] = []

    @contextmanager
    def call(self) -> Iterator[None]:
        """Remember whatever the enclosed context call raises."""
        try:
            yield
        except Exception as exc:
            self._raised.append(exc)
            raise

    def caused(self, error: BaseException) -> bool:
        """Whether ``error`` is, or was raised while handling, an error of a context call."""
        seen: set[int] = set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if any(current is raised for raised in self._raised):
                return True
            current = current.__cause__ or current.__context__
        return False


class CheckingContext(ProcessorContextImpl):
    """A task processor's context that remembers the errors its own calls raise.

    A forward is checked (a :class:`Record`, a known child) before it is delivered, so an
    error of a child's ``process()`` is the child's, not a setup error.
    """

    def __init__(self, task: Task, node: ProcessorNode, calls: SetupCalls) -> None:
        super().__init__(task, node)
        self._calls = calls

    def forward(self, record: Record, child: str | None = None) -> None:
        """Check the record and the child, then deliver as the task does."""
        with self._calls.call():
            self._task.graph.check_forward(self._node, record, child)
        super().forward(record, child)

    def forward_all(
        self, entries: Iterable[tuple[Any, Any]], timestamp: int, child: str | None = None
    ) -> int:
        """One checked :meth:`forward` per entry (the documented effect, without the fast
        path)."""
        with self._calls.call():
            _check_timestamp(timestamp)
        return ProcessorContext.forward_all(self, entries, timestamp, child)

    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
        *,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Register the schedule as the task does (it never fires during the check)."""
        with self._calls.call():
            return super().schedule(interval, type, punctuator, start_time=start_time)

    def get_state_store(self, name: str) -> Any:
        """The store, as the task hands it out."""
        with self._calls.call():
            return super().get_state_store(name)


class CheckingGlobalContext(GlobalProcessorContext):
    """A global processor's context that remembers the errors its own calls raise."""

    def __init__(self, task: GlobalTask, processor_name: str, calls: SetupCalls) -> None:
        super().__init__(task, processor_name)
        self._calls = calls

    def forward(self, record: Record, child: str | None = None) -> None:
        """Refused, as at run time."""
        with self._calls.call():
            super().forward(record, child)

    def schedule(
        self,
        interval: int | timedelta,
        type: PunctuationType = PunctuationType.STREAM_TIME,
        punctuator: Callable[[int], None] | None = None,
        *,
        start_time: datetime | int | None = None,
    ) -> Cancellable:
        """Refused, as at run time."""
        with self._calls.call():
            return super().schedule(interval, type, punctuator, start_time=start_time)

    def get_state_store(self, name: str) -> Any:
        """The global store, as at run time."""
        with self._calls.call():
            return super().get_state_store(name)


class _DroppingCollector:
    """Where the check's sinks send: nowhere."""

    def send(self, record: OutputRecord) -> None:
        """Drop the record."""

    def partition_count(self, topic: str) -> int:
        """One partition (what a custom partitioner is told during the check)."""
        return 1


class _Check:
    """One run of the check: its tasks, what failed, and the temporary directory."""

    def __init__(self, topology: Topology, config: StreamsConfig, state_dir: Path) -> None:
        self.topology = topology
        self.config = config
        self.state_dir = state_dir
        self.calls = SetupCalls()
        self.setup_errors: list[SetupCheckError] = []
        self.failures: list[InitFailure] = []
        self.global_task: GlobalTask | None = None
        self.tasks: list[Task] = []

    def build(self) -> None:
        """The global task, then one task per sub-topology (partition 0)."""
        if self.topology.global_stores():
            self.global_task = self._built(GLOBAL_TASK_ID, self._global_task)
            if self.global_task is None:
                return  # without its global stores no task processor can be checked
        for sub in self.topology.subtopologies():
            task = self._built(sub.task_id(0), partial(self._task, sub))
            if task is not None:
                self.tasks.append(task)

    def _global_task(self) -> GlobalTask:
        calls = self.calls
        return GlobalTask(
            global_stores=self.topology.global_stores(),
            store_factory=store_factory_in(self.state_dir / "global"),
            config=self.config,
            context_factory=lambda task, name: CheckingGlobalContext(task, name, calls),
        )

    def _task(self, sub: SubTopology) -> Task:
        calls = self.calls
        return Task(
            subtopology=sub,
            partition=0,
            store_builders=self.topology.store_builders,
            store_factory=store_factory_in(self.state_dir / sub.task_id(0)),
            collector=_DroppingCollector(),
            config=self.config,
            global_task=self.global_task,
            context_factory=lambda task, node: CheckingContext(task, node, calls),
        )

    def _built(self, task_id: str, build: Callable[[], Any]) -> Any:
        """``build()``, or None if a processor's supplier raised (a warning: it may need the
        running environment); a supplier that returns no Processor stops the run."""
        try:
            return build()
        except StreamsError as error:
            raise SetupCheckError(f"{error} -- {FOUND}: task {task_id}") from error
        except Exception as exc:
            self._warn(InitFailure(task_id, None, "supplier", exc))
            return None

    def initialize(self) -> None:
        """Every ``init()``: the global processors first, as the runtime does."""
        if self.global_task is not None:
            self.global_task.initialize(self._on_init_error(GLOBAL_TASK_ID))
        for task in self.tasks:
            task.initialize(self._on_init_error(task.task_id))

    def _on_init_error(self, task_id: str) -> InitErrorHandler:
        def handle(processor: str, error: StreamsError, raised: Exception) -> None:
            if (
                self.calls.caused(raised)
                or isinstance(raised, StoreError)
                or self._store_misused(raised)
            ):
                self.setup_errors.append(
                    SetupCheckError(
                        f"{error} -- {FOUND}: init() of processor {processor!r}, task {task_id}"
                    )
                )
                self.setup_errors[-1].__cause__ = error
            else:
                self._warn(InitFailure(task_id, processor, "init", error))

        return handle

    def _store_misused(self, raised: Exception) -> bool:
        """An ``AttributeError`` on one of the stores: a store used as another kind."""
        if not isinstance(raised, AttributeError) or raised.obj is None:
            return False
        tasks: list[Task | GlobalTask] = [*self.tasks]
        if self.global_task is not None:
            tasks.append(self.global_task)
        return any(raised.obj is stack.store for task in tasks for stack in task.stores.values())

    def close(self) -> None:
        """Every task's ``close()`` (processors, then stores); failures are warnings."""
        closing: list[tuple[str, Task | GlobalTask]] = [(t.task_id, t) for t in self.tasks]
        if self.global_task is not None:
            closing.append((GLOBAL_TASK_ID, self.global_task))
        for task_id, task in closing:
            try:
                task.close()
            except Exception as exc:  # noqa: BLE001 - the processor's own close(): a warning
                processor = exc.processor if isinstance(exc, ProcessingError) else None
                self._warn(InitFailure(task_id, processor, "close", exc))

    def _warn(self, failure: InitFailure) -> None:
        self.failures.append(failure)
        _log.warning(
            "setup_check_init_failed",
            task=failure.task_id,
            processor=failure.processor,
            phase=failure.phase,
            error=f"{type(failure.error).__name__}: {failure.error}",
            detail="not a setup error of the runtime (it may need the running environment): "
            "the run goes on, and the executors run it again",
        )


def check_setup(topology: Topology, config: StreamsConfig) -> list[InitFailure]:
    """Build every processor of ``topology`` and run its ``init()`` and ``close()`` on this
    machine, without a broker or Spark (see the module docs).

    Raises :class:`SetupCheckError` (a :class:`~processor_api.errors.TopologyError`) for the
    runtime's setup errors; returns the failures of the processors' own code, each logged as
    a ``setup_check_init_failed`` warning.
    """
    with tempfile.TemporaryDirectory(prefix="processor-api-setup-check-") as directory:
        check = _Check(topology, config, Path(directory))
        try:
            check.build()
            check.initialize()
        finally:
            check.close()
    if check.setup_errors:
        first = check.setup_errors[0]
        if len(check.setup_errors) > 1:
            more = "; ".join(str(error) for error in check.setup_errors[1:])
            raise SetupCheckError(f"{first}; and {more}") from first.__cause__
        raise first
    _log.info(
        "setup_checked",
        tasks=len(check.tasks) + (check.global_task is not None),
        processors_failed=len(check.failures),
    )
    return check.failures
