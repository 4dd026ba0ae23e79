"""Read-your-writes (IQv2's ``PositionBound``) without Spark: the bound's text, Kafka
Streams' comparison, a task's reader refusing a read its position has not reached, and the
whole path (HTTP server, router, a host's query link over real sockets, a real RocksDB
store) answering 503 ``not_up_to_bound`` with the bound and the position, then the value."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request

import pytest

from processor_api import Serdes, Stores
from processor_api.kafka.partitioner import default_partition
from processor_api.query import BadQueryError, NotUpToBoundError, PositionBound, QueryClient
from processor_api.query.position import as_bound
from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint, QueryServer
from processor_api.runtime import query_bounds
from processor_api.runtime.off_loop_reads import answer_point_read
from processor_api.runtime.query_link import QueryLink, TaskStoreReader
from processor_api.state.batch_buffer import BatchBufferBytesStore
from tests.harness.scrape import wait_for
from tests.integration.query_topologies import build_shop

TASKS = ("0_0", "0_1")
INPUT = "shop-input"  # build_shop's input topic


# ----------------------------------------------------------------- the text
def test_a_bound_parses_from_topic_partition_offset_entries():
    bound = PositionBound.parse("orders:1:41, orders:0:7,pay.ments-2:1:0")
    assert bound.entries() == [("orders", 0, 7), ("orders", 1, 41), ("pay.ments-2", 1, 0)]
    assert str(bound) == "orders:0:7,orders:1:41,pay.ments-2:1:0"
    assert PositionBound.parse(str(bound)) == bound
    # one topic-partition named twice: the larger offset, as Position.merge keeps
    assert PositionBound.parse("t:0:5,t:0:9,t:0:2") == PositionBound.at("t", 0, 9)
    assert PositionBound.at("t", 0, 3).merge(PositionBound.at("t", 1, 4)) == PositionBound.parse(
        "t:0:3,t:1:4"
    )
    assert PositionBound.from_position({"t": {"0": 3, "1": 4}}) == PositionBound.parse(
        "t:0:3,t:1:4"
    )
    assert as_bound([("t", 1, 4)]) == PositionBound.at("t", 1, 4)
    assert as_bound("t:1:4") == PositionBound.at("t", 1, 4)
    assert as_bound(None) is None and as_bound([]) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "position_bound is empty; expected topic:partition:offset"),
        ("orders", "entry 'orders' is not topic:partition:offset"),
        ("orders:3", "entry 'orders:3' is not topic:partition:offset"),
        (":1:3", "entry ':1:3' is not topic:partition:offset"),
        ("orders:x:3", "entry 'orders:x:3' has partition 'x', not a whole number >= 0"),
        ("orders:1:-3", "entry 'orders:1:-3' has offset '-3', not a whole number >= 0"),
        ("orders:1:3,orders:1", "entry 'orders:1' is not topic:partition:offset"),
    ],
)
def test_a_malformed_bound_names_the_parameter_and_the_entry(text, message):
    with pytest.raises(BadQueryError, match="^position_bound") as error:
        PositionBound.parse(text)
    assert message in str(error.value)
    assert error.value.status == 400


def test_a_bound_of_entries_refuses_what_is_no_offset():
    with pytest.raises(BadQueryError, match="offset -1 of topic 't' is not a whole number"):
        PositionBound.at("t", 0, -1)
    with pytest.raises(BadQueryError, match="topic 'a:b' is not a topic name"):
        PositionBound.at("a:b", 0, 1)


# ----------------------------------------------------------- the comparison
def test_the_comparison_is_kafka_streams_is_permitted():
    # a task of partition 1 that will process offset 42 of "in" next: it processed 41
    offsets = {"in": 42}
    assert query_bounds.reached(offsets, 1, [("in", 1, 41)])
    assert query_bounds.reached(offsets, 1, [("in", 1, 0)])
    assert not query_bounds.reached(offsets, 1, [("in", 1, 42)])  # not processed yet
    assert query_bounds.reached(offsets, 1, [("in", 0, 10_000)])  # another partition's
    assert not query_bounds.reached(offsets, 1, [("other", 1, 0)])  # nothing of it seen
    assert not query_bounds.reached({}, 1, [("in", 1, 0)])
    assert not query_bounds.reached(offsets, 1, [("in", 1, 3), ("in2", 1, 0)])
    assert query_bounds.position_of({"in": 42, "empty": 0}, 1) == {"in": {"1": 41}}


@pytest.fixture
def totals(tmp_path):
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("totals"), Serdes.string(), Serdes.long()
    ).with_logging_disabled()
    stack = builder.build(tmp_path)
    yield stack
    stack.close()


def _key(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_task_reader_refuses_a_read_its_position_has_not_reached(totals):
    totals.store.put("alice", 5)
    live, committed = {INPUT: 10}, {INPUT: 4}
    reader = TaskStoreReader(
        "0_1",
        {"totals": totals},
        lambda name: totals.store,
        lambda name: 99,
        lambda is_committed: committed if is_committed else live,
    )
    read = {"store": "totals", "kind": "key", "key": _key("alice"), "limit": 1}

    status, body = reader.answer({**read, "bound": [[INPUT, 1, 9]]})
    assert status == 200 and body["entries"] == [{"key": "alice", "value": 5}]
    assert body["input_position"] == {INPUT: {"1": 9}}

    status, body = reader.answer({**read, "bound": [[INPUT, 1, 10]]})
    assert status == 503
    assert body["code"] == "not_up_to_bound"
    assert body["bound"] == [[INPUT, 1, 10]]
    assert body["input_position"] == {INPUT: {"1": 9}}
    assert body["error"] == (
        "store 'totals', task 0_1: its live position (shop-input:1:9) has not reached the "
        "position bound shop-input:1:10"
    )

    # a committed read is checked against what the last commit covered
    status, body = reader.answer({**read, "committed": True, "bound": [[INPUT, 1, 9]]})
    assert status == 503 and body["input_position"] == {INPUT: {"1": 3}}
    assert "its committed position (shop-input:1:3)" in body["error"]
    status, body = reader.answer({**read, "committed": True, "bound": [[INPUT, 1, 3]]})
    assert status == 200 and body["consistency"] == "committed"


# ---------------------------------------------------------- the whole path
class _Host:
    """A worker host of one store whose task has processed up to ``offsets`` (live): the
    link's reads are served by a loop thread as WorkerHost.serve_queries serves them."""

    def __init__(self, router: HostRouter, stack) -> None:
        self.offsets: dict[str, int] = {}
        self.asked = 0
        self.on_ask = lambda asked: None
        self._stack = stack
        self._woken, self._stop = threading.Event(), threading.Event()
        self.link = QueryLink(router.address, router.secret, "host-a", lambda t: None, self._wake)
        self._loop = threading.Thread(target=self._serve, daemon=True)
        self._loop.start()
        self.link.set_tasks(TASKS)
        wait_for("the host's tasks", lambda: router.tasks() or None, timeout_s=10)

    def _wake(self) -> None:
        self._woken.set()

    def _input_offsets(self, committed: bool) -> dict[str, int]:
        self.asked += 1
        self.on_ask(self.asked)
        return dict(self.offsets)

    def _reader(self, task: str) -> TaskStoreReader:
        stack = self._stack
        return TaskStoreReader(
            task, {"totals": stack}, lambda n: stack.store, lambda n: 7, self._input_offsets
        )

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._woken.wait(0.05):
                self._woken.clear()
                self.link.serve(self._reader)

    def close(self) -> None:
        self._stop.set()
        self._loop.join()
        self.link.close()


