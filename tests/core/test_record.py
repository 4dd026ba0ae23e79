"""Record validation (fast path and full checks) and record metadata as processors see it."""

from __future__ import annotations

import pytest

from processor_api import Processor, PunctuationType, Record, Topology
from processor_api.processor import RecordMetadata
from processor_api.testing import TopologyTestDriver


class IntSubclass(int):
    pass


def test_plain_record_keeps_its_fields():
    record = Record("k", "v", 5)
    assert (record.key, record.value, record.timestamp, record.headers) == ("k", "v", 5, ())
    assert Record("k", "v").timestamp == 0


@pytest.mark.parametrize(
    ("timestamp", "error", "match"),
    [
        (-1, ValueError, ">= 0"),
        (True, TypeError, "must be an int"),
        (1.0, TypeError, "must be an int"),
        ("5", TypeError, "must be an int"),
        (None, TypeError, "must be an int"),
    ],
)
def test_bad_timestamps_are_rejected(timestamp, error, match):
    with pytest.raises(error, match=match):
        Record("k", "v", timestamp)


def test_int_subclass_timestamp_takes_the_full_check():
    assert Record("k", "v", IntSubclass(7)).timestamp == 7
    with pytest.raises(ValueError, match=">= 0"):
        Record("k", "v", IntSubclass(-7))


def test_headers_are_normalized_and_checked():
    assert Record("k", "v", 1, [("h", bytearray(b"x"))]).headers == (("h", b"x"),)
    assert Record("k", "v", 1, None).headers == ()
    assert Record("k", "v", 1, (("a", b"1"), ("a", None))).headers == (("a", b"1"), ("a", None))
    with pytest.raises(TypeError, match="header name"):
        Record("k", "v", 1, [(1, b"x")])
    with pytest.raises(TypeError, match="value must be bytes"):
        Record("k", "v", 1).with_headers([("h", "text")])
    with pytest.raises(ValueError, match=">= 0"):
        Record("k", "v", -1, (("h", b"x"),))


def test_record_metadata_is_made_per_record_and_none_in_punctuation():
    seen: list = []

    class Probe(Processor):
        def init(self, context):
            self.context = context
            seen.append(("init", context.record_metadata()))
            context.schedule(10, PunctuationType.STREAM_TIME, self.tick)

        def tick(self, timestamp):
            seen.append(("tick", self.context.record_metadata()))

        def process(self, record):
            first = self.context.record_metadata()
            assert self.context.record_metadata() is first  # one object per record
            seen.append((record.value, first))

    topology = Topology().add_source("s", "in").add_processor("p", Probe, "s")
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in")
        topic.pipe_input(b"k", b"a", timestamp=5)
        topic.pipe_input(b"k", b"b", timestamp=12)
    partition = 0
    assert seen == [
        ("init", None),
        (b"a", RecordMetadata("in", partition, 0)),
        ("tick", None),
        (b"b", RecordMetadata("in", partition, 1)),
        ("tick", None),
    ]
