"""A range's pages are rendered once, on the worker host, as the driver's HTTP answer writes
its entries, and travel after the reply frame's JSON; the driver joins them. The answer must
be the one the driver wrote when it decoded and encoded every entry itself: the same text,
for every kind of key and value, through real sockets and a real RocksDB store."""

from __future__ import annotations

import base64
import enum
import json
import math
import socket
import threading
import urllib.request

import pytest

from processor_api import Serdes, Stores
from processor_api.query.router import HostRouter
from processor_api.query.routing import StoreRoutes
from processor_api.query.server import QueryEndpoint, QueryServer, _entry
from processor_api.runtime.query_link import (
    FrameError,
    FrameReader,
    QueryLink,
    RenderedEntries,
    TaskStoreReader,
    encode_frame,
    entry_tail,
    receive_frame,
    render_entries,
)
from processor_api.state.base import KeyValue
from processor_api.state.batch_buffer import BatchBufferBytesStore
from processor_api.state.json_entries import entry_fields, json_default
from processor_api.state.windowed_types import (
    SessionWindow,
    TimeWindow,
    ValueAndTimestamp,
    VersionedRecord,
    Windowed,
)
from tests.harness.scrape import wait_for
from topologies.count_per_key import build_topology


class _Level(enum.IntEnum):
    HIGH = 3


class _Name(str):
    pass


VALUES = [
    "plain",
    'quotes " and \\ backslash',
    "line\nbreak\ttab\x00nul\x1f",
    "ünïcødé ☃ 𝄞 \u2028",
    "",
    0,
    -17,
    2**70,
    True,
    False,
    None,
    1.5,
    -0.0,
    1e300,
    math.inf,
    -math.inf,
    b"\x00\xffbytes",
    {"a": [1, 2.5, None], "b": {"c": "d"}, 3: "int key"},
    [1, "two", [3]],
    (4, 5),
    _Level.HIGH,
    _Name("a str subclass"),
    ValueAndTimestamp("v", 1_700_000_000_000),
    ValueAndTimestamp({"nested": [1]}, -1),
    VersionedRecord("old", 10, 20),
]

KEYS = ["k", 7, b"raw", _Name("sub"), Windowed("w", TimeWindow(0, 60_000)),
        Windowed(5, SessionWindow(10, 20))]  # fmt: skip


def _old_text(entry: KeyValue, task: str, body: dict) -> str:
    """An entry as the driver wrote it before: decoded from the frame's JSON, then
    ``_entry`` and ``json.dumps`` of the whole answer."""
    fields = json.loads(json.dumps(entry_fields(entry), default=json_default, ensure_ascii=False))
    return json.dumps(_entry(fields, task, body), default=json_default, ensure_ascii=False)


@pytest.mark.parametrize(
    "body",
    [
        {"position": 42, "consistency": "live"},
        {"position": None, "consistency": "committed", "input_position": {"in-put": 7}},
    ],
)
def test_every_kind_of_entry_is_rendered_as_the_driver_wrote_it(body):
    entries = [KeyValue(key, value) for key in KEYS for value in VALUES]
    texts = render_entries(entries, entry_tail("1_3", body))
    assert texts == [_old_text(entry, "1_3", body) for entry in entries]
    for text in texts:
        assert "\n" not in text  # what the frame's JSON is told apart from the page by


def test_a_reply_with_rendered_entries_crosses_a_socket_whole():
    page = ", ".join(render_entries([KeyValue("a\nb", 1), KeyValue("c", "d\n")], ", ...}"))
    entries = RenderedEntries(page.encode(), 2)
    message = {"op": "reply", "id": 9, "status": 200,
               "body": {"entries": entries, "more": True, "last": "Yw=="}}  # fmt: skip
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(10)
        for receive in (FrameReader(right).next, lambda: receive_frame(right)):
            left.sendall(encode_frame(message))
            got = receive()
            assert got is not None
            assert {k: v for k, v in got["body"].items() if k != "entries"} == {
                "more": True,
                "last": "Yw==",
            }
            assert (got["body"]["entries"].data, got["body"]["entries"].count) == (
                page.encode(),
                2,
            )


def test_a_frame_with_text_after_its_json_that_counts_no_entries_is_refused():
    data = b'{"op": "reply", "body": {}}\n{"key": 1}'
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(10)
        left.sendall(len(data).to_bytes(4, "big") + data)
        with pytest.raises(FrameError, match="does not count them"):
            receive_frame(right)


