"""The driver's setup check (``engine/setup_check.py``): every processor built and its
``init()`` run against real stores, no broker, no Spark. A setup error stops the run with the
error the running task raises (the test driver runs the same tasks, so it shows that error);
a failure of the processor's own code is a warning."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta

import pytest
from structlog.testing import capture_logs

from processor_api import (
    ProcessingError,
    Processor,
    PunctuationType,
    Record,
    Serdes,
    StoreError,
    Stores,
    StreamsError,
    Topology,
    TopologyError,
)
from processor_api.config import StreamsConfig
from processor_api.engine.setup_check import check_setup
from processor_api.errors import SetupCheckError
from processor_api.testing import TopologyTestDriver

CONFIG = StreamsConfig.from_dict({"application_id": "setup-check"})


def counts_store(name: str = "counts-store"):
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(name), Serdes.string(), Serdes.long()
    )


def topology_with(supplier, *stores, extra_sink: str | None = None) -> Topology:
    """``in`` -> processor ``p`` (``supplier``, connected to ``stores``) -> sink ``out``."""
    topology = (
        Topology()
        .add_source("in", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("p", supplier, "in")
        .add_sink("out", "out", "p", key_serde=Serdes.string(), value_serde=Serdes.string())
    )
    for store in stores:
        topology.add_state_store(store, "p")
    if extra_sink:
        topology.add_sink(
            extra_sink, extra_sink, "p", key_serde=Serdes.string(), value_serde=Serdes.long()
        )
    return topology


def running_task_error(topology: Topology) -> StreamsError:
    """What the task engine raises when it starts ``topology``'s tasks."""
    with pytest.raises(StreamsError) as raised:
        TopologyTestDriver(topology, {"application_id": "setup-check"}).close()
    return raised.value


def assert_check_raises_what_the_task_raises(topology: Topology, expected_type: type) -> str:
    running = running_task_error(topology)
    assert type(running) is expected_type
    with pytest.raises(SetupCheckError) as checked:
        check_setup(topology, CONFIG)
    message = str(checked.value)
    assert message.startswith(str(running)), message
    assert "init() of processor 'p', task 0_0" in message
    assert type(checked.value.__cause__) is expected_type
    return message


class StoreTypo(Processor):
    def init(self, context):
        self.store = context.get_state_store("count-store")

    def process(self, record):
        pass


def test_unknown_store_name_is_the_tasks_store_error():
    message = assert_check_raises_what_the_task_raises(
        topology_with(StoreTypo, counts_store()), StoreError
    )
    assert "processor 'p' cannot access state store 'count-store': no such store" in message
    assert "['counts-store']" in message


def test_a_setup_check_error_is_a_topology_error():
    # run-topology exits 2 for a TopologyError (bad setup), 1 for a failed run
    with pytest.raises(TopologyError):
        check_setup(topology_with(StoreTypo, counts_store()), CONFIG)


def test_store_not_connected_to_the_processor():
    class Other(Processor):
        def init(self, context):
            context.get_state_store("elsewhere")

        def process(self, record):
            pass

    topology = topology_with(Other)
    topology.add_processor("q", Other, "in")
    topology.add_state_store(counts_store("elsewhere"), "q")
    message = assert_check_raises_what_the_task_raises(topology, StoreError)
    assert "it is not connected to this processor" in message


@pytest.mark.parametrize(
    ("schedule", "cause"),
    [
        ({"interval": 0}, ValueError),
        ({"interval": "10"}, TypeError),
        ({"interval": 10, "type": "stream_time"}, TypeError),
        ({"interval": 10, "start_time": datetime(2026, 1, 1)}, ValueError),  # no time zone
    ],
)
def test_bad_schedules(schedule, cause):
    class BadSchedule(Processor):
        def init(self, context):
            context.schedule(punctuator=lambda ts: None, **schedule)

        def process(self, record):
            pass

    topology = topology_with(BadSchedule)
    message = assert_check_raises_what_the_task_raises(topology, ProcessingError)
    assert f"init() raised {cause.__name__}" in message


