"""A record the producer reports undeliverable after it was sent (in its
delivery report) goes to the ``production.exception.handler`` of the task, on the embedded
broker, through the Spark task runner (without Spark).

The undeliverable record is real: the processing handler of the topology dead-letters the
record that fails to a partition its dead-letter topic does not have. The topic is created
after the task's producer fetched the cluster's metadata (the first, empty batch committed),
so the producer accepts the record and reports ``_UNKNOWN_PARTITION`` in its delivery report.
"""

from __future__ import annotations

import re

import pytest
from structlog.testing import capture_logs

from processor_api import Processor, Record, Serdes, Topology
from processor_api.errors import DeliveryError, RecordSendError
from processor_api.handlers import DeadLetterRecord, HandlerResponse
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.task_runner import InputRange, TaskRunner
from tests.harness.task_runs import one_task
from tests.harness.topics import committed_records, produce, read_topic, uid

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

HERE = __name__
MISSING_PARTITION = 3
#: Topics of the running test, for the handlers below (the runner runs in this process).
TOPICS: dict[str, str] = {}
SEEN: list[tuple] = []


class FailOnBad(Processor):
    """Forwards every record; raises on the value ``"bad"``."""

    def init(self, context) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        if record.value == "bad":
            raise ValueError("bad record")
        self.context.forward(record)


def dead_letter_to_a_missing_partition(context, record, error):
    """Processing handler: go on, dead-lettering the input record to a missing partition."""
    return HandlerResponse.resume(
        [
            DeadLetterRecord(
                TOPICS["lost"],
                context.source_raw_key,
                context.source_raw_value,
                (("origin", b"processing"),),
                partition=MISSING_PARTITION,
            )
        ]
    )


def dead_letter_undeliverable(context, record, error):
    """Production handler: go on, dead-lettering the undeliverable record."""
    SEEN.append((context.processor, context.topic, record, error))
    return HandlerResponse.resume(
        [
            DeadLetterRecord(
                TOPICS["dlq"],
                record.key,
                record.value,
                (
                    ("code", error.code.encode()),
                    ("to", f"{error.topic}/{error.partition}".encode()),
                ),
            )
        ]
    )


def build(input_topic: str, output_topic: str) -> Topology:
    strings = {"key_serde": Serdes.string(), "value_serde": Serdes.string()}
    return (
        Topology()
        .add_source("in", input_topic, **strings)
        .add_processor("check", FailOnBad, "in")
        .add_sink("out", output_topic, "check", **strings)
    )


class Run:
    """A task runner over ``in -> check -> out`` whose first (empty) batch committed."""

    def __init__(self, kafka, tmp_path, production_handler: str, guarantee: str) -> None:
        run_id = uid()
        self.bootstrap = kafka.bootstrap_servers
        self.app = f"undeliverable-{run_id}"
        self.input, self.output = f"in-{run_id}", f"out-{run_id}"
        TOPICS.clear()
        TOPICS.update(lost=f"lost-{run_id}", dlq=f"dlq-{run_id}")
        SEEN.clear()
        for topic in (self.input, self.output, TOPICS["dlq"], commit_marker_topic(self.app)):
            kafka.create_topic(topic, 1)
        produce(self.bootstrap, self.input, [(b"a", b"one"), (b"b", b"bad"), (b"c", b"three")])
        _, self.runner = one_task(
            TaskRunner,
            build(self.input, self.output),
            run_id=run_id,
            bootstrap=self.bootstrap,
            state_dir=tmp_path,
            config={
                "application_id": self.app,
                "processing.guarantee": guarantee,
                "processing.exception.handler": f"{HERE}:dead_letter_to_a_missing_partition",
                "production.exception.handler": production_handler,
            },
        )
        self.state = self.runner.run_batch(None, []).metadata_json  # the producer is connected
        kafka.create_topic(TOPICS["lost"], 1)  # unknown to the producer's metadata

    def batch(self):
        return self.runner.run_batch(self.state, [InputRange(self.input, 0, 0, 3)])

    def group(self) -> dict:
        return committed_offsets(self.bootstrap, self.app, [(self.input, 0)])

    def output_values(self) -> list[bytes]:
        return [r.value for r in read_topic(self.bootstrap, self.output, timeout_s=10)]


