"""Issue 21: delivery callbacks of a fenced producer, on the embedded broker.

When librdkafka hits a fatal error (a transactional producer fenced by a newer instance),
confluent-kafka sets a Python exception and then still runs the delivery callbacks of the
records it purges, with that exception pending. A call inside such a callback then fails after
it took effect: the tracker's ``with self._lock`` acquired the lock and raised before the block
began, so the lock was never released and the next callback of the same ``flush`` waited for it
forever (once the callback's code was warm; cold, ``message.topic()`` raised ``SystemError``
first). The tracker's callbacks now take no lock and catch what they raise; ``flush_and_check``
raises it as the batch's error.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from processor_api.errors import DeliveryError
from processor_api.kafka.producer import DeliveryTracker, make_producer
from tests.harness.topics import uid

pytestmark = pytest.mark.integration

#: Guard of the flush in a thread: a deadlocked flush fails the test instead of hanging it.
FLUSH_GUARD_S = 60.0


def _fenced_tracker(kafka, topic: str, warm_up: int) -> DeliveryTracker:
    """A tracker whose transactional producer acknowledged ``warm_up`` records in a committed
    transaction, opened a new transaction and was then fenced by a newer instance."""
    transactional_id = uid("tid")
    producer = make_producer(kafka.bootstrap_servers, transactional_id=transactional_id)
    producer.init_transactions(10)
    tracker = DeliveryTracker(producer)
    producer.begin_transaction()
    for i in range(warm_up):
        tracker.produce(topic, b"k%d" % i, b"warm", partition=0)
    tracker.flush_and_check(10)
    producer.commit_transaction(10)
    tracker.reset()
    producer.begin_transaction()
    newer = make_producer(kafka.bootstrap_servers, transactional_id=transactional_id)
    newer.init_transactions(10)
    return tracker


def test_a_fenced_producer_fails_the_flush_instead_of_deadlocking_in_its_callbacks(kafka):
    topic = uid("fenced-flush")
    kafka.create_topic(topic, 1)
    # hundreds of callbacks first: the interpreter specializes the callback's code, the case
    # in which the failed lock acquisition went unnoticed until the next callback blocked
    tracker = _fenced_tracker(kafka, topic, warm_up=500)
    for i in range(50):
        tracker.produce(topic, b"k%d" % i, b"late", partition=0)
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            tracker.flush_and_check(10)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - examined below
            outcome.append(exc)

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    thread.join(FLUSH_GUARD_S)
    assert not thread.is_alive(), "flush_and_check deadlocked in a delivery callback"
    (error,) = outcome
    assert isinstance(error, DeliveryError)
    # confluent-kafka hands the fatal _FENCED error to the flush, or (timing) loses it and
    # only the purged records tell; either way the flush fails instead of hanging
    text = str(error)
    assert ("_FENCED" in text and "another instance took the task over" in text) or (
        "its error was lost" in text and "purged" in text
    ), text
    assert tracker.pending == 0  # every purged record was reported and counted


_COLD_CALLBACK = """
import sys
from processor_api.errors import DeliveryError
from processor_api.kafka.producer import DeliveryTracker, make_producer

bootstrap, topic, transactional_id = sys.argv[1:4]
producer = make_producer(bootstrap, transactional_id=transactional_id)
producer.init_transactions(10)
tracker = DeliveryTracker(producer)
producer.begin_transaction()
newer = make_producer(bootstrap, transactional_id=transactional_id)
newer.init_transactions(10)
for i in range(5):
    tracker.produce(topic, b"k", b"late", partition=0)
try:
    tracker.flush_and_check(10)
except DeliveryError as exc:
    print("DeliveryError:", exc)
    print("cause:", type(exc.__cause__).__name__, exc.__cause__)
"""


#: Attempts at the cold-callback scenario: confluent-kafka sometimes loses the fatal error
#: before the callbacks run (then no callback raises; the records are only purged).
COLD_ATTEMPTS = 4


def _cold_flush(bootstrap: str, topic: str) -> tuple[str, str]:
    """The ``DeliveryError`` and ``cause`` lines of one run of :data:`_COLD_CALLBACK`."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_COLD_CALLBACK), bootstrap, topic, uid("tid")],
        capture_output=True,
        text=True,
        timeout=FLUSH_GUARD_S,
        check=True,
    )
    lines = [
        line for line in done.stdout.splitlines() if line.startswith(("DeliveryError", "cause"))
    ]
    assert len(lines) == 2, done.stdout + done.stderr
    error, cause = lines
    return error, cause


def test_an_exception_raised_inside_a_delivery_callback_is_the_flush_error(kafka):
    topic = uid("callback-raises")
    kafka.create_topic(topic, 1)
    # a fresh interpreter: the callback's first call (message.topic()) raises SystemError
    # from the pending fenced error, inside the callback; when the error was lost before the
    # callbacks ran (seen once in 15 CI runs), the flush still fails, and the scenario runs
    # again to reach the case this test is about
    seen: list[str] = []
    for _ in range(COLD_ATTEMPTS):
        error, cause = _cold_flush(kafka.bootstrap_servers, topic)
        if "its error was lost" in error and "purged" in error:
            seen.append(error)
            continue
        break
    else:
        pytest.fail(f"the fenced error never reached a delivery callback: {seen}")
    assert "_FENCED" in error and "another instance took the task over" in error
    assert f"it surfaced in the delivery report of topic {topic!r} partition 0" in error
    assert (
        cause.startswith("cause: SystemError")
        and "returned a result with an exception set" in cause
    )
