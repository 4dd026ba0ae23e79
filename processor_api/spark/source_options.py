"""The Kafka source's options, offsets and planning (driver side of ``kafka_source.py``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor_api.errors import ConfigError, MissingTopicError
from processor_api.kafka.client_config import KafkaClientConfig

SOURCE_NAME = "processor_api_kafka"

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


# --------------------------------------------------------------------------- offset helpers
def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Canonical JSON-able form ``{"topic": {"partition": offset}}``, topics and partitions sorted."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, Any]] | None) -> Offsets:
    """Inverse of :func:`offsets_to_json` (partition keys may be ints or decimal strings)."""
    out: Offsets = {}
    for topic, partitions in (data or {}).items():
        if not isinstance(partitions, Mapping):
            raise ConfigError(
                f"offsets for topic {topic!r} must be an object of partition -> offset, "
                f"got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                out[(str(topic), int(partition))] = int(offset)
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"bad offset {offset!r} for {topic}[{partition}]: expected integers"
                ) from exc
    return out


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    available: Mapping[TopicPartitionKey, int],
    max_records: int | None = None,
) -> Offsets:
    """End offsets of one micro-batch: at most ``max_records`` in total, spread max-min fairly.

    ``start`` is where each partition stands, ``available`` how far it could go (a partition
    missing from ``available``, or with ``available <= start``, stays at ``start``). Without
    ``max_records`` every partition goes to ``available``. With it, partitions with little data
    take all of it and the rest share the remainder equally; the records left over by integer
    division go one each to partitions picked in a rotation that depends on ``start``, so no
    partition starves when ``max_records`` is smaller than the number of busy partitions. The
    result always covers every key of ``start`` and is deterministic.
    """
    ends: Offsets = {tp: int(offset) for tp, offset in start.items()}
    lag = {tp: max(0, int(available.get(tp, s)) - s) for tp, s in ends.items()}
    busy = sorted(tp for tp, n in lag.items() if n > 0)
    if max_records is None or sum(lag.values()) <= max_records:
        for tp in busy:
            ends[tp] += lag[tp]
        return ends
    if max_records < 1:
        raise ConfigError(f"max_records must be >= 1, got {max_records}")
    grant = dict.fromkeys(busy, 0)
    budget = max_records
    open_ = list(busy)
    while budget > 0 and open_:
        share = budget // len(open_)
        if share == 0:
            # fewer records left than open partitions: one each, rotating with the position
            rotation = sum(start[tp] for tp in busy) % len(open_)
            for tp in (open_[rotation:] + open_[:rotation])[:budget]:
                grant[tp] += 1
            budget = 0
            break
        still_open = []
        for tp in open_:
            take = min(share, lag[tp] - grant[tp])
            grant[tp] += take
            budget -= take
            if grant[tp] < lag[tp]:
                still_open.append(tp)
        open_ = still_open
    for tp, n in grant.items():
        ends[tp] += n
    return ends


# --------------------------------------------------------------------------------- options
def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name!r} must be true or false, got {raw!r}")


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"option {name!r} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise ConfigError(f"option {name!r} must be >= 1, got {value}")
    return value


def _json_offsets(name: str, raw: str) -> Offsets:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"option {name!r} must be a JSON object {{topic: {{partition: offset}}}}")
    return offsets_from_json(data)


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Parsed, validated source options (picklable; see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "earliest"
    starting_offsets_json: Offsets | None = None
    end_offsets: Offsets | None = None
    max_records_per_batch: int | None = None
    isolation_level: str = "read_uncommitted"
    read_timeout_s: float = 60.0
    metadata_timeout_s: float = 30.0
    fail_on_data_loss: bool = True
    arrow_batch_rows: int = 10_000
    client_config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Parse Spark's (case-insensitive) option map; raises ``ConfigError`` naming the option."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        known = {
            "bootstrap.servers",
            "topics",
            "starting.offsets",
            "end.offsets",
            "max.records.per.batch",
            "isolation.level",
            "read.timeout.ms",
            "metadata.timeout.ms",
            "fail.on.data.loss",
            "arrow.batch.rows",
            "path",
        }
        unknown = sorted(k for k in opts if k not in known and not k.startswith("kafka."))
        if unknown:
            raise ConfigError(
                f"unknown option(s) for the {SOURCE_NAME} source: {', '.join(unknown)}"
                f" (known: {', '.join(sorted(known - {'path'}))}, kafka.<client config>)"
            )
        bootstrap = opts.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigError(f"the {SOURCE_NAME} source needs option 'bootstrap.servers'")
        topics = tuple(dict.fromkeys(t.strip() for t in opts.get("topics", "").split(",")))
        topics = tuple(t for t in topics if t)
        if not topics:
            raise ConfigError(f"the {SOURCE_NAME} source needs option 'topics' (comma-separated)")

        starting = opts.get("starting.offsets", "earliest").strip()
        starting_json = None
        if starting.startswith("{"):
            starting_json = _json_offsets("starting.offsets", starting)
            starting = "json"
        elif starting not in ("earliest", "latest"):
            raise ConfigError(
                f"option 'starting.offsets' must be earliest, latest or JSON, got {starting!r}"
            )
        end = _json_offsets("end.offsets", opts["end.offsets"]) if "end.offsets" in opts else None
        for bound_name, bound in (("starting.offsets", starting_json), ("end.offsets", end)):
            stray = sorted({t for t, _ in bound or {}} - set(topics))
            if stray:
                raise ConfigError(
                    f"option {bound_name!r} names topic(s) not in 'topics': {', '.join(stray)}"
                )
        isolation = opts.get("isolation.level", "read_uncommitted").strip()
        if isolation not in _ISOLATION_LEVELS:
            raise ConfigError(
                f"option 'isolation.level' must be one of {', '.join(_ISOLATION_LEVELS)}, "
                f"got {isolation!r}"
            )
        max_records = (
            _positive_int("max.records.per.batch", opts["max.records.per.batch"])
            if opts.get("max.records.per.batch", "").strip()
            else None
        )
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            starting_offsets=starting,
            starting_offsets_json=starting_json,
            end_offsets=end,
            max_records_per_batch=max_records,
            isolation_level=isolation,
            read_timeout_s=_positive_int("read.timeout.ms", opts.get("read.timeout.ms", "60000"))
            / 1000,
            metadata_timeout_s=_positive_int(
                "metadata.timeout.ms", opts.get("metadata.timeout.ms", "30000")
            )
            / 1000,
            fail_on_data_loss=_bool("fail.on.data.loss", opts.get("fail.on.data.loss", "true")),
            arrow_batch_rows=_positive_int(
                "arrow.batch.rows", opts.get("arrow.batch.rows", "10000")
            ),
            client_config={
                k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")
            },
        )

    @property
    def kafka(self) -> KafkaClientConfig:
        """The ``kafka.*`` options as client settings (``consumer.``/``admin.`` prefixes too)."""
        return _kafka_client(tuple(sorted(self.client_config.items())))

    def kafka_config(self) -> dict[str, Any]:
        """librdkafka config with ``bootstrap.servers`` and the ``kafka.*`` pass-through."""
        return {**self.client_config, "bootstrap.servers": self.bootstrap_servers}


@functools.lru_cache(maxsize=8)
def _kafka_client(items: tuple[tuple[str, str], ...]) -> KafkaClientConfig:
    return KafkaClientConfig.from_dict(dict(items))


# ------------------------------------------------------------------------- broker look-ups
def _partition_counts(options: KafkaSourceOptions) -> dict[str, int]:
    """Partition count of every configured topic (never auto-creates one, see ``admin``)."""
    from processor_api.kafka.admin import topic_partitions

    try:
        return topic_partitions(
            options.bootstrap_servers,
            options.topics,
            timeout_s=options.metadata_timeout_s,
            kafka=options.kafka,
        )
    except MissingTopicError as exc:
        raise MissingTopicError(f"source {exc}", topics=exc.topics) from None


def _beginning(options: KafkaSourceOptions, tps: list[TopicPartitionKey]) -> Offsets:
    from processor_api.kafka.offsets import beginning_offsets

    if not tps:
        return {}
    return beginning_offsets(
        options.bootstrap_servers, tps, timeout_s=options.metadata_timeout_s, kafka=options.kafka
    )


def _end(options: KafkaSourceOptions, tps: list[TopicPartitionKey]) -> Offsets:
    from processor_api.kafka.offsets import end_offsets

    if not tps:
        return {}
    return end_offsets(
        options.bootstrap_servers,
        tps,
        kafka=options.kafka,
        isolation_level=options.isolation_level,
        timeout_s=options.metadata_timeout_s,
    )
