"""Patience (runtime/patience.py): which errors are waited out, the deadline, the warning,
the interruption. No broker: the errors are librdkafka's own KafkaError values."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from structlog.testing import capture_logs

from processor_api.errors import (
    BrokerUnavailableError,
    StreamsError,
    TaskTimeoutError,
    WaitInterrupted,
)
from processor_api.runtime import patience as patience_module
from processor_api.runtime.patience import Patience, is_transient


def _kafka(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def _wrapped(exc: BaseException) -> StreamsError:
    try:
        raise StreamsError("a step failed") from exc
    except StreamsError as wrapped:
        return wrapped


def test_errors_that_say_the_broker_did_not_answer_are_transient():
    assert is_transient(_kafka(KafkaError._TIMED_OUT))
    assert is_transient(_wrapped(_kafka(KafkaError._TRANSPORT)))
    assert is_transient(BrokerUnavailableError("no broker"))
    assert not is_transient(_wrapped(_kafka(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_transient(ValueError("a bug"))
    assert not is_transient(StreamsError("no cause"))


def test_a_transient_failure_is_retried_until_the_call_succeeds(monkeypatch):
    monkeypatch.setattr(patience_module, "RETRY_PAUSE_S", 0.0)
    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _kafka(KafkaError._TIMED_OUT)
        return "done"

    assert Patience("0_0", "b:9092", 60_000).call("producer", "x", call) == "done"
    assert len(calls) == 3


def test_any_other_error_is_raised_at_once():
    calls = []

    def call() -> None:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        Patience("0_0", "b:9092", 60_000).call("producer", "x", call)
    assert len(calls) == 1


def test_past_task_timeout_one_line_names_task_broker_client_and_what(monkeypatch):
    monkeypatch.setattr(patience_module, "RETRY_PAUSE_S", 0.0)

    def call() -> None:
        raise _kafka(KafkaError._TRANSPORT)

    with pytest.raises(TaskTimeoutError) as caught:
        Patience("1_2", "b:9092", 50).call("consumer group", "the offset commit", call)
    text = str(caught.value)
    assert "\n" not in text
    for part in ("task 1_2", "b:9092", "consumer group client", "the offset commit",
                 "task.timeout.ms=50", "_TRANSPORT"):  # fmt: skip
        assert part in text, text


def test_a_long_wait_is_reported_once_and_its_end_too(monkeypatch):
    monkeypatch.setattr(patience_module, "STALL_WARNING_S", 0.0)
    monkeypatch.setattr(patience_module, "RETRY_PAUSE_S", 0.0)
    results = iter([False, False, True])
    with capture_logs() as logs:
        Patience("0_0", "b:9092", 60_000).until("producer", "acks", lambda s: next(results))
    events = [e["event"] for e in logs]
    assert events == ["task_waiting_for_broker", "task_broker_wait_over"], logs
    assert logs[0]["waiting_for"] == "acks" and logs[0]["client"] == "producer"


def test_an_interruption_ends_the_wait():
    patience = Patience("0_0", "b:9092", 60_000)
    patience.interrupted = lambda waited_s: "the run stops"
    with pytest.raises(WaitInterrupted, match="the run stops"):
        patience.until("producer", "acks", lambda s: False)


def test_observe_warns_then_times_out(monkeypatch):
    monkeypatch.setattr(patience_module, "STALL_WARNING_S", 0.0)
    patience = Patience("0_0", "b:9092", 60_000)
    with capture_logs() as logs:
        patience.observe("consumer", "records", None)
        patience.observe("consumer", "records", patience_module.time.monotonic())
        patience.observe("consumer", "records", None)
    assert [e["event"] for e in logs] == ["task_waiting_for_broker", "task_broker_wait_over"]
    with pytest.raises(TaskTimeoutError, match="consumer client"):
        patience.observe("consumer", "records", patience_module.time.monotonic() - 61)
