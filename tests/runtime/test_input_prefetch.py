"""The worker's input consumer fetches a bounded amount ahead of its tasks
(``runtime/continuous_input.py``: ``INPUT_PREFETCH``), and the user's settings still win."""

from __future__ import annotations

import pytest

from processor_api.errors import ConfigError
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.runtime.continuous_input import input_consumer_config


def test_the_input_consumer_bounds_its_prefetch_per_partition() -> None:
    """librdkafka's defaults (100,000 messages and 64 MiB queued per partition) are replaced:
    at most 10,000 messages or 8 MiB per partition wait in the worker for its tasks."""
    config = input_consumer_config("127.0.0.1:9", "worker-0", "read_committed")
    assert config["queued.min.messages"] == 10_000
    assert config["queued.max.messages.kbytes"] == 8_192
    # the large fetches stay: the bound is on what waits, not on a fetch's size
    assert config["fetch.max.bytes"] == 52_428_800


def test_a_users_consumer_settings_replace_the_prefetch_bound() -> None:
    """``--kafka-config consumer.queued.min.messages=...`` (or unprefixed) wins over the
    runtime's bound; the runtime's own keys still win over the user's."""
    kafka = KafkaClientConfig.from_dict(
        {"consumer.queued.min.messages": 50_000, "queued.max.messages.kbytes": 65_536}
    )
    config = input_consumer_config("127.0.0.1:9", "worker-0", "read_uncommitted", kafka)
    assert config["queued.min.messages"] == 50_000
    assert config["queued.max.messages.kbytes"] == 65_536
    assert config["isolation.level"] == "read_uncommitted"


def test_a_bad_prefetch_setting_is_refused_naming_the_key() -> None:
    """librdkafka's range is checked before a run starts, and the error names the key."""
    with pytest.raises(ConfigError, match="queued.min.messages"):
        KafkaClientConfig.from_dict({"consumer.queued.min.messages": 0})
