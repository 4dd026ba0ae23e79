"""Read-your-writes against a running application (local Spark, the embedded broker): a
record produced while the application runs, its offset taken from the delivery report, read
with that offset as the position bound, gives the value that includes it; a bound beyond
anything produced answers 503 ``not_up_to_bound`` (at once, or after the client's wait)
naming the bound and the task's position; a malformed bound answers 400."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from processor_api.cli.tools import main as processor_api_main
from processor_api.kafka.partitioner import default_partition
from processor_api.kafka.producer import make_producer
from processor_api.query import NotUpToBoundError, PositionBound, QueryClient, TaskUnavailableError
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.scrape import wait_for
from tests.harness.topics import produce, uid
from tests.integration.query_topologies import build_shop

pytestmark = pytest.mark.integration

SHOP = "tests.integration.query_topologies:build_shop"
CUSTOMERS = [f"c{i:02d}" for i in range(10)]
BASE_MS = 1_700_000_000_000


def _produce_one(bootstrap: str, topic: str, key: str, value: str, at: int) -> tuple[int, int]:
    """Produce one record; (partition, offset) from its delivery report."""
    producer = make_producer(bootstrap)
    reports: list = []
    producer.produce(
        topic,
        value.encode(),
        key.encode(),
        timestamp=at,
        on_delivery=lambda e, m: reports.append((e, m)),
    )
    assert producer.flush(30) == 0, "the record was not delivered within 30 s"
    ((error, message),) = reports
    assert error is None, error
    return message.partition(), message.offset()


def _totals_ready(client: QueryClient, expected: dict[str, int]) -> bool | None:
    """True once the live totals of every customer are the expected ones (None while not,
    or while a task is not available yet)."""
    try:
        got = {e["key"]: e["value"] for e in client.all("totals")}
    except TaskUnavailableError:
        return None
    return True if got == expected else None


def test_a_read_bounded_by_a_produced_offset_includes_that_record(kafka, spark, tmp_path, capsys):
    run_id = uid()
    app_id, topic = f"rw{run_id}", f"rw-in-{run_id}"
    kafka.create_topic(topic, 2)
    records = [(CUSTOMERS[i % 10], str(i + 1), BASE_MS + i * 100) for i in range(40)]
    produce(
        kafka.bootstrap_servers, topic, [(k.encode(), v.encode(), None, t) for k, v, t in records]
    )
    with TopologyTestDriver(build_shop(input_topic=topic)) as driver:
        pipe = driver.create_input_topic(topic)
        for key, value, at in records:
            pipe.pipe_input(key, value, at)
        expected = {kv.key: kv.value for kv in driver.get_key_value_store("totals").all()}

    settings = settings_for(
        kafka.bootstrap_servers,
        app_id,
        tmp_path / "state",
        epoch_interval_s=600.0,
        query_port=0,
        config={"commit.interval.ms": "200"},
    )
    run = BackgroundRun(SHOP, settings, spark=spark, topology_kwargs={"input_topic": topic})
    with run:
        port = wait_for("the query port", lambda: run.runner.query_port, alive=run)
        url = f"http://127.0.0.1:{port}"
        client = QueryClient(url)
        wait_for(
            "the first records in the totals", lambda: _totals_ready(client, expected), alive=run
        )

        # write, then read your write: the bound is the offset the produce got
        key = "c05"
        partition, offset = _produce_one(
            kafka.bootstrap_servers, topic, key, "1000", BASE_MS + 10_000
        )
        assert partition == default_partition(key.encode(), 2)
        bound = PositionBound.at(topic, partition, offset)
        entry = client.get("totals", key, position_bound=bound, wait_s=60)
        assert entry is not None and entry["value"] == expected[key] + 1000
        assert entry["input_position"][topic][str(partition)] >= offset
        assert entry["task"] == f"0_{partition}"
        # the committed store includes it once a commit covered it
        entry = client.get("totals", key, committed=True, position_bound=bound, wait_s=60)
        assert entry is not None and entry["value"] == expected[key] + 1000
        assert entry["consistency"] == "committed"
        # every other read takes the bound too
        windows = client.fetch_window("per-minute", key, position_bound=bound)
        assert sum(w["value"] for w in windows) == expected[key] + 1000
        sessions = client.fetch_sessions("visits", key, position_bound=bound)
        assert sum(s["value"] for s in sessions) == 5  # 4 records, then this one

        # a bound beyond anything produced: 503 naming the bound and the position
        beyond = f"{topic}:{partition}:{offset + 1000}"
        with pytest.raises(NotUpToBoundError) as refused:
            client.get("totals", key, position_bound=beyond)
        fields = refused.value.fields
        assert fields["bound"] == [[topic, partition, offset + 1000]]
        assert fields["input_position"] == {topic: {str(partition): offset}}
        assert f"has not reached the position bound {beyond}" in str(refused.value)
        with pytest.raises(NotUpToBoundError, match=r"still after waiting 0\.5s"):
            client.get("totals", key, position_bound=beyond, wait_s=0.5)
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(f"{url}/stores/totals/keys/{key}?position_bound={beyond}")
        assert (http.value.code, http.value.headers["Retry-After"]) == (503, "1")
        assert json.loads(http.value.read())["code"] == "not_up_to_bound"

        # a malformed bound: 400 naming the parameter
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(
                f"{url}/stores/totals/keys/{key}?position_bound={topic}:{partition}"
            )
        assert http.value.code == 400
        assert "position_bound: entry" in json.loads(http.value.read())["error"]

        # the command, for people
        command = ["query", "--url", url, "totals", key]
        capsys.readouterr()
        assert processor_api_main([*command, "--position-bound", str(bound), "--wait", "30"]) == 0
        assert json.loads(capsys.readouterr().out)["value"] == expected[key] + 1000
        assert processor_api_main([*command, "--position-bound", beyond]) == 3
        assert "has not reached the position bound" in capsys.readouterr().err
        assert processor_api_main([*command, "--position-bound", "nonsense"]) == 2
        assert "--position-bound: entry 'nonsense'" in capsys.readouterr().err
        run.stop()
