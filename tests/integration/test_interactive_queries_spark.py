"""Interactive queries (``run-topology --query-port``) of a running application on local Spark
and the embedded broker: every readable store kind read through the driver's endpoint equals
what ``TopologyTestDriver`` holds after the same input; errors name what was wrong; a task
that is restoring answers 503, then the right value."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from processor_api.cli.tools import main as processor_api_main
from processor_api.kafka.partitioner import default_partition
from processor_api.query import (
    BadQueryError,
    QueryClient,
    TaskUnavailableError,
    UnauthorizedError,
    UnknownStoreError,
)
from processor_api.state.json_entries import entry_fields
from processor_api.state.manager import wipe_application_state
from processor_api.testing import TopologyTestDriver
from tests.harness.runs import BackgroundRun, settings_for
from tests.harness.scrape import wait_for
from tests.harness.topics import produce, uid
from tests.integration.query_topologies import build_shop, restore_gate

pytestmark = pytest.mark.integration

SHOP = "tests.integration.query_topologies:build_shop"
CUSTOMERS = [f"c{i:02d}" for i in range(20)]
BASE_MS = 1_700_000_000_000
TOKEN = "let-me-read"


def _records(count: int) -> list[tuple[str, str, int]]:
    """``(customer, amount, timestamp)``: each customer every 20 records, 400 ms apart."""
    return [(CUSTOMERS[i % 20], str(i % 50 + 1), BASE_MS + i * 400) for i in range(count)]


def _expected(records: list[tuple[str, str, int]]) -> TopologyTestDriver:
    driver = TopologyTestDriver(build_shop(input_topic="in"))
    topic = driver.create_input_topic("in")
    for key, value, at in records:
        topic.pipe_input(key, value, at)
    return driver


def _fields(entries: list[dict]) -> list[dict]:
    """Entries without what only the endpoint says (task, positions, consistency)."""
    drop = ("task", "position", "input_position", "consistency")
    return [{k: v for k, v in e.items() if k not in drop} for e in entries]


def _rendered(entries) -> list[dict]:
    return [json.loads(json.dumps(entry_fields(e))) for e in entries]


def _by_key(entries: list[dict]) -> list[dict]:
    return sorted(entries, key=lambda e: json.dumps(e, sort_keys=True))


def _run(kafka, spark, tmp_path, app_id, topic, **settings):
    return BackgroundRun(
        SHOP,
        settings_for(
            kafka.bootstrap_servers,
            app_id,
            tmp_path / "state",
            epoch_interval_s=600.0,
            query_port=0,
            config={"commit.interval.ms": "200", **settings.pop("config", {})},
            **settings,
        ),
        spark=spark,
        topology_kwargs={"input_topic": topic},
    )


def _settled(client: QueryClient, expected: list[dict]) -> bool | None:
    """True once the committed totals are the expected ones (None while not, or while a
    task is not available yet)."""
    try:
        got = _fields(list(client.all("totals", committed=True)))
    except TaskUnavailableError:
        return None
    return True if _by_key(got) == expected else None


def test_every_store_kind_read_live_and_committed_equals_the_test_driver(
    kafka, spark, tmp_path, capsys
):
    run_id = uid()
    app_id, topic = f"iq{run_id}", f"iq-in-{run_id}"
    kafka.create_topic(topic, 2)
    records = _records(300)
    produce(
        kafka.bootstrap_servers, topic, [(k.encode(), v.encode(), None, t) for k, v, t in records]
    )
    driver = _expected(records)
    totals_store = driver.get_key_value_store("totals")
    totals = _by_key(_rendered(totals_store.all()))

    with _run(kafka, spark, tmp_path, app_id, topic, query_token=TOKEN) as run:
        port = wait_for("the query port", lambda: run.runner.query_port, alive=run)
        url = f"http://127.0.0.1:{port}"
        client = QueryClient(url, token=TOKEN)
        wait_for(
            "every record in the committed totals", lambda: _settled(client, totals), alive=run
        )

        # point lookups, routed by the partitioner to the task that holds the key
        for key in CUSTOMERS:
            for committed in (False, True):
                entry = client.get("totals", key, committed=committed)
                assert entry is not None
                assert _fields([entry]) == _rendered(
                    [_kv(key, driver.get_key_value_store("totals").get(key))]
                )
                assert entry["task"] == f"0_{default_partition(key.encode(), 2)}"
                assert isinstance(entry["position"], int) and entry["position"] > 0
                assert entry["consistency"] == ("committed" if committed else "live")
            seen = client.get("seen", key)
            expected_seen = driver.get_timestamped_key_value_store("seen").get(key)
            assert seen is not None and (seen["value"], seen["timestamp"]) == (
                expected_seen.value,
                expected_seen.timestamp,
            )

        # ranges and everything, in pages of 7 (several per task)
        ranged = _fields(list(client.range("totals", "c03", "c11", page_size=7)))
        assert _by_key(ranged) == _by_key(
            _rendered(driver.get_key_value_store("totals").range("c03", "c11"))
        )
        everything = _fields(list(client.all("seen", page_size=7)))
        assert _by_key(everything) == _by_key(
            _rendered(driver.get_timestamped_key_value_store("seen").all())
        )
        assert len(everything) == len(CUSTOMERS)

        # windows, sessions, versions as of a time
        window_store = driver.get_window_store("per-minute")
        session_store = driver.get_session_store("visits")
        versions = driver.get_versioned_key_value_store("prices")
        for key in ("c00", "c07", "c19"):
            assert _fields(client.fetch_window("per-minute", key)) == _rendered(
                window_store.fetch(key, key, 0, BASE_MS * 2)
            )
            middle = BASE_MS + 60_000
            assert _fields(
                client.fetch_window("per-minute", key, middle, BASE_MS * 2)
            ) == _rendered(window_store.fetch(key, key, middle, BASE_MS * 2))
            assert _fields(client.fetch_sessions("visits", key)) == _rendered(
                session_store.fetch(key)
            )
            for as_of in (BASE_MS + 10_000, BASE_MS + 50_000, BASE_MS + 119_000):
                got = client.get_as_of("prices", key, as_of)
                want = versions.get(key, as_of)
                assert got is not None and want is not None
                assert (got["value"], got["timestamp"], got["valid_to"]) == (
                    want.value,
                    want.timestamp,
                    want.valid_to,
                )
            latest = client.get("prices", key)
            assert latest is not None and latest["value"] == versions.get(key).value

        # what was wrong, named
        assert client.get("totals", "nobody") is None
        with pytest.raises(UnknownStoreError, match="no store 'nope'.*totals"):
            client.get("nope", "c00")
        with pytest.raises(BadQueryError, match="does not fit the key serde"):
            client.get("by-amount", "not a number")
        with pytest.raises(BadQueryError, match="window store"):
            list(client.range("per-minute"))
        with pytest.raises(BadQueryError, match="as_of reads versioned stores only"):
            client.get_as_of("totals", "c00", BASE_MS)
        with pytest.raises(UnauthorizedError, match="Bearer"):
            QueryClient(url).get("totals", "c00")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{url}/stores", method="DELETE"))
        assert refused.value.code == 405

        # the command, for people
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        command = ["query", "--url", url, "--token-file", str(token_file)]
        capsys.readouterr()
        assert processor_api_main([*command, "totals", "c05"]) == 0
        assert json.loads(capsys.readouterr().out)["value"] == totals_store.get("c05")
        assert processor_api_main([*command, "per-minute", "c05", "--committed"]) == 0
        windows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert _fields(windows) == _rendered(window_store.fetch("c05", "c05", 0, BASE_MS * 2))
        assert processor_api_main([*command, "totals", "nobody"]) == 1
        assert "store 'totals' holds no key 'nobody'" in capsys.readouterr().err
        assert processor_api_main([*command, "nope"]) == 2
        assert "no store 'nope'" in capsys.readouterr().err
        run.stop()
    driver.close()


def _kv(key, value):
    from processor_api.state.base import KeyValue

    return KeyValue(key, value)


def test_a_restoring_task_answers_503_then_the_right_value(kafka, spark, tmp_path):
    run_id = uid()
    app_id, topic = f"iq{run_id}", f"iq-in-{run_id}"
    kafka.create_topic(topic, 2)
    records = _records(100)
    produce(
        kafka.bootstrap_servers, topic, [(k.encode(), v.encode(), None, t) for k, v, t in records]
    )
    driver = _expected(records)
    totals = _by_key(_rendered(driver.get_key_value_store("totals").all()))
    with _run(kafka, spark, tmp_path, app_id, topic) as run:
        port = wait_for("the query port", lambda: run.runner.query_port, alive=run)
        wait_for(
            "the first run's totals",
            lambda: _settled(QueryClient(f"http://127.0.0.1:{port}"), totals),
            alive=run,
        )
        run.stop()
    wipe_application_state(tmp_path / "state", app_id)  # the next run restores every store

    gate = restore_gate(app_id)
    gate.unlink(missing_ok=True)
    listener = "tests.integration.query_topologies:GatedRestoreListener"
    second = _run(
        kafka, spark, tmp_path, app_id, topic, config={"state.restore.listener": listener}
    )
    try:
        with second as run:
            port = wait_for("the query port", lambda: run.runner.query_port, alive=run)
            client = QueryClient(f"http://127.0.0.1:{port}")

            def restoring() -> TaskUnavailableError | None:
                for key in CUSTOMERS[:4]:  # keys of both tasks
                    try:
                        client.get("totals", key)
                    except TaskUnavailableError as exc:
                        if "restoring" in str(exc):
                            return exc
                return None

            error = wait_for("a 503 while the stores restore", restoring, alive=run)
            assert error.retry_after_s == 1
            gate.touch()
            wait_for("the restored totals", lambda: _settled(client, totals), alive=run)
            entry = client.get("totals", "c00")
            assert entry is not None and entry["value"] == driver.get_key_value_store("totals").get(
                "c00"
            )
            run.stop()
    finally:
        gate.unlink(missing_ok=True)
        driver.close()
