"""A safely configured confluent-kafka producer and a tracker of its deliveries.

``make_producer`` sets idempotence, ``acks=all``, Java-compatible key partitioning
(``murmur2_random``) and a bounded ``message.timeout.ms``, so a dead broker fails deliveries in
bounded time instead of retrying for five minutes.

``DeliveryTracker`` wraps ``Producer.produce`` for code that must know, before it reports a batch
done, that every record was acknowledged: it keeps every failed delivery and the highest
acknowledged offset per partition; ``flush_and_check`` raises ``DeliveryError`` naming topic,
partition and cause when anything failed or was not acknowledged in time, unless a
``DeliveryFailureHandler`` (``kafka/delivery.py``) accepts the failed records as dropped.

Delivery callbacks take no lock and never raise: confluent-kafka may run a callback while a
Python exception is already pending (the fatal error of a fenced producer, or an earlier callback
that raised), and then a call inside the callback fails *after* it took effect: a lock acquired
by a ``with`` statement that fails this way is never released, and the next callback on the same
thread waits for it forever (a deadlock inside ``flush``). So a callback only appends its report
to a queue; the tracker's own methods fold the queue into the counts, outside any librdkafka
call, and an exception inside a callback is kept and raised by ``flush_and_check``, naming the
record's topic and partition.

Note: librdkafka treats a record timestamp of 0 as "now", so a record cannot be produced with
timestamp 0 (it gets the producer's wall clock); the tracker logs a warning when asked to.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from processor_api.errors import DeliveryError, RecordSendError, StreamsError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.delivery import (
    DeliveryFailureHandler,
    FailedDelivery,
    FailureKind,
    failures_text,
    flush_failure,
    producer_failure_text,
)
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: Delivery timeout: how long librdkafka retries a record before reporting it failed.
DEFAULT_MESSAGE_TIMEOUT_MS = 30_000
#: Transaction timeout of transactional producers (at least message.timeout.ms).
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
#: Apache Kafka's default ``transaction.max.timeout.ms``: a broker refuses a longer one.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: produce() serves delivery callbacks (poll) once per this many records, not per record.
_POLL_EVERY = 256


def make_producer(
    bootstrap_servers: str,
    *,
    transactional_id: str | None = None,
    extra_config: Mapping[str, Any] | None = None,
    kafka: KafkaClientConfig | None = None,
    message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS,
) -> Producer:
    """A ``confluent_kafka.Producer`` configured for safe, ordered, Java-compatible delivery.

    ``transactional_id`` makes it transactional (call ``init_transactions()`` before use).
    The user's producer settings (``kafka``) override the defaults below, ``extra_config``
    entries override both. ``message_timeout_ms``: how long a record may wait in the queue for
    the broker before it fails (a task's producer gets one past ``task.timeout.ms``, so an
    outage the task rides out loses no record); the transaction timeout follows it.
    """
    config = client_config(
        bootstrap_servers,
        "producer" if transactional_id is None else f"producer:{transactional_id}",
        role="producer",
        kafka=kafka,
        defaults={
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 100_000,
            "queue.buffering.max.kbytes": 262_144,
            "message.timeout.ms": message_timeout_ms,
            "request.timeout.ms": 10_000,
            "socket.keepalive.enable": True,
        },
    )
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        # librdkafka refuses a transaction timeout below the message timeout
        config["transaction.timeout.ms"] = max(
            DEFAULT_TRANSACTION_TIMEOUT_MS, int(config["message.timeout.ms"])
        )
    config.update(extra_config or {})
    return Producer(config)


Headers = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]


def _refused(topic: str, exc: KafkaException, index: int | None = None) -> RecordSendError:
    error = exc.args[0] if exc.args else None
    reason = f"{error.name()}: {error.str()}" if isinstance(error, KafkaError) else str(exc)
    return RecordSendError(f"the producer refused a record for topic {topic!r}: {reason}", index)


class DeliveryTracker:
    """Produces through ``producer`` and keeps track of what was acknowledged.

    Not thread-safe for concurrent ``produce`` calls from several threads; delivery callbacks
    run inside ``poll``/``flush`` of the calling thread and only queue their reports (see the
    module docs); the lock guards the counts and is never held across a librdkafka call.
    """

    def __init__(self, producer: Producer, *, buffer_full_timeout_s: float = 60.0) -> None:
        self._producer = producer
        self._buffer_full_timeout_s = buffer_full_timeout_s
        self._lock = threading.Lock()
        self._pending = 0
        self._pending_by_topic: Counter[str] = Counter()
        self._delivered = 0
        self._failed = 0
        self._failures: list[FailedDelivery] = []
        self._acked: dict[tuple[str, int], int] = {}
        self._warned_zero_timestamp = False
        self._unpolled = 0
        # Filled by the delivery callbacks (deque.append needs no lock), emptied by _settle:
        # (topic, partition, offset) of an acknowledged record, (error, message) of a failed one.
        # Each report starts with the generation of its record (see ``cut``).
        self._reports: deque[
            tuple[int, str | None, int | None, int | None] | tuple[int, KafkaError, Message]
        ] = deque()
        self._callback_errors: deque[tuple[Message, BaseException]] = deque()
        # Output records (``produce_values``) are acknowledged by a lighter callback that only
        # counts per topic; the counts are folded into the totals by ``_settle``.
        self._output_acked: dict[tuple[str, int], list[int]] = {}
        self._output_callbacks: dict[str, Any] = {}
        # Generations (see ``cut``): records not reported yet, per generation they were sent in.
        self._generation = 0
        self._pending_by_generation: Counter[int] = Counter()
        self._on_delivery = self._delivery_callback(0)
        #: Called once before the next record is handed to the producer, then cleared (the
        #: commit barrier on Tansu: ``kafka/commit_barrier.py``).
        self.before_first_record: Callable[[], None] | None = None

    @property
    def producer(self) -> Producer:
        """The wrapped producer."""
        return self._producer

    @property
    def pending(self) -> int:
        """Records handed to the producer whose delivery was not reported yet."""
        self._settle()
        return self._pending

    @property
    def delivered(self) -> int:
        """Records acknowledged by the broker so far."""
        self._settle()
        return self._delivered

    @property
    def failed(self) -> int:
        """Records whose delivery failed so far."""
        self._settle()
        return self._failed

    def _delivery_callback(self, generation: int) -> Any:
        reports, errors = self._reports, self._callback_errors

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            # Runs inside librdkafka calls, perhaps with an exception pending (module docs): no
            # lock, nothing that may raise out of it.
            try:
                if error is None:
                    # no Python call between these (module docs): the report as it came
                    reports.append(
                        (generation, message.topic(), message.partition(), message.offset())
                    )
                else:  # kept as reported: FailedDelivery is made outside the callback
                    reports.append((generation, error, message))
            except BaseException as exc:  # noqa: BLE001 - raised by flush_and_check
                errors.append((message, exc))

        return on_delivery

    def cut(self) -> int:
        """End the current generation of records and return its number: the records sent
        from now on belong to the next one. :meth:`unacknowledged` tells when every record of
        a generation (and of the ones before) has been reported, while later records may
        still be in flight (a commit that does not wait for the next batch's records)."""
        generation = self._generation
        self._generation += 1
        self._on_delivery = self._delivery_callback(self._generation)
        self._output_callbacks = {}
        return generation

    def unacknowledged(self, generation: int) -> int:
        """Records of ``generation`` and earlier whose delivery was not reported yet, after
        serving the delivery reports that have arrived (without waiting)."""
        self._poll(0)
        with self._lock:
            return sum(n for g, n in self._pending_by_generation.items() if g <= generation)

    def check_failures(self, on_failures: DeliveryFailureHandler | None = None) -> None:
        """Raise ``DeliveryError`` for the deliveries that failed so far, or hand them to
        ``on_failures`` (as :meth:`flush_and_check` does, without waiting for anything)."""
        failures = self._take_failures()
        if not failures:
            return
        unhandled = [f for f in failures if f.kind is not FailureKind.HANDLED]
        if on_failures is None or unhandled:
            raise DeliveryError(failures_text(unhandled or failures))
        on_failures(failures)

    def _settle(self) -> None:
        """Fold the queued delivery reports into the counts (never inside a callback)."""
        with self._lock:
            reports, acked, by_topic = self._reports, self._acked, self._pending_by_topic
            by_generation = self._pending_by_generation
            while reports:
                report = reports.popleft()
                self._pending -= 1
                by_generation[report[0]] -= 1
                if len(report) == 3:
                    _, error, message = report
                    failure = FailedDelivery.from_report(error, message)
                    by_topic[failure.topic] -= 1
                    self._failed += 1
                    self._failures.append(failure)
                    continue
                _, topic, partition, offset = report
                assert topic is not None and partition is not None  # a delivered record's
                by_topic[topic] -= 1
                self._delivered += 1
                key = (topic, partition)
                if offset is not None and offset >= 0 and offset + 1 > acked.get(key, 0):
                    acked[key] = offset + 1
            for (topic, generation), counted in self._output_acked.items():
                count, counted[0] = counted[0], 0
                self._pending -= count
                by_topic[topic] -= count
                by_generation[generation] -= count
                self._delivered += count
            for generation in [g for g, n in by_generation.items() if n == 0]:
                del by_generation[generation]

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        timestamp: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Hand one record to the producer (asynchronous; see :meth:`flush_and_check`).

        ``partition=None`` lets the producer's partitioner choose (murmur2 of the key).
        ``timestamp`` is epoch milliseconds (None: now). When the local queue is full the
        producer is polled until there is room, for at most ``buffer_full_timeout_s``.
        """
        if timestamp is None:
            timestamp = 0  # librdkafka: 0 = now
        elif timestamp == 0:
            self._warn_zero_timestamp(topic)
        header_list: list[tuple[str, str | bytes | None]] | None = None
        if headers:
            header_list = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        if self.before_first_record is not None:
            self._first_record()
        with self._lock:  # counted before produce(): its callback can only come later
            self._pending += 1
            self._pending_by_topic[topic] += 1
            self._pending_by_generation[self._generation] += 1
        try:
            self._produce_waiting(
                topic, value, key, -1 if partition is None else partition, timestamp, header_list
            )
        except KafkaException as exc:
            self._uncount(topic, 1)
            raise _refused(topic, exc) from None
        except BaseException:
            self._uncount(topic, 1)
            raise
        self._unpolled += 1
        if self._unpolled >= _POLL_EVERY:
            self._unpolled = 0
            self._poll(0)

    def produce_many(
        self, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None, int]]
    ) -> None:
        """Hand ``(key, value, timestamp)`` records for one partition to the producer.

        The same as :meth:`produce` per record (no headers; a timestamp of 0 or less means now,
        without a warning: changelog records of punctuations have none), with the bookkeeping
        done once for the whole sequence.
        """
        count = len(records)
        if not count:
            return
        if self.before_first_record is not None:
            self._first_record()
        with self._lock:
            self._pending += count
            self._pending_by_topic[topic] += count
            self._pending_by_generation[self._generation] += count
        produce, callback = self._producer.produce, self._on_delivery
        sent = 0
        try:
            for key, value, timestamp in records:
                if timestamp < 0:
                    timestamp = 0
                try:
                    produce(topic, value, key, partition, on_delivery=callback, timestamp=timestamp)
                except BufferError:
                    self._produce_waiting(topic, value, key, partition, timestamp, None)
                sent += 1
                if not sent & 1023:
                    self._poll(0)
        except BaseException:
            self._uncount(topic, count - sent)
            raise
        self._poll(0)

    def produce_values(
        self, topic: str, entries: Sequence[tuple[bytes | None, bytes | None]], timestamp: int
    ) -> None:
        """Hand ``(key, value)`` records for ``topic``, all with ``timestamp``, to the producer.

        For output records (a punctuation forwarding a store, say): the producer's partitioner
        chooses the partition, there are no headers, and an acknowledgement is only counted
        (no acknowledged offset is kept; :meth:`acked_end_offsets` does not cover them). A
        failed delivery is recorded as for :meth:`produce`.
        """
        count = len(entries)
        if not count:
            return
        if timestamp == 0:
            self._warn_zero_timestamp(topic)
        elif timestamp < 0:
            timestamp = 0
        if self.before_first_record is not None:
            self._first_record()
        with self._lock:
            self._pending += count
            self._pending_by_topic[topic] += count
            self._pending_by_generation[self._generation] += count
        produce, callback = self._producer.produce, self._output_callback(topic)
        sent = 0
        try:
            for key, value in entries:
                try:
                    produce(topic, value, key, on_delivery=callback, timestamp=timestamp)
                except BufferError:
                    self._produce_waiting(topic, value, key, -1, timestamp, None, callback)
                sent += 1
                if not sent & 1023:
                    self._poll(0)
        except KafkaException as exc:
            self._uncount(topic, count - sent)
            raise _refused(topic, exc, index=sent) from None
        except BaseException:
            self._uncount(topic, count - sent)
            raise
        self._poll(0)

    def _first_record(self) -> None:
        hook, self.before_first_record = self.before_first_record, None
        if hook is not None:
            hook()

    def _output_callback(self, topic: str) -> Any:
        callback = self._output_callbacks.get(topic)
        if callback is None:
            acked = self._output_acked.setdefault((topic, self._generation), [0])
            on_error = self._on_delivery

            def callback(error: KafkaError | None, message: Message) -> None:
                if error is None:
                    acked[0] += 1  # no lock: folded into the totals by _settle
                else:
                    on_error(error, message)

            self._output_callbacks[topic] = callback
        return callback

    def _poll(self, timeout_s: float) -> None:
        """``Producer.poll`` (serves delivery callbacks), then fold their reports in."""
        try:
            self._producer.poll(timeout_s)
        except Exception as exc:
            self._settle()
            self._raise_callback_errors(exc)
            raise
        self._settle()
        self._raise_callback_errors(None)

    def _raise_callback_errors(self, cause: BaseException | None) -> None:
        """Raise ``DeliveryError`` for the first exception a delivery callback caught."""
        if not self._callback_errors:
            return
        errors = list(self._callback_errors)
        self._callback_errors.clear()
        message, exc = errors[0]
        partition = message.partition()
        where = f"topic {message.topic()!r} " + (
            f"partition {partition}"
            if partition is not None and partition >= 0
            else "(no partition chosen yet)"
        )
        error = flush_failure(exc) or (flush_failure(cause) if cause is not None else None)
        if error is not None:  # the producer's own error was pending when the callback ran
            text = f"{producer_failure_text(error)}; it surfaced in the delivery report of {where}"
        else:
            text = (
                f"the delivery report of a record to {where} raised inside the producer's "
                f"delivery callback: {type(exc).__name__}: {exc}"
            )
        if len(errors) > 1:
            text += f"; {len(errors)} delivery reports raised in total"
        raise DeliveryError(text) from exc

    def _produce_waiting(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        timestamp: int,
        headers: list[tuple[str, str | bytes | None]] | None,
        on_delivery: Any = None,
    ) -> None:
        """``Producer.produce``, polling while the local queue is full (bounded wait)."""
        deadline: float | None = None
        on_delivery = on_delivery or self._on_delivery
        while True:
            try:
                # keywords: the fifth positional parameter is the legacy ``callback``
                self._producer.produce(
                    topic,
                    value,
                    key,
                    partition,
                    on_delivery=on_delivery,
                    timestamp=timestamp,
                    headers=headers,
                )
                return
            except BufferError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._buffer_full_timeout_s
                elif now >= deadline:
                    raise DeliveryError(
                        f"producer queue stayed full for {self._buffer_full_timeout_s:g}s "
                        f"while producing to topic {topic!r}: "
                        f"{self.pending - 1} record(s) unacknowledged"
                    ) from None
                self._poll(0.05)

    def _uncount(self, topic: str, count: int) -> None:
        with self._lock:
            self._pending -= count
            self._pending_by_topic[topic] -= count
            self._pending_by_generation[self._generation] -= count

    def _warn_zero_timestamp(self, topic: str) -> None:
        if not self._warned_zero_timestamp:
            self._warned_zero_timestamp = True
            _log.warning(
                "timestamp_zero_becomes_now",
                topic=topic,
                detail="librdkafka replaces a record timestamp of 0 by the current time",
            )

    def flush_and_check(
        self, timeout_s: float = 30.0, on_failures: DeliveryFailureHandler | None = None
    ) -> None:
        """Wait until every record was acknowledged; raise ``DeliveryError`` otherwise.

        The error names the topic, partition and cause of the first failed delivery, or how
        many records were still unacknowledged when ``timeout_s`` ran out, or the record whose
        delivery callback raised (and what it raised).

        With ``on_failures``, records whose delivery failed are handed to it (once each) when
        every failure is of a kind a handler may decide on (``FailureKind.HANDLED``; a fatal,
        fenced or purged one raises at once). It raises to fail, or returns: the records are
        dropped, and the dead-letter records it produced through this tracker are waited
        for; a failure among those raises (no second round of handling).
        """
        remaining = self._flush(timeout_s)
        failures = self._take_failures()
        if failures:
            unhandled = [f for f in failures if f.kind is not FailureKind.HANDLED]
            if on_failures is None or unhandled:
                raise DeliveryError(failures_text(unhandled or failures))
            on_failures(failures)
            remaining = self._flush(timeout_s)
            again = self._take_failures()
            if again:
                raise DeliveryError(
                    f"{failures_text(again)}, after the production exception handler "
                    f"dropped {len(failures)} undeliverable record(s)"
                )
        if remaining > 0 or self._pending > 0:
            with self._lock:
                topics = sorted(t for t, n in self._pending_by_topic.items() if n > 0)
            raise DeliveryError(
                f"{max(remaining, self._pending)} record(s) to topic(s) "
                f"{', '.join(repr(t) for t in topics) or '?'} were not acknowledged within "
                f"{timeout_s:g}s"
            )

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every record to be acknowledged or failed; returns how
        many are still waiting (failures are kept for :meth:`flush_and_check`). Raises
        ``DeliveryError`` for a fatal producer error or a delivery callback that raised."""
        return self._flush(timeout_s)

    def _flush(self, timeout_s: float) -> int:
        """``Producer.flush``, then the reports folded in and callback errors raised."""
        try:
            remaining = self._producer.flush(timeout_s)
        except Exception as exc:  # KafkaException, or SystemError around a callback's error
            self._settle()
            self._raise_callback_errors(exc)
            error = flush_failure(exc)
            if error is not None:
                failures = self._take_failures()  # e.g. the records a fenced producer purged
                raise DeliveryError(
                    producer_failure_text(error)
                    + (f"; {failures_text(failures)}" if failures else "")
                ) from exc
            if not isinstance(exc, SystemError):
                raise
            # confluent-kafka lost the error it meant to raise: a callback ran with it pending
            failures = self._take_failures()
            raise DeliveryError(
                f"the producer failed while flushing and its error was lost ({exc}): a fatal "
                "producer error, such as a transactional producer fenced by a newer instance, "
                "surfaced inside a delivery callback"
                + (f"; {failures_text(failures)}" if failures else "")
            ) from exc
        self._settle()
        self._raise_callback_errors(None)
        return remaining

    def _take_failures(self) -> list[FailedDelivery]:
        with self._lock:
            failures, self._failures = self._failures, []
        return failures

    def acked_end_offsets(self) -> dict[tuple[str, int], int]:
        """Per ``(topic, partition)``: the last acknowledged offset + 1."""
        self._settle()
        with self._lock:
            return dict(self._acked)

    def rebind(self, producer: Producer) -> None:
        """Track ``producer`` from now on, forgetting every record sent so far: for a tracker
        held by others (a task's collector) over a shared transactional producer whose
        transaction was aborted (its records purged) or which was replaced. Reports of the
        forgotten records go to queues nobody reads."""
        with self._lock:
            self._producer = producer
            self._pending = 0
            self._pending_by_topic = Counter()
            self._delivered = 0
            self._failed = 0
            self._failures = []
            self._acked = {}
            self._unpolled = 0
            self._reports = deque()
            self._callback_errors = deque()
            self._output_acked = {}
            self._output_callbacks = {}
            self._generation += 1
            self._pending_by_generation = Counter()
            self._on_delivery = self._delivery_callback(self._generation)

    def reset(self) -> None:
        """Forget errors and acknowledged offsets (e.g. at the start of a new batch).

        Raises ``StreamsError`` while deliveries are still pending.
        """
        self._settle()
        with self._lock:
            if self._pending:
                raise StreamsError(
                    f"cannot reset a DeliveryTracker with {self._pending} pending deliveries"
                )
            self._failures = []
            self._failed = 0
            self._delivered = 0
            self._acked.clear()
            self._callback_errors.clear()
