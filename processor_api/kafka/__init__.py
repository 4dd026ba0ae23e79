"""Kafka clients: admin helpers, changelog reader, transactions, topic names, safe producer, true end offsets, partitioner.

Every client built here routes librdkafka's log lines to structlog (see
:class:`processor_api.kafka.admin.LibrdkafkaLogger`).
"""

from processor_api.kafka.admin import TopicSpec, check_broker, ensure_topics, topic_partitions
from processor_api.kafka.offsets import beginning_offsets, end_offsets
from processor_api.kafka.partitioner import default_partition, murmur2, to_positive
from processor_api.kafka.producer import DeliveryTracker, make_producer

__all__ = [
    "DeliveryTracker",
    "TopicSpec",
    "beginning_offsets",
    "check_broker",
    "default_partition",
    "end_offsets",
    "ensure_topics",
    "make_producer",
    "murmur2",
    "to_positive",
    "topic_partitions",
]