@pytest.fixture
def served(totals):
    router = HostRouter("127.0.0.1")
    server = QueryServer(
        QueryEndpoint(StoreRoutes(build_shop(), TASKS), router), "127.0.0.1", 0, None
    )
    host = _Host(router, totals)
    yield host, f"http://127.0.0.1:{server.port}"
    host.close()
    server.close()
    router.close()


def test_a_read_waits_for_its_bound_then_answers_the_value_that_includes_it(served, totals):
    host, url = served
    partition = default_partition(b"alice", len(TASKS))
    client = QueryClient(url)
    totals.store.put("alice", 1)
    host.offsets = {INPUT: 5}  # processed offsets 0-4 of the key's partition

    # the record at offset 5 is processed on the third ask: the client asks again until then
    def process_offset_5(asked: int) -> None:
        if asked == 3:
            totals.store.put("alice", 2)
            host.offsets = {INPUT: 6}

    host.on_ask = process_offset_5
    bound = PositionBound.at(INPUT, partition, 5)
    entry = client.get("totals", "alice", position_bound=bound, wait_s=30)
    assert entry is not None and entry["value"] == 2
    assert entry["input_position"] == {INPUT: {str(partition): 5}}
    assert host.asked >= 3

    # the bound of an answer's position: a later read sees at least as much
    again = client.get(
        "totals", "alice", position_bound=PositionBound.from_position(entry["input_position"])
    )
    assert again is not None and again["value"] == 2
    # a read of every task: the bound is the key's partition's; the other task passes it
    # (this host's two tasks share one store: the key twice)
    everything = list(client.all("totals", position_bound=bound))
    assert [(e["key"], e["task"]) for e in everything] == [("alice", "0_0"), ("alice", "0_1")]


