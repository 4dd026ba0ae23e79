"""Transaction ends one at a time, on the brokers that need it (Tansu).

Tansu 0.6, the embedded broker, finalises a transaction at its EndTxn only when every other
transaction with records on one of its partitions is prepared too, and records the commit
markers it writes as new ranges of the transaction. Two EndTxn requests of different producers
handled at the same time can then leave one of the pair committed with a range still recorded:
from then on every later transaction on that partition waits for it, the partition's last
stable offset stays below its end for good, and no ``read_committed`` reader gets past it
(fencing the producers does not clear it either). Measured with three producers whose
transactions share three partitions: 4 of 80 rounds ended with a stuck partition; with their
commits one at a time, 0 of 120 (the broker's log shows the race as ``otherwise=Some(Committed)``
warnings: 29 against 0).

So against Tansu, the processes on this machine commit and abort transactions one at a time,
under a file lock per broker. Tansu is told by the cluster id it reports; Apache Kafka needs
none of this and gets none of it.
"""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka.admin import AdminClient

from processor_api.kafka.admin import client_config
from processor_api.kafka.client_config import KafkaClientConfig
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

_serialised: dict[str, bool] = {}


def is_tansu(cluster_id: str | None) -> bool:
    """Whether a broker reporting ``cluster_id`` is Tansu (its default id is
    ``tansu_cluster``)."""
    return cluster_id is not None and "tansu" in cluster_id.lower()


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


__all__ = ["ends_one_at_a_time", "is_tansu", "lock_path", "one_at_a_time"]
