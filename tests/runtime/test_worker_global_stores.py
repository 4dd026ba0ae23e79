"""A worker host's tasks share one copy of the global stores, as Kafka Streams' instance does.

Order enrichment (a global store of customers, orders on two partitions: tasks ``1_0`` and
``1_1``) on one worker host, on the embedded broker without Spark. Before, every task kept its
own copy under ``<task dir>/global`` and filled it from the customers topic: a worker of N
tasks filled, stored and caught up N copies.

* one copy, in ``<state dir>/<app>/global-w0``, filled once, and every task enriches its
  orders from it; a customer produced later reaches both tasks;
* a second host of the same worker on the machine (the directory is locked) keeps a private
  copy for its run and deletes it when it closes;
* ``--cleanup`` deletes the workers' copies with the task directories.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from processor_api.kafka.names import commit_marker_topic
from processor_api.runtime import worker_host
from processor_api.runtime.host_client import exchange, request, socket_name, worker_key
from processor_api.runtime.job import JobSpec
from processor_api.runtime.protocol import CloseRequest, EpochEnd, TaskEpoch, WorkerEpochRequest
from processor_api.runtime.worker_globals import WorkerGlobalStores, worker_global_directory
from processor_api.state.locks import TaskLock
from processor_api.state.manager import wipe_application_state
from tests.harness.task_runs import the_reply
from tests.harness.topics import committed_records, produce, uid

pytestmark = pytest.mark.integration

WAIT_S = 60.0
TASKS = ("1_0", "1_1")


class EnrichmentHost:
    """Worker ``w0`` of an order-enrichment run, served by a host in a thread of the test."""

    def __init__(self, kafka, state_dir: Path, *, serve: bool = True) -> None:
        self.app, self.orders, self.customers, self.output = (
            uid("gworker"), uid("orders"), uid("customers"), uid("enriched"),
        )  # fmt: skip
        kafka.create_topic(self.orders, 2)
        kafka.create_topic(self.customers, 1)
        kafka.create_topic(self.output, 1)
        kafka.create_topic(commit_marker_topic(self.app), 2)
        self.bootstrap = kafka.bootstrap_servers
        self.spec = JobSpec(
            run_id=uuid.uuid4().hex,
            topology_ref="topologies.order_enrichment:build_topology",
            topology_kwargs={
                "orders_topic": self.orders,
                "customers_topic": self.customers,
                "output_topic": self.output,
            },
            topology_pickle=None,
            bootstrap_servers=self.bootstrap,
            state_dir=str(state_dir),
            config={"application_id": self.app},
            task_ids=TASKS,
            flush_timeout_s=10,
            reset_policies={self.orders: "earliest"},
            assignment={"w0": TASKS},
        )
        self.key = worker_key(self.spec.state_dir, self.app, "w0")
        self.name = socket_name(self.key, os.getppid())
        self.thread = threading.Thread(
            target=worker_host.serve, args=(self.name, os.getppid()), daemon=True
        )
        if serve:
            self.thread.start()
        self.orders_sent = [0, 0]

    def customer(self, customer_id: str, name: str) -> None:
        produce(
            self.bootstrap,
            self.customers,
            [(customer_id.encode(), json.dumps({"name": name}).encode())],
        )

    def order(self, partition: int, customer_id: str) -> None:
        order_id = f"o{partition}-{self.orders_sent[partition]}"
        value = json.dumps({"customer_id": customer_id}).encode()
        produce(self.bootstrap, self.orders, [(order_id.encode(), value, partition)])
        self.orders_sent[partition] += 1

    def epoch(self, epoch: int) -> dict:
        """One epoch up to the orders' end; the replies by task."""
        ends = {(self.orders, p): n for p, n in enumerate(self.orders_sent)}
        message = WorkerEpochRequest(
            self.spec, "w0", tuple(TaskEpoch(t, None) for t in TASKS), epoch,
            EpochEnd(end_offsets=ends),
        )  # fmt: skip
        reply = exchange(self.key, "console", message, timeout_s=WAIT_S)
        return {task: the_reply(reply, task) for task in TASKS}

    def enriched(self) -> dict[str, str | None]:
        """Order id -> the customer name it was enriched with."""
        kept, _ = committed_records(self.bootstrap, self.output)
        out = {}
        for record in kept:
            customer = json.loads(record.value)["customer"]
            out[record.key.decode()] = None if customer is None else customer["name"]
        return out

    def close(self) -> None:
        request(self.name, CloseRequest(), timeout_s=WAIT_S)
        self.thread.join(WAIT_S)


def test_the_tasks_of_a_worker_share_one_copy_of_the_global_stores(kafka, tmp_path):
    host = EnrichmentHost(kafka, tmp_path / "state")
    try:
        host.customer("c1", "Ada")
        host.order(0, "c1")
        host.order(1, "c1")
        host.epoch(1)  # both tasks built: the copy restored once, before the first of them
        assert host.enriched() == {"o0-0": "Ada", "o1-0": "Ada"}
        # a customer produced now reaches both tasks with a catch-up (at most once a second)
        host.customer("c2", "Grace")
        deadline = time.monotonic() + WAIT_S
        epoch = 2
        while {host.enriched().get(f"o{p}-{host.orders_sent[p] - 1}") for p in (0, 1)} != {"Grace"}:
            assert time.monotonic() < deadline, f"c2 never reached both tasks: {host.enriched()}"
            epoch += 1
            host.order(0, "c2")
            host.order(1, "c2")
            host.epoch(epoch)
    finally:
        host.close()
    app_dir = tmp_path / "state" / host.app
    assert sorted(p.name for p in app_dir.glob("*/global")) == [], "a task kept a copy of its own"
    shared = worker_global_directory(host.spec.state_dir, host.app, "w0")
    assert (shared / ".checkpoint").exists()
    wipe_application_state(host.spec.state_dir, host.app)
    assert not shared.exists(), "--cleanup left the worker's copy of the global stores"


def test_a_second_host_of_the_worker_keeps_a_private_copy_for_its_run(kafka, tmp_path):
    host = EnrichmentHost(kafka, tmp_path / "state", serve=False)  # its spec and topics
    host.customer("c1", "Ada")
    shared = worker_global_directory(host.spec.state_dir, host.app, "w0")
    topology = host.spec.load_topology()
    from processor_api.config import StreamsConfig

    config = StreamsConfig.from_dict(host.spec.config)
    with TaskLock(shared, "another host of w0"):
        copy = WorkerGlobalStores(shared, "w0")
        stores = copy.open(topology, host.spec, config, "read_uncommitted")
        private = stores.state.directory
        assert private != shared and private.parent == shared.parent
        assert stores.store("customers").get("c1") == {"name": "Ada"}
        copy.close()
    assert not private.exists(), "the private copy outlived its run"
