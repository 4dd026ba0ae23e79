"""Transactions ending one at a time against Tansu, whose concurrent EndTxn handling can pin a
partition's last stable offset below its end for good (``kafka/transaction_ends.py``)."""

from __future__ import annotations

import fcntl
import random
import threading

import pytest
from confluent_kafka import Producer
from structlog.testing import capture_logs

from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.transaction_ends import (
    ends_one_at_a_time,
    is_tansu,
    lock_path,
    one_at_a_time,
)
from tests.harness.topics import uid

ROUNDS = 70  # without the lock about 1 round in 30 pinned a partition (11 of 320 measured)


def test_tansu_is_told_by_its_cluster_id():
    assert is_tansu("tansu_cluster")
    assert not is_tansu("MkU3OEVBNTcwNTJENDM2Qk") and not is_tansu(None)


def test_one_at_a_time_holds_the_machine_wide_lock_while_it_runs(tmp_path):
    bootstrap = f"127.0.0.1:{random.randrange(20000, 60000)}-{uid('lock')}"

    def inside() -> bool:
        with open(lock_path(bootstrap), "a+b") as other:  # another open file: another holder
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(other, fcntl.LOCK_UN)
            return False

    assert one_at_a_time(bootstrap, inside) is True
    assert inside() is False  # released after the call
    with pytest.raises(RuntimeError):
        one_at_a_time(bootstrap, lambda: (_ for _ in ()).throw(RuntimeError("commit failed")))
    assert inside() is False  # released after a failing call too


def test_a_lock_held_too_long_is_reported_then_the_call_runs_without_it():
    bootstrap = f"127.0.0.1:1-{uid('held')}"
    with open(lock_path(bootstrap), "a+b") as holder:  # a stopped process holding the lock
        fcntl.flock(holder, fcntl.LOCK_EX)
        with capture_logs() as logs:
            ran = one_at_a_time(bootstrap, lambda: "ended", warn_after_s=0.05, give_up_after_s=0.2)
        fcntl.flock(holder, fcntl.LOCK_UN)
    assert ran == "ended"
    events = [e["event"] for e in logs]
    assert events == ["transaction_end_lock_waiting", "transaction_end_lock_skipped"]
    assert logs[1]["lock"] == str(lock_path(bootstrap)) and logs[1]["waited_s"] >= 0.2


@pytest.mark.integration
def test_the_embedded_broker_gets_its_transactions_ended_one_at_a_time(kafka):
    assert ends_one_at_a_time(kafka.bootstrap_servers)


def _round(producers: list[Producer], bootstrap: str, topic: str, seed: int) -> None:
    """Each producer runs two transactions over random partitions of ``topic``, at once."""
    rng = random.Random(seed)
    plans = [[rng.randrange(3) for _ in range(rng.randint(1, 6))] for _ in range(6)]

    def transactions(index: int, producer: Producer) -> None:
        for plan in plans[index * 2 : index * 2 + 2]:
            producer.begin_transaction()
            for partition in plan:
                producer.produce(topic, value=b"r", partition=partition)
            assert producer.flush(30) == 0
            one_at_a_time(bootstrap, lambda: producer.commit_transaction(30))

    threads = [
        threading.Thread(target=transactions, args=(i, producer))
        for i, producer in enumerate(producers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.integration
def test_interleaved_transactions_ended_one_at_a_time_never_pin_a_partition(kafka):
    """Three producers' transactions share three partitions, as upstream tasks writing to a
    repartition topic do; every partition's last stable offset reaches its end each round."""
    bootstrap = kafka.bootstrap_servers
    assert ends_one_at_a_time(bootstrap)
    name = uid("txn-ends")
    producers = []
    for i in range(3):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{i}", "linger.ms": 5}
        )
        producer.init_transactions(30)
        producers.append(producer)
    pinned = []
    for round_ in range(ROUNDS):
        topic = f"{name}-{round_}"
        kafka.create_topic(topic, 3)
        _round(producers, bootstrap, topic, round_)
        partitions = [(topic, p) for p in range(3)]
        ends = end_offsets(bootstrap, partitions)
        stable = end_offsets(bootstrap, partitions, isolation_level="read_committed")
        if stable != ends:
            pinned.append((round_, ends, stable))
    assert pinned == []
