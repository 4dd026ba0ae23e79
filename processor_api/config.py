"""Runtime configuration: the keys a topology run understands.

Keys may be written Kafka-style with dots or dashes (``application.id``,
``processing.exception.handler``) or with underscores; they are normalized to underscores.
Unknown keys are refused (:class:`~processor_api.errors.ConfigError` with the closest known key):
a misspelt setting must not be silently ignored.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from processor_api.error_handlers import resolve_handler
from processor_api.errors import ConfigError
from processor_api.restore_listener import resolve_restore_listener
from processor_api.schemas.registry import client_key, is_registry_key

HANDLERS = ("log_and_fail", "log_and_continue")  # built-ins; "module:callable" names others
HANDLER_KEYS = (
    "deserialization_exception_handler",
    "processing_exception_handler",
    "production_exception_handler",
)


class ProcessingGuarantee(str, Enum):
    """Kafka Streams' ``processing.guarantee`` values this runtime implements."""

    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE_V2 = "exactly_once_v2"

    @property
    def isolation_level(self) -> str:
        """The consumer isolation level that goes with the guarantee."""
        if self is ProcessingGuarantee.EXACTLY_ONCE_V2:
            return "read_committed"
        return "read_uncommitted"


GUARANTEES = tuple(g.value for g in ProcessingGuarantee)


def normalize_key(key: str) -> str:
    return key.strip().replace(".", "_").replace("-", "_").lower()


#: Known keys that are not fields of :class:`StreamsConfig` (yet): accepted, kept in ``extra``
#: and handed to the engine as they are.
EXTRA_KEYS: frozenset[str] = frozenset()

#: Kafka Streams' names (normalized) of the keys above; ``default.`` prefixes are accepted too.
ALIASES = {
    "errors_dead_letter_queue_topic_name": "dead_letter_topic",
    "dead_letter_queue_topic": "dead_letter_topic",
}

#: Keys with a ``run-topology`` flag or Kafka client setting instead: refused with a hint.
ELSEWHERE = {
    "bootstrap_servers": "give it with --bootstrap-servers",
    "state_dir": "give it with --state-dir",
}


def known_keys() -> frozenset[str]:
    """Every key :meth:`StreamsConfig.from_dict` accepts (normalized, without aliases)."""
    fixed = {f.name for f in fields(StreamsConfig)} - {"extra", "schema_registry"}
    return frozenset(fixed) | EXTRA_KEYS


def canonical_key(raw_key: str) -> str:
    """The normalized key ``raw_key`` stands for; ``ConfigError`` for an unknown one.

    The error names the key and suggests the closest known one (``dead_leter_topic`` ->
    ``dead_letter_topic``).
    """
    known = known_keys()
    key = normalize_key(raw_key)
    if is_registry_key(key):
        client_key(key)  # ConfigError for a setting the registry client does not know
        return key
    for candidate in (key, key.removeprefix("default_")):
        candidate = ALIASES.get(candidate, candidate)
        if candidate in known:
            return candidate
    if key in ELSEWHERE:
        raise ConfigError(f"config key {raw_key!r} is not a runtime setting: {ELSEWHERE[key]}")
    close = difflib.get_close_matches(key, sorted(known | set(ALIASES)), n=1, cutoff=0.6)
    hint = f" (did you mean {ALIASES.get(close[0], close[0])!r}?)" if close else ""
    raise ConfigError(
        f"unknown config key {raw_key.strip()!r}{hint}; known keys: {', '.join(sorted(known))}"
        " (Kafka Streams' dotted names work too; Kafka client settings go to --kafka-config)"
    )


def _milliseconds(key: str, value: Any) -> int:
    """An int setting given as an int or as decimal digits (``--config key=100``)."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{key} must be an integer number of milliseconds, got {value!r}")


def _integer(key: str, value: Any) -> int:
    """An int setting given as an int or as decimal digits."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{key} must be an integer, got {value!r}")


