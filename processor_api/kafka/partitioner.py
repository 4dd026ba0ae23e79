"""Java Kafka's default partitioning of keyed records, in Python.

``default_partition(key, n)`` is what the Java producer's ``BuiltInPartitioner.partitionForKey``
(and the older ``DefaultPartitioner``) computes for a record with a non-null key:
``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions``. librdkafka's
``partitioner=murmur2_random`` producer computes the same for non-null keys, so records produced
by Python, Java and Kafka Streams land on the same partitions.
"""

from __future__ import annotations

import struct

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2``: 32-bit murmur2, as a signed Java int."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:body]):
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """``Utils.toPositive``: clear the sign bit of a 32-bit int (not ``abs``)."""
    return number & 0x7FFFFFFF


def default_partition(key_bytes: bytes, num_partitions: int) -> int:
    """Partition Java's default partitioner picks for a record whose serialized key is given."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if key_bytes is None:
        raise ValueError("a null key has no hash partition (Java and librdkafka pick one freely)")
    return to_positive(murmur2(key_bytes)) % num_partitions
