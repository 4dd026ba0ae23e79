"""Bad input: ``deserialization_exception_handler`` and
``processing_exception_handler`` (``log_and_fail`` default, ``log_and_continue``) with a
dead-letter topic, fed invalid JSON, a wrong-type value, an exception in ``process`` and an
exception in a punctuator.

The handler logic is the task engine's, shared by the test driver and Spark: the driver tests
cover every kind x handler in milliseconds; the Spark tests run ``run-topology`` (exactly-once,
so "nothing committed past the bad record" is checked on what a read_committed reader gets,
aborted transactions filtered by their markers, see ``tests.harness.wire.transaction_status``).

On Spark a task commits every ``commit.interval.ms`` (100 ms under exactly-once) inside its
epoch, so where its commits fall among records that arrive together is a matter of timing. The
tests make it certain: the input arrives in parts, the next part only once a commit covered
the last one (the task's ``task_committed`` debug event whose stream time reached that part's
last timestamp).
"""

from __future__ import annotations

import json

import pytest

from processor_api import Serdes
from processor_api.errors import ProcessingError
from processor_api.state.inspect import read_local_store
from processor_api.testing import TopologyTestDriver
from tests.harness.processes import CliRun, cli_args
from tests.harness.topics import committed_records, create_topics_now, produce, uid
from tests.reliability.topologies_for_tests import (
    PROCESSOR,
    SOURCE,
    STORE,
    build_amounts,
)

AMOUNTS = "tests.reliability.topologies_for_tests:build_amounts"
BASE_TS = 1_000_000
FAIL_PUNCTUATION_AT = BASE_TS + 5_000
BAD_JSON = b'{"amount": 3'
ERROR_HEADERS = (
    "exception",
    "message",
    "stacktrace",
    "topic",
    "partition",
    "offset",
    "processor",
    "task",
)


# ---------------------------------------------------------------- driver: every kind, handler


def _driver(**config):
    topology = build_amounts(
        input_topic="in", output_topic="out", fail_punctuation_at=FAIL_PUNCTUATION_AT
    )
    return TopologyTestDriver(topology, {"dead_letter_topic": "dlq", **config})


