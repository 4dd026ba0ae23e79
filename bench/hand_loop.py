"""The floor a user could write by hand: a confluent-kafka consumer loop updating rocksdict.

``python -m bench.hand_loop --bootstrap HOST:PORT --topic T --partitions 3 --records N
--state-dir DIR`` counts records per key into a RocksDB (rocksdict, raw mode, 8-byte big-endian
counts like ``Serdes.long()``) until N records were read, commits the consumer offsets, and
prints one JSON line: records, distinct keys, the sum of the counts and the loop's own time.
No changelog, no fault tolerance beyond the committed offsets: a floor, not a peer.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()

    started = time.monotonic()
    from confluent_kafka import Consumer, TopicPartition
    from rocksdict import Options, Rdict

    db = Rdict(f"{args.state_dir}/counts", Options(raw_mode=True))
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"hand-loop-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(args.partitions)])
    pack, unpack = struct.Struct(">q").pack, struct.Struct(">q").unpack
    get, put = db.get, db.put
    seen = 0
    loop_started = time.monotonic()
    while seen < args.records:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is not None:
                continue
            key = message.key()
            old = get(key)
            put(key, pack(unpack(old)[0] + 1 if old is not None else 1))
            seen += 1
    consumer.commit(asynchronous=False)
    loop_s = time.monotonic() - loop_started
    consumer.close()
    keys = total = 0
    for _, value in db.items():
        keys += 1
        total += unpack(value)[0]
    db.close()
    print(
        json.dumps(
            {
                "records": seen,
                "keys": keys,
                "sum_counts": total,
                "loop_s": round(loop_s, 3),
                "process_s": round(time.monotonic() - started, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
