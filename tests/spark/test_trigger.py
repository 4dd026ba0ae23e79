"""The trigger interval chosen from the wall-clock schedules processors register in init()."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api import Processor, PunctuationType, Serdes, Stores, Topology
from processor_api.config import StreamsConfig
from processor_api.spark.trigger import choose_trigger_s, wall_clock_intervals_ms


class Scheduling(Processor):
    def __init__(self, wall_ms=(), stream_ms=(), cancel=False, fail=False, uses_store=True):
        self.wall_ms, self.stream_ms, self.cancel, self.fail = wall_ms, stream_ms, cancel, fail
        self.uses_store = uses_store

    def init(self, context):
        if self.fail:
            raise RuntimeError("needs the production database")
        if self.uses_store:
            context.get_state_store("counts").put("probe", 1)  # stores are usable in init()
        for interval in self.wall_ms:
            schedule = context.schedule(interval, PunctuationType.WALL_CLOCK_TIME, lambda ts: None)
            if self.cancel:
                schedule.cancel()
        for interval in self.stream_ms:
            context.schedule(interval, PunctuationType.STREAM_TIME, lambda ts: None)

    def process(self, record):
        pass


def topology(**options):
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source("src", "in", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("p", lambda: Scheduling(**options), "src")
        .add_state_store(store, "p")
    )


CONFIG = StreamsConfig(application_id="trigger-test")


def test_intervals_of_every_sub_topology_are_found():
    store = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    two = (
        Topology()
        .add_source("a", "in-a", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("p", lambda: Scheduling(wall_ms=(5_000, 2_000), stream_ms=(10,)), "a")
        .add_state_store(store, "p")
        .add_source("b", "in-b", key_serde=Serdes.string(), value_serde=Serdes.string())
        .add_processor("q", lambda: Scheduling(wall_ms=(700,), uses_store=False), "b")
    )
    assert len(two.subtopologies()) == 2
    assert wall_clock_intervals_ms(two, CONFIG) == [700, 2_000, 5_000]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"wall_ms": (1_000,)}, 0.25),
        ({"wall_ms": (10_000, 2_000)}, 0.5),
        ({"wall_ms": (100,)}, 0.1),  # never below the floor
        ({"wall_ms": (60_000,)}, 1.0),  # never above the default
        ({"stream_ms": (100,)}, 1.0),  # stream-time schedules do not need batches
        ({"wall_ms": (100,), "cancel": True}, 1.0),
        ({}, 1.0),
    ],
)
def test_trigger_is_a_quarter_of_the_smallest_wall_clock_interval(options, expected):
    assert choose_trigger_s(topology(**options), CONFIG) == expected


def test_an_init_that_fails_on_the_driver_keeps_the_default_and_says_so():
    with capture_logs() as logs:
        assert choose_trigger_s(topology(fail=True, wall_ms=(100,)), CONFIG) == 1.0
    warnings = [e for e in logs if e["event"] == "trigger_probe_failed"]
    assert len(warnings) == 1
    assert warnings[0]["error"] == (
        "ProcessingError: init() raised RuntimeError: needs the production database "
        "(task=0_0, processor=p)"
    )