# ------------------------------------------------------------ through the whole path
TASKS = ("0_0", "0_1")


@pytest.fixture(params=["rocksdb", "in-memory"])
def served(request, tmp_path):
    """Two tasks' count stores (in the runtime's batch buffer, some writes not committed
    yet), each host's link answering on a loop thread, the driver's router and HTTP server.
    RocksDB: pages read off the loop (``TaskStoreReader.defer``); in memory: on the loop,
    in time slices."""
    supplier = (
        Stores.persistent_key_value_store("counts")
        if request.param == "rocksdb"
        else Stores.in_memory_key_value_store("counts")
    )
    builder = Stores.key_value_store_builder(supplier, Serdes.string(), Serdes.long())
    stacks, readers = [], {}
    for index, task in enumerate(TASKS):
        directory = tmp_path / task
        buffer = BatchBufferBytesStore(builder.supplier.get(directory))
        stack = builder.build(directory, inner=buffer)
        stacks.append(stack)
        for i in range(index, 3000, 2):
            stack.store.put(f"key-{i:05d}", i)
        stack.changelog.drain_changes()
        buffer.commit()
        for i in range(index, 3000, 10):  # uncommitted: the live view has them
            stack.store.put(f"key-{i:05d}", -i)
        stack.store.delete(f"key-{index + 100:05d}")
        readers[task] = TaskStoreReader(
            task, {"counts": stack}, lambda name, s=stack: s.store, lambda name: 5
        )
    router = HostRouter("127.0.0.1")
    endpoint = QueryEndpoint(StoreRoutes(build_topology(input_topic="in"), TASKS), router)
    server = QueryServer(endpoint, "127.0.0.1", 0, None)
    woken, stop = threading.Event(), threading.Event()
    link = QueryLink(router.address, router.secret, "host", lambda task: None, woken.set)

    def loop() -> None:
        while not stop.is_set():
            if woken.wait(0.05):
                woken.clear()
                link.serve(readers.get)

    thread = threading.Thread(target=loop)
    thread.start()
    link.set_tasks(TASKS)
    wait_for("the host's tasks", lambda: len(router.tasks()) == 2 or None, timeout_s=10)
    try:
        yield f"http://127.0.0.1:{server.port}", endpoint
    finally:
        stop.set()
        thread.join()
        link.close()
        server.close()
        router.close()
        for stack in stacks:
            stack.close()


def _expected(task_index: int) -> list[dict]:
    task = TASKS[task_index]
    out = []
    for i in range(task_index, 3000, 2):
        if i == task_index + 100:
            continue  # deleted, not committed
        value = -i if (i - task_index) % 10 == 0 else i
        out.append({"key": f"key-{i:05d}", "value": value, "task": task, "position": 5,
                    "input_position": None, "consistency": "live"})  # fmt: skip
    return out


def test_pages_of_every_entry_over_http_are_the_live_view_in_json_dumps_text(served):
    url, _ = served
    expected = _expected(0) + _expected(1)
    got, page, texts = [], None, []
    while True:
        query = "limit=700" + (f"&page={page}" if page else "")
        with urllib.request.urlopen(f"{url}/stores/counts/all?{query}", timeout=30) as answer:
            text = answer.read()
        body = json.loads(text)
        texts.append((text, body))
        got.extend(body["entries"])
        page = body["next"]
        if page is None:
            break
    assert got == expected
    assert [len(body["entries"]) for _, body in texts] == [700, 700, 700, 700, 198]
    for text, body in texts:  # the text itself is json.dumps's of the answer
        assert text == json.dumps(body, ensure_ascii=False).encode()


def test_a_range_with_bounds_across_the_slices_of_the_loop(served, monkeypatch):
    from processor_api.runtime import query_link

    monkeypatch.setattr(query_link, "SLICE_S", 0.0)  # every page cut after one batch
    _, endpoint = served
    answer = endpoint.get("/stores/counts/range", {"from": "key-00010", "to": "key-02000"})
    in_range = [e for e in _expected(0) + _expected(1) if "key-00010" <= e["key"] <= "key-02000"]
    assert answer == {"entries": in_range[:1000], "next": answer["next"]}
    rest = endpoint.get(
        "/stores/counts/range",
        {"from": "key-00010", "to": "key-02000", "limit": "10000", "page": answer["next"]},
    )
    assert rest == {"entries": in_range[1000:], "next": None}