def test_forward_to_an_unknown_child():
    class ForwardTypo(Processor):
        def init(self, context):
            context.forward(Record("k", "hello", 0), child="ot")

        def process(self, record):
            pass

    message = assert_check_raises_what_the_task_raises(topology_with(ForwardTypo), ProcessingError)
    assert "forwarded to unknown child 'ot'" in message


def test_forward_of_something_else_than_a_record():
    class ForwardsATuple(Processor):
        def init(self, context):
            context.forward(("k", "hello"))

        def process(self, record):
            pass

    message = assert_check_raises_what_the_task_raises(
        topology_with(ForwardsATuple), ProcessingError
    )
    assert "init() raised TypeError: processor 'p' forwarded tuple, expected a Record" in message


def test_forward_all_with_a_bad_timestamp():
    class BadTimestamp(Processor):
        def init(self, context):
            context.forward_all([("k", "v")], -5, child="out")

        def process(self, record):
            pass

    assert_check_raises_what_the_task_raises(topology_with(BadTimestamp), ProcessingError)


def test_a_store_used_as_another_kind():
    class WindowedUse(Processor):
        def init(self, context):
            store = context.get_state_store("counts-store")
            store.fetch("k", 0, 1_000)  # a window store's method; this one is key-value

        def process(self, record):
            pass

    message = assert_check_raises_what_the_task_raises(
        topology_with(WindowedUse, counts_store()), ProcessingError
    )
    assert "AttributeError" in message and "fetch" in message


class PutCustomer(Processor):
    def init(self, context):
        self.store = context.get_state_store("customers")

    def process(self, record):
        self.store.put(record.key, record.value)


def global_topology(updater) -> Topology:
    customers = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("customers"), Serdes.string(), Serdes.json()
    ).with_logging_disabled()
    return Topology().add_global_store(
        customers, "customers-source", "customers", "customers-updater", updater
    )


def test_a_global_processor_that_schedules():
    class Scheduling(PutCustomer):
        def init(self, context):
            super().init(context)
            context.schedule(1000, PunctuationType.WALL_CLOCK_TIME, lambda ts: None)

    topology = (
        global_topology(Scheduling).add_source("in", "in").add_processor("p", StoreTypo, "in")
    )
    running = running_task_error(topology)
    with pytest.raises(SetupCheckError) as checked:
        check_setup(topology, CONFIG)
    message = str(checked.value)
    assert message.startswith(str(running))
    assert "global store processor 'customers-updater' cannot schedule" in message
    # the tasks are checked too: every setup error is in the message
    assert "cannot access state store 'count-store'" in message


def test_a_task_processor_reads_a_global_store_and_may_not_write_it():
    class WritesGlobal(Processor):
        def init(self, context):
            customers = context.get_state_store("customers")
            assert customers.get("c1") is None  # found: a real, empty store
            customers.put("c1", {"name": "Ada"})  # refused: read-only view

        def process(self, record):
            pass

    topology = global_topology(PutCustomer).add_source("in", "in")
    topology.add_processor("p", WritesGlobal, "in")
    with pytest.raises(SetupCheckError, match="read-only"):
        check_setup(topology, CONFIG)


class Lifecycle(Processor):
    """Records its calls in ``Lifecycle.calls``; writes its store and forwards in init()."""

    calls: list[tuple[str, int]] = []

    def init(self, context):
        Lifecycle.calls.append(("init", os.getpid()))
        self.context = context
        self.store = context.get_state_store("counts-store")
        assert self.store.get("k") is None  # a fresh store every time
        self.store.put("k", 1)
        context.schedule(timedelta(seconds=10), PunctuationType.WALL_CLOCK_TIME, self.tick)
        context.forward(Record("k", "from init", 0), child="out")
        with self.store.all() as entries:
            context.forward_all(entries, 0, child="counts")

    def tick(self, timestamp):
        Lifecycle.calls.append(("tick", timestamp))

    def process(self, record):
        pass

    def close(self):
        Lifecycle.calls.append(("close", os.getpid()))


