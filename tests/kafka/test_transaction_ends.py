"""Transactions on Tansu, whose EndTxn handling can leave a partition's last stable offset
below its end for good: ended one at a time, and a pinned partition released
(``kafka/transaction_ends.py``)."""

from __future__ import annotations

import fcntl
import random
import threading

import pytest
from confluent_kafka import Producer
from structlog.testing import capture_logs

from processor_api.kafka.backlog import group_backlog, wait_until_readable
from processor_api.kafka.group import GroupCommitter
from processor_api.kafka.offsets import end_offsets
from processor_api.kafka.transaction_ends import (
    RELEASE_HEADER,
    ends_one_at_a_time,
    is_tansu,
    lock_path,
    one_at_a_time,
    release_pinned,
)
from tests.harness.topics import read_topic, uid

ROUNDS = 40  # without the lock about 1 round in 30 pinned a partition (16 of 460 measured)


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


def _producers(bootstrap: str, name: str, count: int) -> list[Producer]:
    producers = []
    for i in range(count):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{i}", "linger.ms": 0}
        )
        producer.init_transactions(30)
        producers.append(producer)
    return producers


def _pin_by_a_chain(kafka, name: str) -> tuple[str, int]:
    """Tansu's chain case (``kafka/transaction_ends.py``): A ends while B, on A's partition 0,
    is open; B ends while C, on B's partition 1, is open; C's end finalises B and C, not A.
    Returns the topic and A's first offset, where partition 0 stays pinned."""
    bootstrap = kafka.bootstrap_servers
    topic = uid(name)
    kafka.create_topic(topic, 2)
    a, b, c = _producers(bootstrap, topic, 3)

    def put(producer: Producer, partition: int) -> None:
        producer.produce(topic, value=b"r", partition=partition)
        assert producer.flush(30) == 0

    for producer in (a, b, c):
        producer.begin_transaction()
    put(b, 0)
    put(b, 1)
    put(a, 0)
    a_first = 1  # after B's record on partition 0
    one_at_a_time(bootstrap, lambda: a.commit_transaction(30))
    put(c, 1)
    one_at_a_time(bootstrap, lambda: b.commit_transaction(30))
    one_at_a_time(bootstrap, lambda: c.commit_transaction(30))
    return topic, a_first


def _stable_and_end(bootstrap: str, partitions: list[tuple[str, int]]):
    return (
        end_offsets(bootstrap, partitions, isolation_level="read_committed"),
        end_offsets(bootstrap, partitions),
    )


@pytest.mark.integration
def test_a_transaction_ended_while_a_peer_was_open_stays_pinned_until_released(kafka):
    bootstrap = kafka.bootstrap_servers
    topic, a_first = _pin_by_a_chain(kafka, "chain")
    partitions = [(topic, 0), (topic, 1)]
    stable, ends = _stable_and_end(bootstrap, partitions)
    assert stable[(topic, 0)] == a_first < ends[(topic, 0)]  # every producer has ended
    assert stable[(topic, 1)] == ends[(topic, 1)]

    with capture_logs() as logs:
        release_pinned(bootstrap, [(topic, 0)])
    stable, ends = _stable_and_end(bootstrap, partitions)
    assert stable == ends
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "pinned_partitions_released"
    ]
    records = read_topic(bootstrap, topic, partitions=[0])
    assert [r.value for r in records[:2]] == [b"r", b"r"]  # B's and A's: A committed
    assert [name for name, _ in records[-1].headers or ()] == [RELEASE_HEADER]  # Tansu shows it


@pytest.mark.integration
def test_a_backlog_pinned_by_tansu_is_released_while_waiting_for_it(kafka):
    bootstrap = kafka.bootstrap_servers
    topic, a_first = _pin_by_a_chain(kafka, "chain-backlog")
    group = uid("group")
    committer = GroupCommitter(bootstrap, group, "test")
    committer.commit({(topic, 0): a_first, (topic, 1): 0})
    committer.close()
    partitions = [(topic, 0), (topic, 1)]
    backlog = group_backlog(bootstrap, group, partitions, "read_committed")
    pinned = [b for b in backlog if b.partition == 0]
    assert pinned and not pinned[0].readable  # nothing below the stable end to read

    after = wait_until_readable(bootstrap, group, pinned, 60, release_after_s=0.5)
    assert [(b.partition, b.readable) for b in after] == [(0, True)]


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
def test_interleaved_transactions_ended_one_at_a_time_leave_no_partition_pinned_for_good(kafka):
    """Three producers' transactions share three partitions, as upstream tasks writing to a
    repartition topic do. Ended one at a time, a partition Tansu still pins (the chain case)
    is released: every partition's last stable offset reaches its end each round."""
    bootstrap = kafka.bootstrap_servers
    name = uid("txn-ends")
    producers = _producers(bootstrap, name, 3)
    left_pinned = []
    for round_ in range(ROUNDS):
        topic = f"{name}-{round_}"
        kafka.create_topic(topic, 3)
        _round(producers, bootstrap, topic, round_)
        partitions = [(topic, p) for p in range(3)]
        stable, ends = _stable_and_end(bootstrap, partitions)
        release_pinned(bootstrap, [tp for tp in partitions if stable[tp] < ends[tp]])
        stable, ends = _stable_and_end(bootstrap, partitions)
        if stable != ends:
            left_pinned.append((round_, ends, stable))
    assert left_pinned == []
