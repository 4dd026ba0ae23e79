"""Records the producer reports undeliverable after ``produce()`` returned, on the embedded
broker: ``DeliveryTracker.flush_and_check`` hands them to a failure handler (Kafka Streams'
``recordSendError``), except fatal and fencing errors, which fail at once.

The asynchronous failure is real, and the tests decide it: a record goes to a partition its
topic will not have, produced *before the topic exists* (:func:`produce_then_create`). No
metadata can give the producer the topic's partitions at ``produce()`` then, so it queues the
record until a metadata response names the topic (it waits up to
``topic.metadata.propagation.max.ms``, 30 s, for a topic the broker says does not exist), and
once the topic is created the record fails in its delivery report (``_UNKNOWN_PARTITION``).
Creating the topic first left it to timing: the embedded broker answers every metadata request
with every topic, so the producer could know the topic already and refuse the record in
``produce()`` (``RecordSendError``). The producer asks the broker not to create the topics it
looks up (``allow.auto.create.topics``), which the embedded broker would do otherwise."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from processor_api.errors import DeliveryError, RecordDeliveryError
from processor_api.kafka.delivery import FailedDelivery, FailureKind, failure_kind
from processor_api.kafka.producer import DeliveryTracker, make_producer
from tests.harness.topics import read_topic, uid


def connected_tracker(kafka) -> DeliveryTracker:
    """A tracker whose producer has connected and fetched the cluster's metadata (a record
    was delivered), and does not have the broker create the topics it looks up."""
    warm_up = uid("warm-up")
    kafka.create_topic(warm_up, 1)
    producer = make_producer(
        kafka.bootstrap_servers, extra_config={"allow.auto.create.topics": False}
    )
    tracker = DeliveryTracker(producer)
    tracker.produce(warm_up, None, b"x", partition=0)
    tracker.flush_and_check(10)
    tracker.reset()
    return tracker


def produce_then_create(
    kafka, tracker: DeliveryTracker, topic: str, partitions: int, *records: tuple
) -> None:
    """Hand ``(key, value, partition)`` records for ``topic`` to the producer, then create
    ``topic`` with ``partitions``: one to a partition it lacks fails in its delivery report,
    whenever the producer's metadata arrives (module docs)."""
    for key, value, partition in records:
        tracker.produce(topic, key, value, partition=partition, timestamp=1_000)
    kafka.create_topic(topic, partitions)


@pytest.mark.integration
def test_a_failed_delivery_reaches_the_failure_handler_with_the_record(kafka):
    tracker = connected_tracker(kafka)
    topic = uid("undeliverable")
    produce_then_create(kafka, tracker, topic, 2, (b"k", b"lost", 5), (b"k", b"kept", 1))
    seen: list[FailedDelivery] = []
    tracker.flush_and_check(10, on_failures=seen.extend)
    ((failure,),) = [seen]
    assert (failure.topic, failure.partition, failure.key, failure.value) == (
        topic,
        5,
        b"k",
        b"lost",
    )
    assert failure.kind is FailureKind.HANDLED
    error = failure.exception()
    assert isinstance(error, RecordDeliveryError)
    assert (error.topic, error.partition, error.code, error.retriable) == (
        topic,
        5,
        "_UNKNOWN_PARTITION",
        False,
    )
    assert str(error) == (
        f"delivery to topic {topic!r} partition 5 failed: _UNKNOWN_PARTITION: "
        "Local: Unknown partition"
    )
    assert tracker.failed == 1 and tracker.delivered == 1
    assert [r.value for r in read_topic(kafka.bootstrap_servers, topic, timeout_s=10)] == [b"kept"]


@pytest.mark.integration
def test_without_a_handler_the_failure_raises_naming_topic_partition_and_cause(kafka):
    tracker = connected_tracker(kafka)
    topic = uid("undeliverable")
    produce_then_create(kafka, tracker, topic, 1, (b"k", b"lost", 3))
    with pytest.raises(
        DeliveryError,
        match=rf"delivery to topic '{topic}' partition 3 failed: _UNKNOWN_PARTITION: "
        r"Local: Unknown partition; 1 record\(s\) failed in total",
    ):
        tracker.flush_and_check(10)


@pytest.mark.integration
def test_dead_letter_records_the_handler_sends_are_waited_for(kafka):
    tracker = connected_tracker(kafka)
    topic, dead_letters = uid("undeliverable"), uid("dead-letters")
    kafka.create_topic(dead_letters, 1)  # partition 0: delivered, known to the producer or not
    produce_then_create(kafka, tracker, topic, 1, (b"k", b"lost", 4))

    def to_dead_letters(failures):
        for failure in failures:
            tracker.produce(dead_letters, failure.key, failure.value, partition=0)

    tracker.flush_and_check(10, on_failures=to_dead_letters)
    assert tracker.pending == 0
    assert tracker.acked_end_offsets() == {(dead_letters, 0): 1}


