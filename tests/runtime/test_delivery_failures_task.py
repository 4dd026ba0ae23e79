"""A record the producer reports undeliverable after it was sent (in its
delivery report) goes to the ``production.exception.handler`` of the task, on the embedded
broker, through the epoch task runner (without Spark).

The undeliverable record is real: the processing handler of the topology dead-letters the
record that fails to a partition its dead-letter topic does not have. The topic is created
after the task was built and its producer connected (a first, empty epoch: end offset 0), so
the producer does not know the topic when the record comes, accepts it and reports
``_UNKNOWN_PARTITION`` in its delivery report. The epoch that processes the three input
records ends at their end offset (3), committing unless the failed delivery fails it.

The producer may learn the topic's one partition before it queued the record, and then
refuses it in ``produce()`` instead (a ``RecordSendError``, a few runs in a hundred): the
embedded broker answers every metadata request with every topic, and the producer's own
request for the unknown topic, sent from inside ``produce()``, can be answered before that
call queued the record. This scenario needs the delivery report, so it is run again with a
new producer and new topics then (:func:`second_epoch`), up to :data:`ATTEMPTS` times.
"""

from __future__ import annotations

import re
import time

import pytest
from structlog.testing import capture_logs

from processor_api import Processor, Record, Serdes, Topology
from processor_api.error_handlers import DeadLetterRecord, HandlerResponse
from processor_api.errors import DeliveryError, RecordSendError
from processor_api.kafka.group import committed_offsets
from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime.epoch_runner import EpochControl, EpochTaskRunner
from processor_api.runtime.protocol import EpochEnd, EpochReply, EpochRequest
from tests.harness.task_runs import one_task
from tests.harness.topics import committed_records, produce, read_topic, uid

pytestmark = pytest.mark.integration  # every test here uses the embedded broker

HERE = __name__
MISSING_PARTITION = 3
#: An epoch that has not reached its end offset by then ends (and fails the test).
EPOCH_LIMIT_S = 60.0
#: Runs of the scenario while the producer refuses the record in ``produce()`` (module docs).
ATTEMPTS = 3
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
    """An epoch task runner over ``in -> check -> out`` whose first (empty) epoch ran."""

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
        self.spec, self.runner = one_task(
            EpochTaskRunner,
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
            input_topic=self.input,
        )
        first = self.epoch(None, 0, epoch=1)  # the task is built, its producer connected
        assert (first.processed, first.rebuilt) == (0, True)
        self.state = first.metadata_json
        kafka.create_topic(TOPICS["lost"], 1)  # unknown to the producer's metadata

    def epoch(self, state: str | None, end_offset: int, epoch: int) -> EpochReply:
        """One epoch that ends once the input is processed up to ``end_offset``; it fails
        the test if it ends by its time limit instead."""
        end = EpochEnd(duration_s=EPOCH_LIMIT_S, end_offsets={(self.input, 0): end_offset})
        started = time.monotonic()
        reply = self.runner.run_epoch(
            EpochRequest(self.spec, "0_0", state, epoch, end), EpochControl(connected=lambda: True)
        )
        took_s = time.monotonic() - started
        assert took_s < EPOCH_LIMIT_S, f"epoch {epoch} did not reach offset {end_offset}: {reply}"
        return reply

    def process_the_input(self) -> EpochReply:
        """The epoch that processes the three input records (the second epoch)."""
        reply = self.epoch(self.state, 3, epoch=2)
        assert not reply.rebuilt  # the task of the first epoch goes on
        return reply

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


def second_epoch(
    runs, kafka, tmp_path, production_handler: str, guarantee: str
) -> tuple[Run, EpochReply | DeliveryError, list[dict]]:
    """A :class:`Run` and its second epoch: the reply, or the ``DeliveryError`` that failed
    it; and the logs of that epoch. Run again while the producer refuses the dead-letter
    record in ``produce()`` instead of reporting it in a delivery report (module docs)."""
    for attempt in range(1, ATTEMPTS + 1):
        run = runs(kafka, tmp_path / str(attempt), production_handler, guarantee)
        with capture_logs() as logs:
            try:
                return run, run.process_the_input(), logs
            except DeliveryError as exc:
                return run, exc, logs
            except RecordSendError as exc:
                if attempt == ATTEMPTS or "_UNKNOWN_PARTITION" not in str(exc):
                    raise
    raise AssertionError("unreachable")


def test_continue_drops_the_undeliverable_record_and_the_epoch_commits(kafka, tmp_path, runs):
    run, result, logs = second_epoch(runs, kafka, tmp_path, "log_and_continue", "at_least_once")
    assert isinstance(result, EpochReply), result
    assert (result.processed, result.dropped_records) == (3, 1)
    assert run.group() == {(run.input, 0): 3}
    assert run.output_values() == [b"one", b"three"]
    (dropped,) = [e for e in logs if e["event"] == "delivery_failed_record_dropped"]
    assert dropped["log_level"] == "warning"
    assert (dropped["topic"], dropped["partition"]) == (TOPICS["lost"], MISSING_PARTITION)
    assert "_UNKNOWN_PARTITION" in dropped["error"]


def test_fail_fails_the_epoch_naming_topic_partition_and_cause(kafka, tmp_path, runs):
    run, result, _ = second_epoch(runs, kafka, tmp_path, "log_and_fail", "at_least_once")
    assert isinstance(result, DeliveryError), result
    assert str(result) == (
        f"delivery to topic '{TOPICS['lost']}' partition 3 failed: _UNKNOWN_PARTITION: "
        "Local: Unknown partition; 1 record(s) failed in total; the production exception "
        "handler processor_api.error_handlers:log_and_fail answered fail"
    )
    assert run.group() == {}  # nothing committed past the failed epoch


def test_a_user_handler_dead_letters_the_undeliverable_record(kafka, tmp_path, runs):
    handler = f"{HERE}:dead_letter_undeliverable"
    run, result, _ = second_epoch(runs, kafka, tmp_path, handler, "at_least_once")
    assert isinstance(result, EpochReply), result
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
    handler = f"{HERE}:dead_letter_undeliverable"
    run, result, logs = second_epoch(runs, kafka, tmp_path, handler, "exactly_once_v2")
    assert isinstance(result, DeliveryError), f"the epoch committed: {result}"
    error = str(result)
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
