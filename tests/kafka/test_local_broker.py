"""Against Tansu the runtime's producers linger longer (fewer, larger batches), unless told."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from processor_api.cli.run_topology import _local_broker_defaults
from processor_api.kafka.local_broker import (
    TANSU_PRODUCER_LINGER_MS,
    broker_is_tansu,
    is_tansu,
    with_tansu_defaults,
)
from processor_api.logging import get_logger
from processor_api.testing.embedded import free_port


def test_tansu_is_told_by_its_cluster_id():
    assert is_tansu("tansu_cluster")
    assert not is_tansu("MkU3OEVBNTcwNTJENDM2Qk") and not is_tansu(None)


def test_producers_get_the_longer_linger_when_nobody_set_one():
    given = {"security.protocol": "PLAINTEXT", "consumer.fetch.wait.max.ms": "20"}
    assert with_tansu_defaults(given) == {**given, "producer.linger.ms": TANSU_PRODUCER_LINGER_MS}
    assert given == {"security.protocol": "PLAINTEXT", "consumer.fetch.wait.max.ms": "20"}


@pytest.mark.parametrize(
    "setting",
    [
        {"linger.ms": "5"},
        {"producer.linger.ms": "0"},
        {"queue.buffering.max.ms": "1"},
        {"producer.queue.buffering.max.ms": "200"},
    ],
)
def test_a_linger_the_user_set_for_producers_is_kept(setting):
    assert with_tansu_defaults(setting) == setting


def test_a_broker_that_does_not_answer_is_neither():
    assert broker_is_tansu(f"127.0.0.1:{free_port()}", timeout_s=1.0) is None


@pytest.mark.integration
def test_a_run_against_the_embedded_broker_lingers_longer(kafka):
    assert broker_is_tansu(kafka.bootstrap_servers) is True
    with capture_logs() as logs:
        settings = _local_broker_defaults(kafka.bootstrap_servers, {}, False, get_logger("t"))
    assert settings == {"producer.linger.ms": TANSU_PRODUCER_LINGER_MS}
    assert [e["event"] for e in logs] == ["producer_linger_for_tansu"]
    kept = {"producer.linger.ms": "7"}
    assert _local_broker_defaults(kafka.bootstrap_servers, kept, False, get_logger("t")) == kept
