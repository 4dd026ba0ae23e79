"""Client settings that keep the local development broker (Tansu) from falling behind.

Tansu 0.6 with memory storage keeps every record batch as its own object and never deletes
one (``retention.ms`` and ``retention.bytes`` are not applied), and a produce or fetch request
costs it time in proportion to the batches the partition already holds. A producer that sends
many small batches (librdkafka's default ``linger.ms`` of 5 at a few thousand records/s) makes
every request dearer each second until the broker saturates a core and every client's latency
grows without bound; fewer, larger batches push that point out by the square of the factor
(fewer requests, each over fewer batches). ``docs/running/local-broker.md`` has the figures.

So a run against Tansu (``run-topology --embedded-broker``, or ``--bootstrap-servers`` of a
``processor-api broker``, told by the cluster id it reports) gives the runtime's producers
:data:`TANSU_PRODUCER_LINGER_MS` unless the user set ``linger.ms`` (or its alias
``queue.buffering.max.ms``) for producers. Apache Kafka gets none of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: ``linger.ms`` of the runtime's producers against Tansu (librdkafka's default is 5).
TANSU_PRODUCER_LINGER_MS = 50
#: How long the cluster id look-up may take; a broker that does not answer is left as it is.
CLUSTER_ID_TIMEOUT_S = 5.0
_LINGER_KEYS = ("linger.ms", "queue.buffering.max.ms")


def is_tansu(cluster_id: str | None) -> bool:
    """Whether a broker reporting ``cluster_id`` is Tansu (its default id is
    ``tansu_cluster``)."""
    return cluster_id is not None and "tansu" in cluster_id.lower()


def broker_is_tansu(
    bootstrap_servers: str,
    kafka: KafkaClientConfig | None = None,
    timeout_s: float = CLUSTER_ID_TIMEOUT_S,
) -> bool | None:
    """Whether the broker at ``bootstrap_servers`` is Tansu; None when it does not answer."""
    try:
        with AdminClient(client_config(bootstrap_servers, "cluster-id", kafka=kafka)) as admin:
            described = admin.describe_cluster(request_timeout=timeout_s).result()
    except Exception as exc:  # noqa: BLE001 - unknown: the run reports an unreachable broker
        _log.debug("cluster_id_unknown", bootstrap_servers=bootstrap_servers, error=str(exc))
        return None
    return is_tansu(described.cluster_id)


def with_tansu_defaults(kafka: Mapping[str, Any]) -> dict[str, Any]:
    """``kafka`` (``--kafka-config`` settings) plus ``producer.linger.ms`` =
    :data:`TANSU_PRODUCER_LINGER_MS` unless producers already get a ``linger.ms``."""
    producer = KafkaClientConfig.from_dict(kafka).for_role("producer")
    if any(key in producer for key in _LINGER_KEYS):
        return dict(kafka)
    return {**kafka, "producer.linger.ms": TANSU_PRODUCER_LINGER_MS}