@pytest.mark.integration
def test_a_dead_letter_record_that_fails_too_fails_the_flush(kafka):
    tracker = connected_tracker(kafka)
    topic, dead_letters = uid("undeliverable"), uid("dead-letters")
    produce_then_create(kafka, tracker, topic, 1, (b"k", b"lost", 4))
    rounds = []

    def to_a_missing_partition(failures):
        rounds.append(len(failures))
        dead = [(failure.key, failure.value, 9) for failure in failures]
        produce_then_create(kafka, tracker, dead_letters, 1, *dead)

    with pytest.raises(
        DeliveryError,
        match=rf"'{dead_letters}' partition 9 failed: _UNKNOWN_PARTITION.*after the production "
        r"exception handler dropped 1 undeliverable record",
    ):
        tracker.flush_and_check(10, on_failures=to_a_missing_partition)
    assert rounds == [1]  # the dead-letter record's failure is not handled again


@pytest.mark.integration
def test_a_handler_that_raises_fails_the_flush(kafka):
    tracker = connected_tracker(kafka)
    topic = uid("undeliverable")
    produce_then_create(kafka, tracker, topic, 1, (b"k", b"lost", 2))

    def refuse(failures):
        raise DeliveryError(f"refused {failures[0].partition}")

    with pytest.raises(DeliveryError, match="refused 2"):
        tracker.flush_and_check(10, on_failures=refuse)


@pytest.mark.integration
def test_a_fenced_producer_fails_without_asking_the_handler(kafka):
    topic = uid("fenced")
    kafka.create_topic(topic, 1)
    txn_id = uid("txn")
    old = make_producer(kafka.bootstrap_servers, transactional_id=txn_id)
    old.init_transactions(10)
    old.begin_transaction()
    tracker = DeliveryTracker(old)
    newer = make_producer(kafka.bootstrap_servers, transactional_id=txn_id)
    newer.init_transactions(10)  # fences ``old``
    tracker.produce(topic, b"k", b"v", partition=0)
    asked = []
    with pytest.raises(
        DeliveryError,
        match=r"the producer failed while flushing: _FENCED: .*fenced by a newer instance.* "
        r"\(the producer was fenced: another instance took the task over; not offered to the "
        r"production exception handler\)",
    ):
        tracker.flush_and_check(10, on_failures=asked.extend)
    assert asked == []


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._MSG_TIMED_OUT, FailureKind.HANDLED),
        (KafkaError._UNKNOWN_PARTITION, FailureKind.HANDLED),
        (KafkaError.MSG_SIZE_TOO_LARGE, FailureKind.HANDLED),
        (KafkaError.NOT_ENOUGH_REPLICAS, FailureKind.HANDLED),
        (KafkaError.PRODUCER_FENCED, FailureKind.FENCED),
        (KafkaError.INVALID_PRODUCER_EPOCH, FailureKind.FENCED),
        (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, FailureKind.FENCED),
        (KafkaError._FENCED, FailureKind.FENCED),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, FailureKind.FATAL),
        (KafkaError.SASL_AUTHENTICATION_FAILED, FailureKind.FATAL),
        (KafkaError.TOPIC_EXCEPTION, FailureKind.FATAL),
        (KafkaError.UNKNOWN, FailureKind.FATAL),
        (KafkaError._STATE, FailureKind.FATAL),
        (KafkaError._PURGE_QUEUE, FailureKind.ABORTED),
        (KafkaError._PURGE_INFLIGHT, FailureKind.ABORTED),
    ],
)
def test_which_errors_a_handler_may_decide_on(code, kind):
    """As Kafka Streams' ``recordSendError``: fatal (security, invalid topic, unknown server
    error, illegal state) and fencing errors never reach the handler; purged records are a
    follow-up of an abort."""
    assert failure_kind(KafkaError(code)) is kind


def test_a_fatal_error_is_fatal_whatever_its_code():
    assert failure_kind(KafkaError(KafkaError._MSG_TIMED_OUT, fatal=True)) is FailureKind.FATAL


def test_the_record_is_taken_as_the_delivery_report_gives_it():
    report = Message(
        topic="t",
        partition=2,
        key=b"k",
        value=b"v",
        headers=[("h", b"1")],
        timestamp=(1, 1_234),
        error=None,
    )
    failure = FailedDelivery.from_report(KafkaError(KafkaError._MSG_TIMED_OUT), report)
    assert (failure.headers, failure.timestamp) == ((("h", b"1"),), 1_234)
    unsent = Message(topic="t", partition=-1, key=None, value=b"v", timestamp=(0, -1))
    failure = FailedDelivery.from_report(KafkaError(KafkaError._MSG_TIMED_OUT), unsent)
    assert (failure.partition, failure.timestamp, failure.headers) == (None, None, ())
    assert "'t' (no partition chosen yet) failed: _MSG_TIMED_OUT" in failure.describe()
