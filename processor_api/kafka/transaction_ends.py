"""Transactions on Tansu: ended one at a time, and a partition they pin released.

Tansu 0.6, the embedded broker, finalises a transaction at its EndTxn only when every other
transaction with records on one of its partitions (below its last offset there) is prepared
(commit or abort requested); finalising one finalises those overlapping ones with it. Until a
transaction is finalised its partitions' last stable offset stays at its first record, so no
``read_committed`` reader gets past it. Two ways leave one unfinalised after all its peers
ended, measured with three producers whose transactions share three partitions:

* *Race*: two EndTxn requests handled at once can leave a transaction marked committed with a
  commit-marker range still recorded; every later transaction on that partition then waits
  for it, for good (the broker logs ``otherwise=Some(Committed)``). Without coordination 16 of
  460 rounds pinned a partition. So against Tansu the processes on this machine commit and
  abort transactions one at a time, under a file lock per broker (:func:`one_at_a_time`).
* *Chain*: transaction A ends while B, with records on A's partition ``p``, is still open; B
  ends while C (sharing another partition with B, not ``p``) is open; C's end finalises B and
  C, not A. Ending transactions one at a time cannot prevent that (2 of 70 rounds pinned in
  CI with the lock). A stays pinned until a later transaction on ``p`` ends with all its
  overlapping peers prepared. :func:`release_pinned` is that transaction: it writes one
  record marked with :data:`RELEASE_HEADER` to each pinned partition and aborts; readers of
  the runtime's internal topics drop such records (a broker that filters aborted records
  never shows them; Tansu shows them).

Tansu is told by the cluster id it reports; Apache Kafka needs none of this and gets none of it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from confluent_kafka.admin import AdminClient

from processor_api.errors import StreamsError
from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.local_broker import is_tansu
from processor_api.kafka.producer import make_producer
from processor_api.logging import get_logger

_log = get_logger(__name__)

T = TypeVar("T")

#: How long the cluster id look-up may take before the broker is taken for Apache Kafka.
CLUSTER_ID_TIMEOUT_S = 10.0

#: Waiting for another process's commit this long is reported ...
LOCK_WARN_AFTER_S = 10.0
#: ... and this long is given up: the transaction then ends without the lock.
LOCK_GIVE_UP_AFTER_S = 60.0
LOCK_POLL_S = 0.005

#: The header of the record :func:`release_pinned` writes (in a transaction it aborts).
RELEASE_HEADER = "__processor_api.release"
#: How long releasing may take (init, produce, abort), each step.
RELEASE_TIMEOUT_S = 30.0

_serialised: dict[str, bool] = {}


def ends_one_at_a_time(
    bootstrap_servers: str,
    kafka: KafkaClientConfig | None = None,
    timeout_s: float = CLUSTER_ID_TIMEOUT_S,
) -> bool | None:
    """Whether transactions on this broker must end one at a time: asked once per process;
    ``None`` when the broker cannot be asked now (asked again next time)."""
    known = _serialised.get(bootstrap_servers)
    if known is not None:
        return known
    try:
        with AdminClient(client_config(bootstrap_servers, "cluster-id", kafka=kafka)) as admin:
            described = admin.describe_cluster(request_timeout=timeout_s).result()
        cluster_id = described.cluster_id
    except Exception as exc:  # noqa: BLE001 - unreachable now: decided on a later call
        _log.debug("cluster_id_unknown", bootstrap_servers=bootstrap_servers, error=str(exc))
        return None
    _serialised[bootstrap_servers] = one_at_a_time = is_tansu(cluster_id)
    if one_at_a_time:
        _log.info(
            "transaction_ends_serialised",
            bootstrap_servers=bootstrap_servers,
            cluster_id=cluster_id,
            detail="Tansu can pin a partition's last stable offset when two transactions end "
            "at once; this machine's processes end them one at a time",
        )
    return one_at_a_time


def known_one_at_a_time(bootstrap_servers: str) -> bool:
    """Whether this process found the broker to be Tansu (asked by a transactional producer
    before: :func:`ends_one_at_a_time`); False while it has not asked."""
    return bool(_serialised.get(bootstrap_servers))


def lock_path(bootstrap_servers: str) -> Path:
    """The lock file that the processes on this machine share for one broker."""
    digest = hashlib.sha256(bootstrap_servers.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"processor-api-transaction-ends-{digest}.lock"


def one_at_a_time(
    bootstrap_servers: str,
    call: Callable[[], T],
    *,
    warn_after_s: float = LOCK_WARN_AFTER_S,
    give_up_after_s: float = LOCK_GIVE_UP_AFTER_S,
) -> T:
    """Run ``call`` (a commit or abort bounded by its own timeout) while no other process or
    thread on this machine ends a transaction on this broker.

    A holder takes at most one commit's timeout; a lock held longer (a stopped or wedged
    process) is reported after ``warn_after_s``, and after ``give_up_after_s`` the call runs
    without it, with a warning: a rare pinned partition on Tansu rather than a stalled task.
    """
    path = lock_path(bootstrap_servers)
    with open(path, "a+b") as lock:
        started = time.monotonic()
        warned = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= give_up_after_s:
                    _log.warning(
                        "transaction_end_lock_skipped",
                        lock=str(path),
                        waited_s=round(waited, 1),
                        detail="another process held the lock this long; the transaction "
                        "ends without it",
                    )
                    return call()
                if not warned and waited >= warn_after_s:
                    warned = True
                    _log.warning(
                        "transaction_end_lock_waiting", lock=str(path), waited_s=round(waited, 1)
                    )
                time.sleep(LOCK_POLL_S)
        try:
            return call()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def release_pinned(
    bootstrap_servers: str,
    partitions: Iterable[tuple[str, int]],
    *,
    kafka: KafkaClientConfig | None = None,
    timeout_s: float = RELEASE_TIMEOUT_S,
) -> None:
    """Finalise the transactions Tansu left unfinalised on ``partitions`` (see the module
    docs): one transaction, one :data:`RELEASE_HEADER` record per partition, aborted.

    Only for partitions no live transaction writes to any more: an open one overlapping the
    release would keep the release itself unfinalised until that one ends."""
    partitions = sorted(set(partitions))
    if not partitions:
        return
    digest = hashlib.sha256(bootstrap_servers.encode()).hexdigest()[:16]
    producer = make_producer(
        bootstrap_servers,
        transactional_id=f"processor-api-release-{digest}-{os.getpid()}",  # never fenced by a peer
        kafka=kafka,
        extra_config={"linger.ms": 0},
    )

    def release() -> None:
        producer.begin_transaction()
        for topic, partition in partitions:
            producer.produce(topic, value=b"", partition=partition, headers=[(RELEASE_HEADER, b"")])
        left = producer.flush(timeout_s)
        if left:
            raise StreamsError(
                f"releasing pinned partitions: {left} record(s) not written in {timeout_s:g}s "
                f"({', '.join(f'{t}[{p}]' for t, p in partitions)})"
            )
        producer.abort_transaction(timeout_s)

    try:
        producer.init_transactions(timeout_s)
        one_at_a_time(bootstrap_servers, release)
    finally:
        close = getattr(producer, "close", None)  # older confluent-kafka: left to GC
        if close is not None:
            close()
    _log.warning(
        "pinned_partitions_released",
        partitions=[f"{t}[{p}]" for t, p in partitions],
        detail="Tansu had left an ended transaction unfinalised there; an aborted transaction "
        "on the same partitions finalised it",
    )


__all__ = [
    "RELEASE_HEADER",
    "ends_one_at_a_time",
    "is_tansu",
    "known_one_at_a_time",
    "lock_path",
    "one_at_a_time",
    "release_pinned",
]
