"""The hand-written floor of the latency benchmark: a continuous confluent-kafka loop.

``python -m bench.latency_hand --bootstrap HOST:PORT --topic IN --output-topic OUT
--state-dir DIR`` counts per key into rocksdict (as ``bench/hand_loop.py``) and produces each
new ``(key, count)`` (8-byte big-endian) to OUT with the input record's timestamp, until
SIGTERM. Offsets are committed asynchronously every second. No changelog, no fault tolerance
beyond the committed offsets: a floor, not a peer.
"""

from __future__ import annotations

import argparse
import json
import signal
import struct
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()

    from confluent_kafka import Consumer, Producer
    from rocksdict import Options, Rdict

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    db = Rdict(f"{args.state_dir}/counts", Options(raw_mode=True))
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"latency-hand-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            # Tansu answers a new group's first JoinGroup after ~half the session timeout
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    consumer.subscribe([args.topic])
    pack, unpack = struct.Struct(">q").pack, struct.Struct(">q").unpack
    get, put, produce = db.get, db.put, producer.produce
    out = args.output_topic
    seen = 0
    last_commit = time.monotonic()
    while not stop["now"]:
        for message in consumer.consume(10_000, timeout=0.05):
            if message.error() is not None:
                continue
            key = message.key()
            old = get(key)
            count = unpack(old)[0] + 1 if old is not None else 1
            value = pack(count)
            put(key, value)
            produce(out, value, key, timestamp=message.timestamp()[1])
            seen += 1
        producer.poll(0)
        if time.monotonic() - last_commit > 1.0:
            consumer.commit(asynchronous=True)
            last_commit = time.monotonic()
    producer.flush(10)
    consumer.close()
    db.close()
    print(json.dumps({"records": seen}))


if __name__ == "__main__":
    main()