@dataclass
class StreamsConfig:
    """Validated settings of a topology run (test driver or Spark)."""

    application_id: str = "processor-api-app"
    deserialization_exception_handler: str = "log_and_fail"
    processing_exception_handler: str = "log_and_fail"
    production_exception_handler: str = "log_and_fail"
    dead_letter_topic: str | None = None
    processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE
    max_task_idle_ms: int = 0
    stream_time_idle_advance_ms: int | None = None
    #: ``MODULE:CALLABLE`` returning a :class:`~processor_api.restore_listener.StateRestoreListener`
    state_restore_listener: Any = None
    #: How often a running task commits (Kafka Streams' ``commit.interval.ms``); None: its
    #: default for the guarantee (see :attr:`commit_interval`).
    commit_interval_ms: int | None = None
    #: ``schema.registry.*`` settings as ``SchemaRegistryClient`` config (``url``,
    #: ``basic.auth.user.info``, ...), for the registry serdes that name no registry
    schema_registry: dict[str, Any] = field(default_factory=dict)
    #: How long a task may wait for the broker before it fails (Kafka Streams'
    #: ``task.timeout.ms``, KIP-572): outages shorter than this are ridden out.
    task_timeout_ms: int = 300_000
    #: Warm failover (``state/snapshots.py``): how often a task may snapshot its persistent
    #: stores after a commit; -1 turns snapshots off, 0 snapshots after every commit.
    state_snapshot_interval_ms: int = 60_000
    #: Where snapshots go: a path or a ``pyarrow.fs`` URI (``s3://``, ``gs://``, ``hdfs://``);
    #: ``run-topology`` defaults it to ``<checkpoint-dir>/state-snapshots``; None: no snapshots.
    state_snapshot_location: str | None = None
    #: How many snapshots per store are kept (their files too); older ones are deleted.
    state_snapshot_retained: int = 2
    #: The filesystem's constructor arguments (``pyarrow.fs.S3FileSystem(**options)``), a dict
    #: or its JSON text: ``endpoint_override``, ``region``, ``access_key``, ...
    state_snapshot_filesystem_options: dict[str, Any] = field(default_factory=dict)
    #: Upload bandwidth per executor process in bytes/s; 0: unlimited.
    state_snapshot_max_bytes_per_second: int = 0
    #: Workers per executor (Kafka Streams' ``num.stream.threads``): each runs its share of
    #: the tasks in one poll loop on one Spark task slot; None: one per executor core.
    num_stream_threads: int | None = None
    #: A worker's RocksDB block cache, shared by all its tasks' stores (bytes).
    rocksdb_block_cache_bytes: int = 64 * 1024 * 1024
    #: A worker's budget for all its stores' memtables, charged to the block cache (RocksDB's
    #: ``WriteBufferManager``, as in Kafka Streams' bounded-memory recipe); None: no budget.
    rocksdb_write_buffer_manager_bytes: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> StreamsConfig:
        """Build from a user dict; an unknown key is a :class:`ConfigError` naming it.

        Keys may be Kafka Streams' names, dotted or underscored
        (``default.deserialization.exception.handler``,
        ``errors.dead.letter.queue.topic.name``). Known keys that are not fields yet (see
        ``EXTRA_KEYS``) are kept in ``extra``.
        """
        field_names = {f.name for f in fields(cls)} - {"extra", "schema_registry"}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        registry: dict[str, Any] = {}
        for raw_key, value in (config or {}).items():
            key = canonical_key(str(raw_key))
            if is_registry_key(key):
                registry[client_key(key)] = value
            elif key in field_names:
                values[key] = value
            else:
                extra[key] = value
        result = cls(**values, schema_registry=registry, extra=extra)
        result.validate()
        return result

    def validate(self) -> None:
        for name in HANDLER_KEYS:
            resolve_handler(name, getattr(self, name))  # ConfigError naming key and value
        resolve_restore_listener(self.state_restore_listener)  # ConfigError naming the key
        if self.processing_guarantee not in GUARANTEES:
            raise ConfigError(
                f"processing_guarantee must be one of {GUARANTEES}, "
                f"got {self.processing_guarantee!r}"
            )
        self.processing_guarantee = ProcessingGuarantee(self.processing_guarantee)
        if not self.application_id or not isinstance(self.application_id, str):
            raise ConfigError(
                f"application_id must be a non-empty string, got {self.application_id!r}"
            )
        if self.dead_letter_topic == "":
            self.dead_letter_topic = None
        self.max_task_idle_ms = _milliseconds("max_task_idle_ms", self.max_task_idle_ms)
        if self.max_task_idle_ms < -1:
            raise ConfigError(
                f"max_task_idle_ms must be -1 (never wait for lagging inputs), 0 (wait only "
                f"while the broker has more of them) or a positive number of ms, got "
                f"{self.max_task_idle_ms}"
            )
        if self.commit_interval_ms is not None:
            interval = _milliseconds("commit_interval_ms", self.commit_interval_ms)
            if interval < 0:
                raise ConfigError(f"commit_interval_ms must be >= 0, got {interval}")
            self.commit_interval_ms = interval
        self.task_timeout_ms = _milliseconds("task_timeout_ms", self.task_timeout_ms)
        if self.task_timeout_ms < 0:
            raise ConfigError(f"task_timeout_ms must be >= 0, got {self.task_timeout_ms}")
        self._validate_snapshots()
        if self.num_stream_threads is not None:
            threads = _integer("num_stream_threads", self.num_stream_threads)
            if threads < 1:
                raise ConfigError(f"num_stream_threads must be at least 1, got {threads}")
            self.num_stream_threads = threads
        self.rocksdb_block_cache_bytes = _integer(
            "rocksdb_block_cache_bytes", self.rocksdb_block_cache_bytes
        )
        if self.rocksdb_block_cache_bytes < 1:
            raise ConfigError(
                f"rocksdb_block_cache_bytes must be at least 1, got {self.rocksdb_block_cache_bytes}"
            )
        if self.rocksdb_write_buffer_manager_bytes is not None:
            budget = _integer(
                "rocksdb_write_buffer_manager_bytes", self.rocksdb_write_buffer_manager_bytes
            )
            if budget < 1:
                raise ConfigError(
                    f"rocksdb_write_buffer_manager_bytes must be at least 1, got {budget}"
                )
            self.rocksdb_write_buffer_manager_bytes = budget
        if self.stream_time_idle_advance_ms is not None:
            idle = _milliseconds("stream_time_idle_advance_ms", self.stream_time_idle_advance_ms)
            if idle < 1:
                raise ConfigError(
                    f"stream_time_idle_advance_ms must be at least 1 ms (leave it unset to keep "
                    f"stream time moving with records only), got {idle}"
                )
            self.stream_time_idle_advance_ms = idle

    def _validate_snapshots(self) -> None:
        interval = _milliseconds("state_snapshot_interval_ms", self.state_snapshot_interval_ms)
        if interval < -1:
            raise ConfigError(
                f"state_snapshot_interval_ms must be -1 (no snapshots), 0 (after every commit) "
                f"or a positive number of ms, got {interval}"
            )
        self.state_snapshot_interval_ms = interval
        retained = _integer("state_snapshot_retained", self.state_snapshot_retained)
        if retained < 1:
            raise ConfigError(f"state_snapshot_retained must be at least 1, got {retained}")
        self.state_snapshot_retained = retained
        rate = _integer(
            "state_snapshot_max_bytes_per_second", self.state_snapshot_max_bytes_per_second
        )
        if rate < 0:
            raise ConfigError(f"state_snapshot_max_bytes_per_second must be >= 0, got {rate}")
        self.state_snapshot_max_bytes_per_second = rate
        options = self.state_snapshot_filesystem_options
        if isinstance(options, str):
            try:
                options = json.loads(options) if options.strip() else {}
            except ValueError as exc:
                raise ConfigError(
                    f"state_snapshot_filesystem_options must be a JSON object, got {options!r}: "
                    f"{exc}"
                ) from exc
        if not isinstance(options, dict):
            raise ConfigError(
                f"state_snapshot_filesystem_options must be a JSON object (the filesystem's "
                f"keyword arguments), got {options!r}"
            )
        self.state_snapshot_filesystem_options = options
        if self.state_snapshot_location is not None:
            self.state_snapshot_location = str(self.state_snapshot_location) or None

    def to_dict(self) -> dict[str, Any]:
        """The settings as :meth:`from_dict` takes them back: every field by its name (so a
        new field is carried without being listed anywhere), the guarantee by its value, the
        registry settings as ``schema.registry.*`` keys and ``extra`` keys at the top level.

        ``StreamsConfig.from_dict(config.to_dict()) == config`` holds for a valid config; the
        driver hands this dict to the executors (``spark/runner.py``, ``runtime/job.py``).
        """
        settings: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "extra":
                settings.update(value)
            elif item.name == "schema_registry":
                settings.update({f"schema.registry.{k}": v for k, v in value.items()})
            elif isinstance(value, Enum):
                settings[item.name] = value.value
            else:
                settings[item.name] = value
        return settings

    @property
    def commit_interval(self) -> int:
        """``commit.interval.ms`` in force: the one set, else Kafka Streams' default for the
        guarantee (30,000 ms under at_least_once, 100 ms under exactly_once_v2)."""
        if self.commit_interval_ms is not None:
            return self.commit_interval_ms
        return 100 if self.exactly_once else 30_000

    @property
    def exactly_once(self) -> bool:
        """True under ``exactly_once_v2``."""
        return self.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE_V2