@pytest.fixture
def runs():
    made: list[Run] = []
    yield lambda *args: made.append(Run(*args)) or made[-1]
    for run in made:
        run.runner.close()


def test_continue_drops_the_undeliverable_record_and_the_batch_commits(kafka, tmp_path, runs):
    run = runs(kafka, tmp_path, "log_and_continue", "at_least_once")
    with capture_logs() as logs:
        result = run.batch()
    assert (result.processed, result.dropped_records) == (3, 1)
    assert run.group() == {(run.input, 0): 3}
    assert run.output_values() == [b"one", b"three"]
    (dropped,) = [e for e in logs if e["event"] == "delivery_failed_record_dropped"]
    assert dropped["log_level"] == "warning"
    assert (dropped["topic"], dropped["partition"]) == (TOPICS["lost"], MISSING_PARTITION)
    assert "_UNKNOWN_PARTITION" in dropped["error"]


def test_fail_fails_the_batch_naming_topic_partition_and_cause(kafka, tmp_path, runs):
    run = runs(kafka, tmp_path, "log_and_fail", "at_least_once")
    with pytest.raises(
        DeliveryError,
        match=rf"delivery to topic '{TOPICS['lost']}' partition 3 failed: _UNKNOWN_PARTITION: "
        r"Local: Unknown partition; 1 record\(s\) failed in total; the production exception "
        r"handler processor_api.handlers:log_and_fail answered fail$",
    ):
        run.batch()
    assert run.group() == {}  # nothing committed past the failed batch


def test_a_user_handler_dead_letters_the_undeliverable_record(kafka, tmp_path, runs):
    run = runs(kafka, tmp_path, f"{HERE}:dead_letter_undeliverable", "at_least_once")
    result = run.batch()
    assert result.dropped_records == 1
    assert run.group() == {(run.input, 0): 3}
    ((processor, source_topic, record, error),) = SEEN
    assert (processor, source_topic) == (None, None)  # a dead-letter record: no sink, no input
    assert (record.topic, record.partition, record.key, record.value) == (
        TOPICS["lost"],
        MISSING_PARTITION,
        b"b",
        b"bad",
    )
    (dead,) = read_topic(run.bootstrap, TOPICS["dlq"], timeout_s=10)
    assert (dead.key, dead.value) == (b"b", b"bad")
    assert dead.headers == [
        ("code", b"_UNKNOWN_PARTITION"),
        ("to", f"{TOPICS['lost']}/{MISSING_PARTITION}".encode()),
    ]


def test_exactly_once_aborts_whatever_the_handler_says(kafka, tmp_path, runs):
    for attempt in (1, 2):
        run = runs(
            kafka, tmp_path / str(attempt), f"{HERE}:dead_letter_undeliverable", "exactly_once_v2"
        )
        try:
            with capture_logs() as logs:
                run.batch()
        except RecordSendError as exc:
            # a metadata refresh taught the producer the topic's one partition before the
            # batch, so it refused the record in produce(); this scenario needs the delivery
            # report (seen once in CI): once more with a new producer and topic
            if attempt == 1 and "_UNKNOWN_PARTITION" in str(exc):
                continue
            raise
        except DeliveryError as exc:
            error = str(exc)
            break
        pytest.fail("the batch committed")
    assert re.search(
        rf"delivery to topic '{TOPICS['lost']}' partition 3 failed: "
        r"_UNKNOWN_PARTITION.*answered continue, but under exactly_once_v2 a failed "
        r"delivery leaves the transaction abortable: it is aborted and the task's work since "
        r"its last commit is done again when the task runs again, whatever the handler answers",
        error,
        re.DOTALL,
    ), error
    assert len(SEEN) == 1  # the handler was asked, as in Kafka Streams
    (event,) = [e for e in logs if e["event"] == "delivery_failed_transaction_aborted"]
    assert (event["handler_result"], event["dead_letter_records_not_sent"]) == ("resume", 1)
    assert run.group() == {}
    kept, aborted = committed_records(run.bootstrap, run.output)
    assert kept == [] and [r.value for r in aborted] == [b"one", b"three"]
    assert read_topic(run.bootstrap, TOPICS["dlq"], timeout_s=10) == []