CASES = {
    # kind: (raw value bytes, timestamp, handler key, processor, cause type, offset known)
    "invalid_json": (
        BAD_JSON,
        BASE_TS + 1,
        "deserialization_exception_handler",
        SOURCE,
        "SerializationError",
        True,
    ),
    "wrong_type": (
        b'{"amount": "five"}',
        BASE_TS + 1,
        "processing_exception_handler",
        PROCESSOR,
        "TypeError",
        True,
    ),
    "raise_in_process": (
        b'{"explode": true}',
        BASE_TS + 1,
        "processing_exception_handler",
        PROCESSOR,
        "RuntimeError",
        True,
    ),
    "raise_in_punctuate": (
        b'{"amount": 5}',
        FAIL_PUNCTUATION_AT,
        "processing_exception_handler",
        PROCESSOR,
        "ValueError",
        False,
    ),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_log_and_fail_names_topic_partition_offset_processor_and_cause(kind):
    raw, timestamp, _, processor, cause, has_offset = CASES[kind]
    with _driver() as driver:
        good = driver.create_input_topic("in", Serdes.string(), Serdes.json())
        bad = driver.create_input_topic("in", Serdes.string(), Serdes.bytes())
        good.pipe_input("a", {"amount": 1}, timestamp=BASE_TS)
        with pytest.raises(ProcessingError) as failure:
            bad.pipe_input("a", raw, timestamp=timestamp)
        error = failure.value
        assert error.processor == processor
        assert type(error.__cause__).__name__ == cause, repr(error.__cause__)
        assert cause in str(error) and f"processor={processor}" in str(error)
        if has_offset:
            assert (error.topic, error.partition, error.offset) == ("in", 0, 1)
            assert "topic=in" in str(error) and "partition=0" in str(error)
            assert "offset=1" in str(error)
        else:  # a punctuation has no input record
            assert "punctuator" in str(error) and error.offset is None
        assert driver.create_output_topic("dlq", Serdes.bytes(), Serdes.bytes()).is_empty()


@pytest.mark.parametrize("kind", sorted(CASES))
def test_log_and_continue_skips_and_dead_letters_the_original_bytes(kind):
    raw, timestamp, handler, processor, cause, has_offset = CASES[kind]
    with _driver(**{handler: "log_and_continue"}) as driver:
        good = driver.create_input_topic("in", Serdes.string(), Serdes.json())
        bad = driver.create_input_topic("in", Serdes.string(), Serdes.bytes())
        good.pipe_input("a", {"amount": 1}, timestamp=BASE_TS)
        bad.pipe_input("a", raw, timestamp=timestamp, headers=[("origin", b"test")])
        good.pipe_input("a", {"amount": 10}, timestamp=timestamp + 1)
        totals = driver.create_output_topic("out").read_values_to_list()
        dead = driver.create_output_topic("dlq", Serdes.bytes(), Serdes.bytes())
        dead = dead.read_records_to_list()
        if has_offset:
            assert totals == [1, 11]  # the bad record changed nothing
            assert len(dead) == 1
            record = dead[0]
            assert (record.key, record.value, record.timestamp) == (b"a", raw, timestamp)
            headers = dict(record.headers)
            assert headers["origin"] == b"test"  # the original headers are kept
            for name in ERROR_HEADERS:
                assert f"__streams.errors.{name}" in headers, name
            assert headers["__streams.errors.exception"] == cause.encode()
            assert headers["__streams.errors.topic"] == b"in"
            assert headers["__streams.errors.partition"] == b"0"
            assert headers["__streams.errors.offset"] == b"1"
            assert headers["__streams.errors.processor"] == processor.encode()
            assert headers["__streams.errors.task"] == b"0_0"
            assert cause.encode() in headers["__streams.errors.stacktrace"]
        else:
            # the record itself was fine (total 6), the punctuator failed after it: logged only
            assert totals == [1, 6, 16]
            assert dead == []


# ------------------------------------------------------------------------------- on Spark


def _flow_records(topic: str) -> list[tuple[bytes, bytes, int, int]]:
    values = [
        (b"a", b'{"amount": 1}', 0),
        (b"b", b'{"amount": 2}', 1),
        (b"x", BAD_JSON, 2),  # offset 2: invalid JSON
        (b"a", b'{"amount": 4}', 3),
        (b"b", b'{"amount": "five"}', 4),  # offset 4: wrong type -> TypeError
        (b"a", b'{"amount": 6}', 5),
        (b"c", b'{"explode": true}', 6),  # offset 6: process() raises
        (b"b", b'{"amount": 8}', 7),
        (b"a", b'{"amount": 9}', 5_000),  # offset 8: the punctuator raises after it
        (b"c", b'{"amount": 10}', 5_001),
    ]
    return [(key, value, 0, BASE_TS + delta) for key, value, delta in values]


def _committed_totals(bootstrap: str, topic: str) -> dict[str, list[int]]:
    kept, _ = committed_records(bootstrap, topic)
    totals: dict[str, list[int]] = {}
    for record in sorted(kept, key=lambda r: r.offset):
        totals.setdefault(record.key.decode(), []).append(Serdes.long().deserialize(record.value))
    return totals


def _committed_through(run: CliRun, timestamp: int, timeout_s: float = 300) -> None:
    """Wait until the run's task committed what it processed up to the record of
    ``timestamp`` (its stream time reached it)."""
    run.wait_event(
        lambda e: e.name == "task_committed" and e.event.get("stream_time", -1) >= timestamp,
        timeout_s,
    )


@pytest.mark.integration
def test_bad_records_on_spark_fail_until_the_handler_changes_then_go_to_the_dead_letter_topic(
    kafka, tmp_path
):
    """One input partition, exactly-once, the input in three parts (offsets 0-1, 2-3, 4-9):

    run 1 (defaults, continuous): commits offsets 0 and 1; then offsets 2-3 arrive and it
    fails at offset 2 (invalid JSON), exit 1, the line names topic, partition, offset,
    processor and cause; the commit of [0, 1] is kept, nothing from offset 2 on is committed.
    run 2 (defaults, available-now): the same record fails the same way.
    run 3 (deserialization handler log_and_continue, continuous): offset 2 goes to the
    dead-letter topic, offset 3 is processed, both committed; then offsets 4-9 arrive and
    offset 4 (wrong type) fails in process(): nothing from offset 4 on is committed.
    run 4 (both handlers log_and_continue, available-now): offsets 4 and 6 go to the
    dead-letter topic, the punctuator's exception after offset 8 is logged, the run ends with
    exit 0; each bad record is in the dead-letter topic once.
    """
    bootstrap = kafka.bootstrap_servers
    run_id = uid()
    topics = {"in": f"bad-in-{run_id}", "out": f"bad-out-{run_id}", "dlq": f"bad-dlq-{run_id}"}
    create_topics_now(bootstrap, {topics["in"]: 1, topics["out"]: 1})
    flow = _flow_records(topics["in"])
    first_part, second_part, third_part = flow[:2], flow[2:4], flow[4:]
    produce(bootstrap, topics["in"], first_part)
    app_id = f"bad-{run_id}"
    state_dir = tmp_path / "state"

    def cli(number: int, available_now: bool, **handlers: str) -> CliRun:
        """Run ``number`` (started by ``with``)."""
        args = cli_args(
            AMOUNTS,
            bootstrap,
            app_id,
            state_dir,
            guarantee="exactly_once_v2",
            available_now=available_now,
            topology_args={
                "input_topic": topics["in"],
                "output_topic": topics["out"],
                "fail_punctuation_at": FAIL_PUNCTUATION_AT,
            },
            config={"dead_letter_topic": topics["dlq"], **handlers},
            extra=["--log-level", "debug"],  # task_committed
        )
        return CliRun(args, tmp_path / f"run-{number}.log")

    def run(number: int, **handlers: str) -> CliRun:
        """An available-now run to its end."""
        with cli(number, True, **handlers) as started:
            started.wait(300)
        return started

    def located(line: str, offset: int, processor: str, *causes: str) -> None:
        for part in (
            f"topic={topics['in']}",
            "partition=0",
            f"offset={offset}",
            f"processor={processor}",
            *causes,
        ):
            assert part in line, f"{part!r} missing from: {line}"

    def dead_letters() -> list[tuple[bytes, bytes]]:
        dead, _ = committed_records(bootstrap, topics["dlq"])
        return [(r.key, r.value) for r in dead]

    with cli(1, False) as first:
        _committed_through(first, first_part[-1][3])
        assert _committed_totals(bootstrap, topics["out"]) == {"a": [1], "b": [2]}
        produce(bootstrap, topics["in"], second_part)
        first.wait(300)
    assert first.returncode == 1, first.tail()
    line = first.error_line()
    assert line and line.startswith("run-topology: failed: "), first.tail()
    located(line, 2, SOURCE, "cannot deserialize", "SerializationError")
    assert _committed_totals(bootstrap, topics["out"]) == {"a": [1], "b": [2]}

    second = run(2)
    assert second.returncode == 1, second.tail()
    assert second.error_line() == line
    assert _committed_totals(bootstrap, topics["out"]) == {"a": [1], "b": [2]}

    with cli(3, False, deserialization_exception_handler="log_and_continue") as third:
        _committed_through(third, second_part[-1][3])
        assert _committed_totals(bootstrap, topics["out"]) == {"a": [1, 5], "b": [2]}
        assert dead_letters() == [(b"x", BAD_JSON)]
        produce(bootstrap, topics["in"], third_part)
        third.wait(300)
    assert third.returncode == 1, third.tail()
    located(third.error_line() or "", 4, PROCESSOR, "TypeError")
    assert _committed_totals(bootstrap, topics["out"]) == {"a": [1, 5], "b": [2]}
    assert dead_letters() == [(b"x", BAD_JSON)]

    fourth = run(
        4,
        deserialization_exception_handler="log_and_continue",
        processing_exception_handler="log_and_continue",
    )
    assert fourth.returncode == 0, fourth.tail()
    continued = [e.get("error", "") for e in fourth.find("processing_failed_continuing")]
    assert any(
        "punctuator" in e and "ValueError" in e and f"processor={PROCESSOR}" in e for e in continued
    ), continued
    assert _committed_totals(bootstrap, topics["out"]) == {
        "a": [1, 5, 11, 20],
        "b": [2, 10],
        "c": [10],
    }
    store = read_local_store(state_dir, app_id, STORE, Serdes.string(), Serdes.long())
    assert store == {"a": 20, "b": 10, "c": 10}

    dead, _ = committed_records(bootstrap, topics["dlq"])
    assert [(r.key, r.value) for r in dead] == [
        (b"x", BAD_JSON),
        (b"b", b'{"amount": "five"}'),
        (b"c", b'{"explode": true}'),
    ]
    expected = [
        ("SerializationError", SOURCE, 2),
        ("TypeError", PROCESSOR, 4),
        ("RuntimeError", PROCESSOR, 6),
    ]
    for record, (cause, processor, offset) in zip(dead, expected, strict=True):
        headers = dict(record.headers)
        for name in ERROR_HEADERS:
            assert f"__streams.errors.{name}" in headers, (name, headers)
        assert headers["__streams.errors.exception"] == cause.encode()
        assert headers["__streams.errors.processor"] == processor.encode()
        assert headers["__streams.errors.topic"] == topics["in"].encode()
        assert headers["__streams.errors.partition"] == b"0"
        assert headers["__streams.errors.offset"] == str(offset).encode()
        assert headers["__streams.errors.task"] == b"0_0"


@pytest.mark.integration
def test_punctuator_exception_on_spark_fails_the_task_and_commits_nothing_since_its_last_commit(
    kafka, tmp_path
):
    """log_and_fail: the exception of a punctuator stops the run (exit 1) naming the processor
    and the cause; what the task did since its last commit, the record whose stream time fired
    the punctuator included, is not committed (its output is aborted), and that commit is
    kept. The second record arrives once the first one's commit is made."""
    bootstrap = kafka.bootstrap_servers
    run_id = uid()
    topics = {"in": f"punct-in-{run_id}", "out": f"punct-out-{run_id}"}
    create_topics_now(bootstrap, {topics["in"]: 1, topics["out"]: 1})
    produce(bootstrap, topics["in"], [(b"a", json.dumps({"amount": 1}).encode(), 0, BASE_TS)])
    args = cli_args(
        AMOUNTS,
        bootstrap,
        f"punct-{run_id}",
        tmp_path / "state",
        guarantee="exactly_once_v2",
        available_now=False,
        topology_args={
            "input_topic": topics["in"],
            "output_topic": topics["out"],
            "fail_punctuation_at": FAIL_PUNCTUATION_AT,
        },
        extra=["--log-level", "debug"],  # task_committed
    )
    with CliRun(args, tmp_path / "run.log") as cli:
        _committed_through(cli, BASE_TS)
        kept, _ = committed_records(bootstrap, topics["out"])
        assert [Serdes.long().deserialize(r.value) for r in kept] == [1]
        produce(
            bootstrap,
            topics["in"],
            [(b"a", json.dumps({"amount": 2}).encode(), 0, FAIL_PUNCTUATION_AT)],
        )
        code = cli.wait(300)
    assert code == 1, cli.tail()
    line = cli.error_line() or ""
    for part in ("punctuator", "ValueError", f"processor={PROCESSOR}", "task=0_0"):
        assert part in line, f"{part!r} missing from: {line}"
    kept, aborted = committed_records(bootstrap, topics["out"])
    assert [Serdes.long().deserialize(r.value) for r in kept] == [1]
    # what Tansu shows a read_committed reader anyway (no aborted-transaction list): the
    # output of the failed commit interval, 3, from its aborted transaction
    assert [Serdes.long().deserialize(r.value) for r in aborted] in ([], [3])
