"""Topic and broker administration on top of ``confluent_kafka.admin.AdminClient``.

- :func:`check_broker` answers "is a Kafka broker reachable at this address?" within a bounded
  time and raises :class:`~processor_api.errors.BrokerUnavailableError` naming the address.
- :func:`topic_partitions` returns the partition count of existing topics and raises
  :class:`~processor_api.errors.MissingTopicError` naming the missing ones.
- :func:`ensure_topics` creates missing topics (e.g. changelogs with ``cleanup.policy=compact``),
  tolerates "already exists" races, waits until the metadata shows every partition with a leader
  and raises :class:`~processor_api.errors.TopicMismatchError` when an existing topic has another
  partition count than required.

Metadata is always requested for *all* topics: a metadata request that names a topic makes some
brokers (Tansu does, measured) auto-create it, so asking whether a topic exists would create it.

:class:`LibrdkafkaLogger` routes librdkafka's own log lines into structlog instead of stderr;
every client built by this package passes it as the ``logger`` config.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from processor_api.errors import (
    BrokerUnavailableError,
    ConfigError,
    MissingTopicError,
    StreamsError,
    TopicMismatchError,
)
from processor_api.kafka.client_config import KafkaClientConfig, Role
from processor_api.logging import get_logger

_log = get_logger(__name__)

#: How often metadata is re-read while waiting for topics to become usable.
_POLL_INTERVAL_S = 0.05


class LibrdkafkaLogger:
    """Adapter handed to confluent-kafka clients as ``logger``: librdkafka lines go to structlog.

    librdkafka errors and warnings (e.g. "Connect to ... failed: Connection refused") become
    structlog warnings, each distinct one once per client (librdkafka repeats them on every
    reconnect; the repeats are debug lines); everything else is logged at debug level. The
    last warning is kept (:attr:`last_warning`) for error messages.
    """

    _VARYING = re.compile(r"\(after \d+ms[^)]*\)|\d+ms|\b\d+\.\d+\b")

    def __init__(self, client: str = "librdkafka") -> None:
        self._log = get_logger("processor_api.kafka.librdkafka", client=client)
        self._seen: set[str] = set()
        self.last_warning: str | None = None
        self.muted = False  # warnings only kept (the caller reports them), logged at debug

    def log(self, level: int, fmt: str, *args: object) -> None:
        """Called by confluent-kafka with a stdlib logging level and a %-format string."""
        message = fmt % args if args else fmt
        if level >= logging.WARNING:
            self.last_warning = message
            shape = self._VARYING.sub("", message)
            if shape not in self._seen and not self.muted:
                self._seen.add(shape)
                self._log.warning("librdkafka", message=message)
                return
        self._log.debug("librdkafka", message=message)


def client_config(
    bootstrap_servers: str,
    client: str,
    *,
    role: Role = "admin",
    kafka: KafkaClientConfig | None = None,
    defaults: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The librdkafka config of one client.

    In increasing precedence: the bootstrap address and structlog logging, the caller's
    ``defaults``, the user's settings for ``role`` (``kafka``, see
    :class:`~processor_api.kafka.client_config.KafkaClientConfig`), the caller's ``extra``
    (settings the runtime relies on, e.g. ``isolation.level``).
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "logger": LibrdkafkaLogger(client),
    }
    config.update(defaults or {})
    if kafka is not None:
        config.update(kafka.for_role(role))
    config.update(extra)
    return config


class _Admin(NamedTuple):
    """An admin client and its logger; a context manager that closes the client on exit, so
    its handle is never left to the garbage collector (which may run on a librdkafka thread)."""

    client: AdminClient
    logger: LibrdkafkaLogger
    settings: str  # the user's settings, secrets masked, for error messages

    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(None, None, None)


def _admin(
    bootstrap_servers: str,
    kafka: KafkaClientConfig | None = None,
    name: str = "admin",
    **extra: Any,
) -> _Admin:
    config = client_config(bootstrap_servers, name, role="admin", kafka=kafka, **extra)
    try:
        client = AdminClient(config)
    except KafkaException as exc:
        raise ConfigError(f"cannot create a Kafka admin client: {exc.args[0].str()}") from None
    return _Admin(client, config["logger"], kafka.describe() if kafka else "")


def _metadata(admin: _Admin, bootstrap_servers: str, timeout_s: float) -> ClusterMetadata:
    """All-topic metadata (never names a topic, so nothing is auto-created)."""
    try:
        return admin.client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.logger.muted = True  # the error below carries the reason
        admin.client.poll(0)  # serves librdkafka's log queue: the reason is in its last line
        cause = admin.logger.last_warning
        raise BrokerUnavailableError(
            f"no Kafka broker answered a metadata request at {bootstrap_servers} "
            f"within {timeout_s:g}s: {exc.args[0].str() if exc.args else exc}"
            + (f"; last client error: {_short(cause)}" if cause else "")
            + (
                f" (Kafka client settings: {admin.settings})"
                if admin.settings
                else " (no Kafka client settings given: plaintext, no authentication)"
            )
        ) from exc


def _short(line: str) -> str:
    """A librdkafka log line without its ``FAIL [rdkafka#producer-1] [thrd:...]:`` prefix."""
    return re.sub(r"^\S+ \[[^\]]*\] \[thrd:[^\]]*\]: ", "", line.strip())


def check_broker(
    bootstrap_servers: str, timeout_s: float = 5.0, *, kafka: KafkaClientConfig | None = None
) -> ClusterMetadata:
    """Return the cluster metadata, or raise ``BrokerUnavailableError`` naming the address.

    Returns within about ``timeout_s`` seconds whether or not anything listens there. The
    error names the address, librdkafka's last complaint (refused connection, TLS handshake,
    authentication) and the client settings in use (secrets masked).
    """
    started = time.monotonic()
    with _admin(bootstrap_servers, kafka) as admin:
        metadata = _metadata(admin, bootstrap_servers, timeout_s)
    if not metadata.brokers:
        raise BrokerUnavailableError(
            f"the Kafka cluster at {bootstrap_servers} answered but reported no brokers"
        )
    _log.debug(
        "broker_checked",
        bootstrap_servers=bootstrap_servers,
        brokers=len(metadata.brokers),
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
    return metadata


def _partition_counts(metadata: ClusterMetadata) -> dict[str, int]:
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None or topic.error.code() == KafkaError.NO_ERROR
    }


def topic_partitions(
    bootstrap_servers: str,
    topics: Iterable[str],
    timeout_s: float = 10.0,
    *,
    kafka: KafkaClientConfig | None = None,
    role: str = "topic",
) -> dict[str, int]:
    """Partition count of each topic in ``topics``.

    Raises ``MissingTopicError`` naming every topic that does not exist (as ``role``, e.g.
    "source topic", in the message), and
    ``BrokerUnavailableError`` when no broker answers within ``timeout_s``.
    """
    with _admin(bootstrap_servers, kafka) as admin:
        return _topic_partitions(admin, bootstrap_servers, topics, timeout_s, role)


def admin_knowing_partitions(
    bootstrap_servers: str,
    topics: Iterable[str],
    timeout_s: float,
    *,
    client: str,
    kafka: KafkaClientConfig | None = None,
    **extra: Any,
) -> tuple[AdminClient, dict[str, int]]:
    """An admin client that has just read all-topic metadata, so its cache knows every
    partition's leader, and the partition count of each topic in ``topics`` (errors as
    :func:`topic_partitions`). The caller closes the client (``with client:``)."""
    admin = _admin(bootstrap_servers, kafka, client, **extra)
    try:
        return admin.client, _topic_partitions(admin, bootstrap_servers, topics, timeout_s)
    except BaseException:
        admin.__exit__()
        raise


def _topic_partitions(
    admin: _Admin,
    bootstrap_servers: str,
    topics: Iterable[str],
    timeout_s: float,
    role: str = "topic",
) -> dict[str, int]:
    wanted = list(dict.fromkeys(topics))
    counts = _partition_counts(_metadata(admin, bootstrap_servers, timeout_s))
    missing = tuple(name for name in wanted if name not in counts)
    if missing:
        raise MissingTopicError(
            f"{role}(s) {', '.join(repr(m) for m in missing)} do not exist on {bootstrap_servers}",
            topics=missing,
        )
    return {name: counts[name] for name in wanted}


class TopicSpec(NamedTuple):
    """A topic that must exist: its name, partition count and topic-level configs."""

    name: str
    partitions: int
    config: Mapping[str, str] | None = None


def _as_spec(spec: TopicSpec | tuple[Any, ...]) -> TopicSpec:
    spec = TopicSpec(*spec)
    if not spec.name:
        raise StreamsError("a topic spec needs a non-empty name")
    if int(spec.partitions) < 1:
        raise StreamsError(f"topic {spec.name!r}: partitions must be >= 1, got {spec.partitions}")
    return TopicSpec(spec.name, int(spec.partitions), dict(spec.config or {}))


def _check_counts(specs: Iterable[TopicSpec], counts: Mapping[str, int], where: str) -> None:
    for spec in specs:
        actual = counts.get(spec.name)
        if actual is not None and actual != spec.partitions:
            raise TopicMismatchError(
                f"topic {spec.name!r} on {where} has {actual} partition(s) "
                f"but {spec.partitions} are required"
            )


def _ready(metadata: ClusterMetadata, spec: TopicSpec) -> bool:
    topic = metadata.topics.get(spec.name)
    if topic is None or (topic.error is not None and topic.error.code() != KafkaError.NO_ERROR):
        return False
    partitions = topic.partitions
    return len(partitions) == spec.partitions and all(
        p.leader >= 0 and (p.error is None or p.error.code() == KafkaError.NO_ERROR)
        for p in partitions.values()
    )


def wait_for_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec | tuple[Any, ...]],
    timeout_s: float = 10.0,
    admin: _Admin | None = None,
    *,
    kafka: KafkaClientConfig | None = None,
) -> None:
    """Wait until metadata shows every topic with all its partitions led by a broker."""
    if admin is None:
        with _admin(bootstrap_servers, kafka) as own:
            wait_for_topics(bootstrap_servers, specs, timeout_s, own)
        return
    pending = [_as_spec(s) for s in specs]
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = _metadata(admin, bootstrap_servers, max(0.5, deadline - time.monotonic()))
        # A topic seen with 0 partitions is still being created; any other count must match.
        counts = {n: c for n, c in _partition_counts(metadata).items() if c > 0}
        _check_counts(pending, counts, bootstrap_servers)
        pending = [s for s in pending if not _ready(metadata, s)]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise StreamsError(
                f"topic(s) {', '.join(repr(s.name) for s in pending)} on {bootstrap_servers} "
                f"did not show all partitions with a leader within {timeout_s:g}s"
            )
        time.sleep(_POLL_INTERVAL_S)


