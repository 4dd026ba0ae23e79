"""Exactly-once plumbing: one transactional producer per task (a task runner on its own; a
worker host's tasks share the worker's, ``runtime/worker_transaction.py``), and the driver's
fence of the workers that lose tasks between runs (:func:`fence_transactional_ids`).

Under ``exactly_once_v2`` each task's work between two commits is one Kafka transaction with
``transactional.id = "<application.id>-<task>"`` (stable per task, so a restarted attempt
fences its zombie). The transaction holds the batch's sink records, its changelog records
and the task's *commit marker* (``kafka/markers.py``), which carries the task metadata after
the batch.

Spark commits its own progress (the epoch and GroupState) only after the epoch's task call
returned, long after the commits inside the epoch. If a transaction committed but Spark did not
(a crash in between), Spark re-runs the epoch with the old GroupState; the task then finds a
newer committed marker, adopts it, and skips every record the marker says was processed:
nothing is produced twice.

A task's epochs may come through different Python workers. A producer is re-initialized
(``init_transactions``, which fences any other instance) whenever the task is (re)built
(:meth:`TransactionalProducers.renew`): a task is rebuilt whenever the state Spark hands over is
not the one this process committed, which is the case after any other instance ran it, whether
or not that instance shares this state directory. ``.txn-owner`` in the task directory also
records the instance under the task lock, so a producer is re-initialized when another process
on the same directory ran the task even without a rebuild. A producer found fenced is dropped
(the guarantee's ``abandon``), never reused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from processor_api.errors import StreamsError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.names import transactional_id
from processor_api.kafka.producer import DEFAULT_MESSAGE_TIMEOUT_MS, DeliveryTracker, make_producer
from processor_api.logging import get_logger

if TYPE_CHECKING:
    from processor_api.kafka.waiting import BrokerWait

_log = get_logger("processor_api.transactions")

INIT_TIMEOUT_S = 30.0
#: With a task's patience: init_transactions waits at most this long per try.
INIT_STEP_S = 5.0
OWNER_FILE = ".txn-owner"


def transaction_step(
    step: str,
    txn_id: str,
    bootstrap_servers: str,
    timeout_s: float | None,
    call: Callable[[], None],
) -> None:
    """Run one transaction call (init/begin/commit); its Kafka error becomes a StreamsError.

    librdkafka reports e.g. ``_TIMED_OUT`` or ``_FENCED`` without saying which producer or
    broker; the error names the step, the transactional id, the broker and the timeout.
    """
    try:
        call()
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        name = error.name() if isinstance(error, KafkaError) else type(exc).__name__
        text = error.str() if isinstance(error, KafkaError) else str(exc)
        hint = ""
        if isinstance(error, KafkaError):
            if error.code() == KafkaError._FENCED or error.fatal():
                hint = " (fatal: another producer with this transactional id took over)"
            elif error.code() == KafkaError._TIMED_OUT:
                hint = " (is the broker reachable and does it support transactions?)"
        waited = f" within {timeout_s:g}s" if timeout_s is not None else ""
        raise StreamsError(
            f"{step} of transactional id {txn_id!r} on {bootstrap_servers} failed{waited}: "
            f"{name}: {text}{hint}"
        ) from exc


def init_transactions(
    producer: Any, txn_id: str, bootstrap_servers: str, patience: BrokerWait | None
) -> None:
    """``init_transactions`` of a new transactional producer, which fences every other
    instance of ``txn_id`` (and aborts its open transaction): one try of ``INIT_TIMEOUT_S``,
    or with ``patience`` tries of ``INIT_STEP_S`` while the broker does not answer."""
    if patience is None:
        transaction_step(
            "init_transactions", txn_id, bootstrap_servers, INIT_TIMEOUT_S,
            lambda: producer.init_transactions(INIT_TIMEOUT_S),
        )  # fmt: skip
        return
    patience.call(  # a timed-out init_transactions may be called again
        "transactional producer",
        f"init_transactions of transactional id {txn_id!r}",
        lambda: transaction_step(
            "init_transactions",
            txn_id,
            bootstrap_servers,
            INIT_STEP_S,
            lambda: producer.init_transactions(INIT_STEP_S),
        ),  # fmt: skip
        step_s=INIT_STEP_S,
    )


class TransactionalProducers:
    """Per worker process: the transactional producer of each task it has run."""

    def __init__(
        self,
        bootstrap_servers: str,
        producer_config: dict | None = None,
        *,
        kafka: KafkaClientConfig | None = None,
        patience: BrokerWait | None = None,
        message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._config = dict(producer_config or {})
        self._kafka = kafka
        self._patience = patience
        self._message_timeout_ms = message_timeout_ms
        self._producers: dict[str, tuple[DeliveryTracker, str]] = {}

    def for_task(self, application_id: str, task_id: str, directory: Path) -> DeliveryTracker:
        """The task's producer, initialized (and so fencing others) if another ran it since.

        Must be called while holding the task lock.
        """
        owner_path = directory / OWNER_FILE
        owner = owner_path.read_text().strip() if owner_path.exists() else None
        cached = self._producers.get(task_id)
        if cached is not None and cached[1] == owner:
            return cached[0]
        if cached is not None:
            self.drop(task_id)
        txn_id = transactional_id(application_id, task_id)
        producer = make_producer(
            self._bootstrap,
            transactional_id=txn_id,
            extra_config=self._config,
            kafka=self._kafka,
            message_timeout_ms=self._message_timeout_ms,
        )
        init_transactions(producer, txn_id, self._bootstrap, self._patience)
        instance = uuid.uuid4().hex[:16]
        directory.mkdir(parents=True, exist_ok=True)
        tmp = owner_path.with_suffix(".tmp")
        tmp.write_text(instance)
        tmp.replace(owner_path)
        tracker = DeliveryTracker(producer)
        self._producers[task_id] = (tracker, instance)
        _log.info("transactional_producer_ready", task=task_id, transactional_id=txn_id)
        return tracker

    def renew(self, task_id: str) -> None:
        """Make the next :meth:`for_task` create and initialize a new producer for the task.

        Called whenever the task is (re)built: the task may have been owned elsewhere since,
        and that owner's ``init_transactions`` fenced the cached producer.
        """
        if task_id in self._producers:
            _log.info("transactional_producer_renewed", task=task_id)
            self.drop(task_id)

    def cached(self, task_id: str) -> DeliveryTracker | None:
        """The task's current producer, if there is one (never creates one)."""
        cached = self._producers.get(task_id)
        return cached[0] if cached is not None else None

    def instance_of(self, task_id: str) -> str:
        """The instance id of the task's current producer (see :meth:`for_task`)."""
        return self._producers[task_id][1]

    def drop(self, task_id: str) -> None:
        """Forget a task's producer (after a fatal error or fencing)."""
        cached = self._producers.pop(task_id, None)
        if cached is not None:
            try:
                cached[0].producer.flush(1)
            except Exception:  # a fenced producer may refuse anything
                pass


def fence_transactional_ids(
    bootstrap_servers: str,
    txn_ids: list[str],
    *,
    kafka: KafkaClientConfig | None = None,
    producer_config: dict | None = None,
    timeout_s: float = INIT_TIMEOUT_S,
) -> None:
    """Fence every producer of ``txn_ids``: an ``init_transactions`` of each aborts its open
    transaction and makes its next produce or commit fail (the driver, for the workers that
    lose tasks between runs: a stalled host of an earlier run cannot commit for them)."""
    for txn_id in txn_ids:
        producer = make_producer(
            bootstrap_servers, transactional_id=txn_id, extra_config=producer_config, kafka=kafka
        )
        transaction_step(
            "init_transactions", txn_id, bootstrap_servers, timeout_s,
            lambda producer=producer: producer.init_transactions(timeout_s),  # type: ignore[misc]
        )  # fmt: skip
        producer.flush(timeout_s)
        _log.info("transactional_id_fenced", transactional_id=txn_id)
