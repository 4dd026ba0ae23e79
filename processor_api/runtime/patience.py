"""How long a task waits for the broker: Kafka Streams' ``task.timeout.ms`` (KIP-572).

A task that cannot reach the broker (an outage, a broker restarting, a network cut) does not
fail at the first timeout of a client call: :class:`Patience` calls again, in short steps,
until the call succeeds or ``task.timeout.ms`` ran out since the wait began. Then the task
fails with a :class:`~processor_api.errors.TaskTimeoutError` of one line naming the task, the
broker, the client role and what it waited for. A wait longer than :data:`STALL_WARNING_S` is
reported at once with a warning naming the same (``task_waiting_for_broker``), and its end
with ``task_broker_wait_over``: a stalled task is never silent.

Only errors that say the broker did not answer are retried (:func:`is_transient`); any other
error is raised at once. Between steps the wait checks :attr:`Patience.interrupted`: a run
that stops, or a task that moves elsewhere, ends the wait with
:class:`~processor_api.errors.WaitInterrupted` instead of waiting the outage out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from processor_api.errors import (
    BrokerUnavailableError,
    StalledReadError,
    TaskTimeoutError,
    WaitInterrupted,
)
from processor_api.logging import get_logger

T = TypeVar("T")

#: Kafka Streams' default ``task.timeout.ms``.
DEFAULT_TASK_TIMEOUT_MS = 300_000
#: A wait for the broker this long is reported with a warning (well within a minute).
STALL_WARNING_S = 30.0
#: A blocking client call waits at most this long per step (then the wait looks at its
#: deadline and at :attr:`Patience.interrupted` again).
STEP_S = 1.0
#: A call that failed at once is tried again after this pause (no busy loop).
RETRY_PAUSE_S = 0.2

#: librdkafka codes that mean "the broker did not answer (yet)".
_TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)


def _kafka_error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the broker did not answer.

    A fatal error, one that requires aborting the transaction, a fenced producer or any
    error the broker answered with (a missing topic, an authorization failure) is not.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BrokerUnavailableError | StalledReadError):
            return True
        error = _kafka_error(current)
        if error is not None:
            if error.fatal() or error.txn_requires_abort():
                return False
            return error.code() in _TRANSIENT_CODES or error.retriable()
        current = current.__cause__ or current.__context__
    return False


class Patience:
    """A task's waits for the broker, bounded by ``task.timeout.ms`` (see the module docs).

    ``interrupted(waited_s)`` returns why a wait must end now (the run stops, the task
    moved), or None; the epoch loop sets it for the time of an epoch.
    """

    def __init__(self, task_id: str, bootstrap_servers: str, timeout_ms: int) -> None:
        self.task_id = task_id
        self.bootstrap_servers = bootstrap_servers
        self.timeout_ms = timeout_ms
        self.interrupted: Callable[[float], str | None] = lambda waited_s: None
        self._log = get_logger("processor_api.patience", task=task_id)
        self._observed: tuple[str, float] | None = None  # (role, since) being reported

    @property
    def timeout_s(self) -> float:
        """``task.timeout.ms`` in seconds."""
        return self.timeout_ms / 1000

    def until(
        self,
        role: str,
        what: str | Callable[[], str],
        attempt: Callable[[float], bool],
        *,
        step_s: float = STEP_S,
    ) -> None:
        """Call ``attempt(step timeout)`` until it returns True (done).

        Transient errors it raises are retried; others are raised. Raises
        :class:`TaskTimeoutError` once ``task.timeout.ms`` ran out, :class:`WaitInterrupted`
        when :attr:`interrupted` says so.
        """
        started = time.monotonic()
        deadline = started + self.timeout_s
        warned = False
        last_error: BaseException | None = None
        while True:
            try:
                if attempt(max(0.001, min(step_s, deadline - time.monotonic()))):
                    if warned:
                        self._over(role, what, started)
                    return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                last_error = exc
                time.sleep(RETRY_PAUSE_S)
            now = time.monotonic()
            if now >= deadline:
                raise TaskTimeoutError(self._line(role, what, now - started, last_error))
            reason = self.interrupted(now - started)
            if reason is not None:
                raise WaitInterrupted(
                    f"task {self.task_id}: stopped waiting for {_text(what)} from the broker at "
                    f"{self.bootstrap_servers} ({role}): {reason}"
                )
            if not warned and now - started >= STALL_WARNING_S:
                warned = True
                self._warn(role, what, now - started, last_error)

    def call(
        self, role: str, what: str | Callable[[], str], call: Callable[[], T], *,
        step_s: float = STEP_S,
    ) -> T:  # fmt: skip
        """``call()`` until it returns without a transient error (see :meth:`until`)."""
        result: list[T] = []

        def attempt(_step: float) -> bool:
            result.append(call())
            return True

        self.until(role, what, attempt, step_s=step_s)
        return result[0]

    def observe(self, role: str, what: str | Callable[[], str], since: float | None) -> None:
        """For a wait the caller does itself (the epoch loop's input): ``since`` is when the
        broker stopped answering (monotonic; None: it answers). Warns once past
        :data:`STALL_WARNING_S`; raises :class:`TaskTimeoutError` past ``task.timeout.ms``."""
        if since is None:
            if self._observed is not None:
                observed_role, started = self._observed
                self._observed = None
                self._over(observed_role, what, started)
            return
        waited = time.monotonic() - since
        if waited >= self.timeout_s:
            raise TaskTimeoutError(self._line(role, what, waited, None))
        if waited >= STALL_WARNING_S and self._observed is None:
            self._observed = (role, since)
            self._warn(role, what, waited, None)

    def _line(
        self, role: str, what: str | Callable[[], str], waited: float, error: BaseException | None
    ) -> str:
        cause = f"; last error: {_one_line(error)}" if error is not None else ""
        return (
            f"task {self.task_id} waited {waited:.0f}s for {_text(what)} from the broker at "
            f"{self.bootstrap_servers} ({role} client) and gave up: task.timeout.ms="
            f"{self.timeout_ms} ran out{cause}"
        )

    def _warn(
        self, role: str, what: str | Callable[[], str], waited: float, error: BaseException | None
    ) -> None:
        self._log.warning(
            "task_waiting_for_broker",
            broker=self.bootstrap_servers,
            client=role,
            waiting_for=_text(what),
            waited_s=round(waited, 1),
            task_timeout_ms=self.timeout_ms,
            last_error=_one_line(error) if error is not None else None,
        )

    def _over(self, role: str, what: str | Callable[[], str], started: float) -> None:
        self._log.info(
            "task_broker_wait_over",
            broker=self.bootstrap_servers,
            client=role,
            waited_for=_text(what),
            waited_s=round(time.monotonic() - started, 1),
        )


def _text(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"
