"""Java-compatible murmur2 partitioning, checked against Kafka's vectors and librdkafka."""

from __future__ import annotations

import pytest

from processor_api.kafka.partitioner import default_partition, murmur2, to_positive
from processor_api.kafka.producer import make_producer
from tests.harness.topics import uid

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (apache/kafka, clients module).
KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_UTILS_TEST_VECTORS.items())
def test_murmur2_matches_kafka_utils_test(data, expected):
    assert murmur2(data) == expected


def test_murmur2_accepts_bytes_like_and_is_signed_32_bit():
    assert murmur2(bytearray(b"21")) == murmur2(memoryview(b"21")) == -973932308
    values = [murmur2(b"key-%d" % i) for i in range(500)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values) and any(v > 0 for v in values)


def test_to_positive_clears_the_sign_bit_like_java():
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF == 1173551340
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; toPositive gives 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(479470107) == 479470107


def test_default_partition():
    assert default_partition(b"21", 16) == 1173551340 % 16
    assert default_partition(b"abc", 7) == 479470107 % 7
    assert default_partition(b"anything", 1) == 0
    with pytest.raises(ValueError, match="num_partitions"):
        default_partition(b"k", 0)


@pytest.mark.integration
def test_librdkafka_murmur2_random_puts_keys_where_java_would(kafka):
    topic = uid("part")
    partitions = 7
    kafka.create_topic(topic, partitions)
    producer = make_producer(kafka.bootstrap_servers)
    keys = [b""] + [b"key-%d" % i for i in range(300)] + list(KAFKA_UTILS_TEST_VECTORS)
    placed: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(error, message):
        if error is not None:
            errors.append(error)
        else:
            placed[message.key()] = message.partition()

    for key in keys:
        producer.produce(topic, key=key, value=b"v", on_delivery=on_delivery)
    assert producer.flush(10) == 0
    assert errors == []
    assert len(placed) == len(keys)
    mismatches = {k: p for k, p in placed.items() if p != default_partition(k, partitions)}
    assert mismatches == {}
    assert len(set(placed.values())) == partitions  # keys really were spread
