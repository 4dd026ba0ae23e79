"""A failing transaction call names the step, the transactional id, the broker and the timeout."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor_api.errors import StreamsError
from processor_api.kafka import transactions
from processor_api.kafka.transactions import TransactionalProducers, transaction_step
from processor_api.testing.embedded import free_port


def test_init_transactions_without_a_broker_names_id_broker_and_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(transactions, "INIT_TIMEOUT_S", 1.0)
    address = f"127.0.0.1:{free_port()}"
    producers = TransactionalProducers(address)
    with pytest.raises(StreamsError) as caught:
        producers.for_task("orders-app", "0_2", tmp_path / "0_2")
    message = str(caught.value)
    assert "init_transactions of transactional id 'orders-app-0_2'" in message
    assert address in message and "within 1s" in message
    assert isinstance(caught.value.__cause__, KafkaException)
    assert not (tmp_path / "0_2" / transactions.OWNER_FILE).exists()


def test_a_fenced_commit_says_another_producer_took_over():
    def fenced() -> None:
        raise KafkaException(
            KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)
        )

    with pytest.raises(
        StreamsError,
        match=r"commit_transaction of transactional id 'app-0_0' "
        r"on b:9092 failed within 5s: _FENCED: .*another producer",
    ):
        transaction_step("commit_transaction", "app-0_0", "b:9092", 5.0, fenced)
