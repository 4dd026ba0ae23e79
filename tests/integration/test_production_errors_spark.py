"""A record the producer refuses at send time (larger than the producer's
``message.max.bytes``) goes to the production exception handler on Spark, as in Kafka
Streams: ``log_and_continue`` drops it and the run goes on, ``log_and_fail`` fails the run
naming the sink and the input record's coordinates."""

from __future__ import annotations

import pytest

from processor_api.errors import StreamsError
from processor_api.spark.runner import TopologyRunner
from tests.harness.runs import settings_for
from tests.harness.topics import produce, read_topic, uid

pytestmark = pytest.mark.integration

LIMIT = 2_000  # producer message.max.bytes: the big record is refused before it leaves


def _run(kafka, spark, tmp_path, handler: str):
    run_id = uid()
    input_topic, output_topic = f"refuse-in-{run_id}", f"refuse-out-{run_id}"
    kafka.create_topic(input_topic, 1)
    kafka.create_topic(output_topic, 1)
    produce(
        kafka.bootstrap_servers,
        input_topic,
        [(b"a", b"small"), (b"b", b"x" * 5_000), (b"c", b"small too")],
    )
    settings = settings_for(
        kafka.bootstrap_servers,
        f"refuse-{run_id}",
        tmp_path / handler,
        available_now=True,
        config={"production.exception.handler": handler},
        kafka_config={"producer.message.max.bytes": LIMIT},
    )
    runner = TopologyRunner(
        "tests.integration.topologies_for_tests:build_echo",
        settings,
        spark=spark,
        topology_kwargs={"input_topic": input_topic, "output_topic": output_topic},
    )
    return runner, output_topic


def test_log_and_continue_drops_the_refused_record_and_the_run_goes_on(kafka, spark, tmp_path):
    runner, output_topic = _run(kafka, spark, tmp_path, "log_and_continue")
    result = runner.run()
    assert result.records == 3
    out = read_topic(kafka.bootstrap_servers, output_topic, timeout_s=30)
    assert [(r.key, r.value) for r in out] == [(b"a", b"small"), (b"c", b"small too")]


def test_log_and_fail_fails_the_run_naming_sink_and_record(kafka, spark, tmp_path):
    runner, _ = _run(kafka, spark, tmp_path, "log_and_fail")
    with pytest.raises(
        StreamsError,
        match=r"sink could not send the record: the producer refused a record for topic "
        r"'refuse-out-\w+': MSG_SIZE_TOO_LARGE.*offset=1.*processor=out",
    ):
        runner.run()