def test_a_bound_beyond_what_was_processed_answers_503_naming_bound_and_position(served):
    host, url = served
    partition = default_partition(b"alice", len(TASKS))
    host.offsets = {INPUT: 6}
    client = QueryClient(url)
    text = f"{INPUT}:{partition}:1000"

    with pytest.raises(NotUpToBoundError) as refused:
        client.get("totals", "alice", position_bound=text)  # no wait: at once
    error = refused.value
    assert error.status == 503 and error.retry_after_s == 1
    assert error.fields["bound"] == [[INPUT, partition, 1000]]
    assert error.fields["input_position"] == {INPUT: {str(partition): 5}}
    assert error.fields["task"] == f"0_{partition}"
    assert f"has not reached the position bound {text}" in str(error)

    asked = host.asked
    with pytest.raises(NotUpToBoundError, match=r"still after waiting 0\.3s"):
        client.get("totals", "alice", position_bound=text, wait_s=0.3)
    assert host.asked > asked + 1  # it asked again while it waited

    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(f"{url}/stores/totals/keys/alice?position_bound={text}")
    assert http.value.code == 503
    assert http.value.headers["Retry-After"] == "1"
    body = json.loads(http.value.read())
    assert body["code"] == "not_up_to_bound"
    assert (body["bound"], body["input_position"]) == (
        [[INPUT, partition, 1000]],
        {INPUT: {str(partition): 5}},
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "position_bound=shop-input:1",
            "position_bound: entry 'shop-input:1' is not topic:partition:offset",
        ),
        ("position_bound=shop-input:one:3", "has partition 'one', not a whole number >= 0"),
        (
            "position_bound=elsewhere:0:3",
            "topic 'elsewhere' is no input of store 'totals' (its tasks read shop-input)",
        ),
        (
            "position_bound=shop-input:2:3",
            "partition 2 of topic 'shop-input': store 'totals' has 2 tasks",
        ),
    ],
)
def test_a_malformed_bound_answers_400_naming_it(served, query, message):
    _, url = served
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(f"{url}/stores/totals/keys/alice?{query}")
    assert http.value.code == 400
    body = json.loads(http.value.read())
    assert body["code"] == "bad_request" and message in body["error"]


def test_an_off_loop_point_read_is_refused_below_its_bound_on_the_link_thread(tmp_path):
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("totals"), Serdes.string(), Serdes.long()
    ).with_caching_enabled()
    buffer = BatchBufferBytesStore(builder.supplier.get(tmp_path))
    stack = builder.build(tmp_path, inner=buffer)
    try:
        stack.store.put("alice", 3)
        live = {INPUT: 8}
        read = {"store": "totals", "kind": "key", "key": _key("alice"), "limit": 1}

        def answer(request):
            return answer_point_read(
                "0_0", {"totals": stack}, {"totals": buffer}, lambda n: 7, request, lambda c: live
            )

        status, body = answer({**read, "bound": [[INPUT, 0, 8]]})
        assert status == 503 and body["code"] == "not_up_to_bound"
        assert body["input_position"] == {INPUT: {"0": 7}}
        live[INPUT] = 9  # the loop processed offset 8
        status, body = answer({**read, "bound": [[INPUT, 0, 8]]})
        assert status == 200 and body["entries"] == [{"key": "alice", "value": 3}]
        assert body["input_position"] == {INPUT: {"0": 8}}
    finally:
        stack.close()
