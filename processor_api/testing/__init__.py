"""Testing tools: :class:`TopologyTestDriver` (no broker, no Spark) and :class:`EmbeddedKafka`
(a real Kafka-protocol broker on loopback; needs the ``embedded`` extra, which ``dev`` pulls in).
"""

from processor_api.testing.driver import (
    NoSuchElementError,
    TestInputTopic,
    TestOutputTopic,
    TopologyTestDriver,
)
from processor_api.testing.embedded import EmbeddedKafka

__all__ = [
    "EmbeddedKafka",
    "NoSuchElementError",
    "TestInputTopic",
    "TestOutputTopic",
    "TopologyTestDriver",
]