def test_a_correct_topology_passes_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(Lifecycle, "calls", [])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the check's stores go
    topology = topology_with(Lifecycle, counts_store(), extra_sink="counts")
    with capture_logs() as logs:
        assert check_setup(topology, CONFIG) == []
        assert check_setup(topology, CONFIG) == []  # nothing kept from the first check
    pid = os.getpid()
    # init() then close(), once per check; no punctuation fired
    assert Lifecycle.calls == [("init", pid), ("close", pid)] * 2
    assert [e["event"] for e in logs if e["event"].startswith("setup_check")] == [
        "setup_checked",
        "setup_checked",
    ]
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    assert list(tmp_path.iterdir()) == []  # the stores' directory is gone


class NeedsTheExecutors(Processor):
    """Its init() reads a setting only the executors have."""

    def init(self, context):
        self.context = context
        self.url = os.environ["SETUP_CHECK_TEST_LOOKUP_URL"]

    def process(self, record):
        self.context.forward(record.with_value(self.url))


def test_a_failure_of_the_processors_own_code_is_a_warning_and_the_rest_is_checked():
    assert "SETUP_CHECK_TEST_LOOKUP_URL" not in os.environ
    topology = topology_with(NeedsTheExecutors)
    with capture_logs() as logs:
        failures = check_setup(topology, CONFIG)
    assert [(f.task_id, f.processor, f.phase) for f in failures] == [("0_0", "p", "init")]
    assert str(failures[0].error) == (
        "init() raised KeyError: 'SETUP_CHECK_TEST_LOOKUP_URL' (task=0_0, processor=p)"
    )
    warning = next(e for e in logs if e["event"] == "setup_check_init_failed")
    assert warning["log_level"] == "warning"
    assert warning["processor"] == "p" and warning["task"] == "0_0"
    assert "SETUP_CHECK_TEST_LOOKUP_URL" in warning["error"]

    # a setup error of a later processor still stops the run
    topology.add_processor("q", StoreTypo, "in")
    with pytest.raises(SetupCheckError, match="processor 'q' cannot access state store"):
        check_setup(topology, CONFIG)


def test_an_error_of_a_child_processing_a_record_forwarded_by_init_is_the_childs():
    class Forwards(Processor):
        def init(self, context):
            context.forward(Record("k", "v", 0))

        def process(self, record):
            pass

    class Fails(Processor):
        def process(self, record):
            raise ConnectionError("no lookup service here")

    topology = Topology().add_source("in", "in").add_processor("p", Forwards, "in")
    topology.add_processor("child", Fails, "p")
    with capture_logs():
        failures = check_setup(topology, CONFIG)
    assert len(failures) == 1 and "no lookup service here" in str(failures[0].error)


def test_a_supplier_that_fails_is_a_warning_one_that_returns_no_processor_an_error():
    def failing_supplier():
        raise ConnectionError("model server unreachable")

    with capture_logs():
        failures = check_setup(topology_with(failing_supplier), CONFIG)
    assert [(f.task_id, f.processor, f.phase) for f in failures] == [("0_0", None, "supplier")]

    with pytest.raises(SetupCheckError, match="supplier of processor 'p' returned 42"):
        check_setup(topology_with(lambda: 42), CONFIG)


def test_a_global_supplier_that_fails_is_a_warning_and_no_task_is_checked():
    def failing_supplier():
        raise ConnectionError("customer service unreachable")

    topology = global_topology(failing_supplier).add_source("in", "in")
    topology.add_processor("p", StoreTypo, "in")  # not checked: no global stores to read
    with capture_logs():
        failures = check_setup(topology, CONFIG)
    assert [(f.task_id, f.processor, f.phase) for f in failures] == [("-1_-1", None, "supplier")]


def test_a_failing_close_is_a_warning():
    class FailsOnClose(Processor):
        def process(self, record):
            pass

        def close(self):
            raise OSError("already gone")

    with capture_logs():
        failures = check_setup(topology_with(FailsOnClose), CONFIG)
    assert [(f.processor, f.phase) for f in failures] == [("p", "close")]


def test_every_processor_is_closed_when_the_check_fails(monkeypatch):
    monkeypatch.setattr(Lifecycle, "calls", [])
    topology = topology_with(Lifecycle, counts_store(), extra_sink="counts")
    topology.add_processor("q", StoreTypo, "in")
    with pytest.raises(SetupCheckError):
        check_setup(topology, CONFIG)
    assert [call for call, _ in Lifecycle.calls] == ["init", "close"]