# ------------------------------------------------------------ pages read off the loop
@pytest.fixture
def counts(tmp_path):
    """One task's count store as the runtime builds it (change-logged, in the batch buffer
    over RocksDB), 1,000 keys committed, and its reader."""
    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.string(), Serdes.long()
    )
    buffer = BatchBufferBytesStore(builder.supplier.get(tmp_path))
    stack = builder.build(tmp_path, inner=buffer)
    for i in range(1000):
        stack.store.put(f"key-{i:05d}", i)
    stack.changelog.drain_changes()
    buffer.commit()
    reader = TaskStoreReader("0_0", {"counts": stack}, lambda name: stack.store, lambda n: 1)
    yield stack, buffer, reader
    stack.close()


def _all(limit: int = 10_000) -> dict:
    return {"store": "counts", "kind": "range", "limit": limit, "id": 1, "task": "0_0"}


def test_a_page_read_off_the_loop_is_the_store_as_it_was_when_the_loop_opened_it(counts):
    stack, buffer, reader = counts
    stack.store.put("key-00001", -1)  # in the batch, not committed
    job = reader.defer(_all())
    assert job is not None
    # the loop goes on meanwhile: writes, a commit, more writes
    stack.store.put("key-00002", -2)
    stack.store.delete("key-00003")
    stack.changelog.drain_changes()
    buffer.commit()
    stack.store.put("key-00004", -4)
    status, body = job()
    assert status == 200
    entries = body["entries"].parsed()
    assert [e["key"] for e in entries] == [f"key-{i:05d}" for i in range(1000)]
    assert [e["value"] for e in entries[:5]] == [0, -1, 2, 3, 4]
    assert (body["more"], body["last"]) == (False, None)


def test_a_page_off_the_loop_of_a_store_closed_meanwhile_answers_503_not_a_short_page(counts):
    stack, _, reader = counts
    job = reader.defer(_all())
    assert job is not None
    stack.close()  # the task left the worker before the page was read
    status, body = job()
    assert (status, body["code"]) == (503, "unavailable")
    assert "store 'counts', task 0_0" in body["error"]


def test_a_page_off_the_loop_stops_at_its_limit_and_says_where(counts):
    _, _, reader = counts
    job = reader.defer(_all(limit=300))
    assert job is not None
    status, body = job()
    assert (status, body["entries"].count, body["more"]) == (200, 300, True)
    assert base64.b64decode(body["last"]) == b"key-00299"


def test_only_stores_whose_iterators_are_snapshots_are_read_off_the_loop(counts, tmp_path):
    _, _, reader = counts
    assert reader.defer({**_all(), "kind": "key", "key": "a2V5"}) is None  # not a range
    assert reader.defer({**_all(), "store": "nope"}) is None  # answer() names it
    for builder in (
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("mem"), Serdes.string(), Serdes.long()
        ),
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("ttl"), Serdes.string(), Serdes.long()
        ).with_ttl(60_000),
    ):
        directory = tmp_path / builder.name
        stack = builder.build(
            directory, inner=BatchBufferBytesStore(builder.supplier.get(directory))
        )
        try:
            other = TaskStoreReader("0_0", {"s": stack}, lambda name, s=stack: s.store, lambda n: 1)
            assert other.defer({**_all(), "store": "s"}) is None
        finally:
            stack.close()


def test_a_page_off_the_loop_ends_at_its_size_bound_and_the_next_resumes_after_it(
    counts, monkeypatch
):
    from processor_api.runtime import query_link

    monkeypatch.setattr(query_link, "MAX_PAGE_CHARS", 20_000)  # about 150 entries here
    _, _, reader = counts
    keys, sizes, after = [], [], None
    while True:
        job = reader.defer({**_all(), "after": after})
        assert job is not None
        status, body = job()
        assert status == 200
        keys.extend(e["key"] for e in body["entries"].parsed())
        sizes.append(len(body["entries"].data))
        if not body["more"]:
            break
        after = body["last"]
    assert keys == [f"key-{i:05d}" for i in range(1000)]
    # cut after the batch (64 entries) that passed the bound, so several pages
    assert len(sizes) > 3
    assert max(sizes) < 20_000 + 64 * 200