def create_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec | tuple[Any, ...]],
    *,
    exist_ok: bool,
    timeout_s: float = 10.0,
    replication_factor: int = -1,
    kafka: KafkaClientConfig | None = None,
) -> list[str]:
    """Create ``specs``; return the names actually created.

    With ``exist_ok`` an existing topic is accepted if its partition count matches, otherwise it
    is an error naming the topic. Waits until all the topics are usable.
    """
    with _admin(bootstrap_servers, kafka) as admin:
        wanted = [_as_spec(s) for s in specs]
        existing = _partition_counts(_metadata(admin, bootstrap_servers, timeout_s))
        present = [s for s in wanted if s.name in existing]
        if present and not exist_ok:
            raise StreamsError(
                f"topic(s) {', '.join(repr(s.name) for s in present)} already exist "
                f"on {bootstrap_servers}"
            )
        _check_counts(present, existing, bootstrap_servers)
        to_create = [s for s in wanted if s.name not in existing]
        created: list[str] = []
        if to_create:
            futures = admin.client.create_topics(
                [
                    NewTopic(
                        s.name,
                        num_partitions=s.partitions,
                        replication_factor=replication_factor,
                        config=dict(s.config or {}),
                    )
                    for s in to_create
                ],
                request_timeout=timeout_s,
            )
            for name, future in futures.items():
                try:
                    future.result()
                    created.append(name)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    if (
                        exist_ok
                        and isinstance(error, KafkaError)
                        and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
                    ):
                        continue  # created concurrently by someone else: checked below
                    reason = error.str() if isinstance(error, KafkaError) else str(exc)
                    raise StreamsError(
                        f"could not create topic {name!r} on {bootstrap_servers}: {reason}"
                    ) from exc
        wait_for_topics(bootstrap_servers, wanted, timeout_s=timeout_s, admin=admin)
    if created:
        _log.debug("topics_created", bootstrap_servers=bootstrap_servers, topics=created)
    return created


def ensure_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec | tuple[Any, ...]],
    timeout_s: float = 10.0,
    *,
    kafka: KafkaClientConfig | None = None,
) -> list[str]:
    """Make sure every ``(name, partitions, config)`` topic exists; return the ones created.

    Missing topics are created with their configs (e.g. ``{"cleanup.policy": "compact"}``);
    "already exists" from a concurrent creator is tolerated. Returns once metadata shows all
    partitions of every topic with a leader. Raises ``TopicMismatchError`` if an existing topic
    has a different partition count than required. Configs of existing topics are not changed.
    """
    return create_topics(bootstrap_servers, specs, exist_ok=True, timeout_s=timeout_s, kafka=kafka)
