"""``make run``: seed 000's sales aggregation end to end, on a real broker and local Spark.

1. starts the embedded Kafka-protocol broker (Tansu) on a free loopback port;
2. creates ``sales-events-v1`` and ``notifications-events-v1`` (3 partitions each);
3. produces the seed's five sales events, keyed by product;
4. runs ``topologies.sales_aggregation`` with ``run-topology``'s runner on local Spark, in
   epochs (``--available-now``: everything in the input topic, then stop), while a consumer prints
   every notification as it arrives;
5. prints the final totals read from the RocksDB stores, and exits 0 when the notifications
   are exactly the seed's expected ones (product1 and product2).

Run with ``python -m topologies.sales_demo`` (what ``make run`` does). This is a program, so it
prints; the library itself only logs.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from processor_api.kafka.admin import client_config
from processor_api.kafka.producer import DeliveryTracker, make_producer
from processor_api.logging import configure_logging
from processor_api.serdes import Serdes
from processor_api.spark.runner import RunSettings, TopologyRunner
from processor_api.state.inspect import read_local_store
from processor_api.testing.embedded import EmbeddedKafka
from topologies.sales_aggregation import (
    DEFAULT_INPUT_TOPIC,
    DEFAULT_OUTPUT_TOPIC,
    DEFAULT_STORE_NAME,
)

SEED_EVENTS = [
    {"product": "product2", "value": 1000},
    {"product": "product1", "value": 1500},
    {"product": "product1", "value": 1000},
    {"product": "product2", "value": 1300},
    {"product": "product5", "value": 1000},
]
EXPECTED = {"product1": 2500, "product2": 2300}
PARTITIONS = 3


def _print_notifications(bootstrap: str, seen: list, stop: threading.Event) -> None:
    consumer = Consumer(
        client_config(
            bootstrap,
            "demo-consumer",
            **{"group.id": "sales-demo-printer", "enable.auto.commit": False},
        )
    )
    # every partition from its start, without joining the group: the embedded broker answers
    # a new group's first JoinGroup only after about half the session timeout (~23 s), longer
    # than the whole run takes
    consumer.assign(
        [TopicPartition(DEFAULT_OUTPUT_TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    )
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            key = message.key().decode()
            value = json.loads(message.value())
            seen.append((key, value))
            print(f"  notification  {key:<10} {json.dumps(value)}", flush=True)
    finally:
        consumer.close()


def main() -> int:
    configure_logging("console", level="WARNING")
    started = time.monotonic()
    with EmbeddedKafka() as broker, tempfile.TemporaryDirectory() as state_dir:
        bootstrap = broker.bootstrap_servers
        print(f"broker     : Tansu at {bootstrap}")
        broker.create_topic(DEFAULT_INPUT_TOPIC, PARTITIONS)
        broker.create_topic(DEFAULT_OUTPUT_TOPIC, PARTITIONS)
        tracker = DeliveryTracker(make_producer(bootstrap))
        for event in SEED_EVENTS:
            tracker.produce(
                DEFAULT_INPUT_TOPIC, event["product"].encode(), json.dumps(event).encode()
            )
        tracker.flush_and_check()
        print(f"input      : {len(SEED_EVENTS)} sales events -> {DEFAULT_INPUT_TOPIC}")
        for event in SEED_EVENTS:
            print(f"  sale          {event['product']:<10} {event['value']}")

        seen: list = []
        stop = threading.Event()
        printer = threading.Thread(
            target=_print_notifications, args=(bootstrap, seen, stop), daemon=True
        )
        printer.start()
        print("running    : topologies.sales_aggregation on local Spark (available-now)")
        settings = RunSettings(
            bootstrap_servers=bootstrap,
            application_id="sales-demo",
            state_dir=state_dir,
            master="local[2]",
            available_now=True,
            log_format="console",
        )
        result = TopologyRunner("topologies.sales_aggregation:build_topology", settings).run()
        deadline = time.monotonic() + 10
        while len(seen) < len(EXPECTED) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # anything unexpected would show up now
        stop.set()
        printer.join(5)

        totals = read_local_store(
            state_dir, "sales-demo", DEFAULT_STORE_NAME, Serdes.string(), Serdes.long()
        )
        print(f"store      : {DEFAULT_STORE_NAME} final totals")
        for product in sorted(totals):
            print(f"  total         {product:<10} {totals[product]}")
        print(
            f"summary    : {result.records} records, {result.outputs} notifications, "
            f"{result.batches} epoch(s), {time.monotonic() - started:.1f}s wall time"
        )
    got = {key: value["value"] for key, value in seen}
    if got != EXPECTED or len(seen) != len(EXPECTED):
        print(f"UNEXPECTED notifications: {seen}; expected {EXPECTED}", file=sys.stderr)
        return 1
    print("result     : OK - product1 and product2 crossed the 2000 threshold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
