"""The settings of a worker's consumer (``runtime/continuous_input.WorkerInput``)."""

from __future__ import annotations

from typing import Any

import pytest

from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.runtime import continuous_input
from processor_api.runtime.continuous_input import PREFETCH_MESSAGES, WorkerInput


@pytest.fixture
def consumer_configs(monkeypatch) -> list[dict[str, Any]]:
    """The configs the worker's consumers are made with (the client is never started)."""
    made: list[dict[str, Any]] = []

    class _Recorded:
        def __init__(self, config: dict[str, Any]) -> None:
            made.append(config)

    monkeypatch.setattr(continuous_input, "Consumer", _Recorded)
    return made


def test_a_worker_keeps_a_few_thousand_records_per_partition_in_its_client(consumer_configs):
    # librdkafka's own default (100,000 per partition) held much of a backlog in memory
    WorkerInput("127.0.0.1:9", "w", isolation_level="read_committed")
    assert consumer_configs[0]["queued.min.messages"] == PREFETCH_MESSAGES == 10_000


def test_the_users_consumer_setting_wins(consumer_configs):
    kafka = KafkaClientConfig.from_dict({"consumer.queued.min.messages": "50000"})
    WorkerInput("127.0.0.1:9", "w", isolation_level="read_committed", kafka=kafka)
    assert str(consumer_configs[0]["queued.min.messages"]) == "50000"
