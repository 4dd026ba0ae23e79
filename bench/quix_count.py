"""Quix Streams counting records per key with a stateful ``apply`` (throughput contender).

Runs in its own virtualenv (``bench/.venvs/quix``: quixstreams pins its own confluent-kafka),
so it imports nothing from this repository::

    bench/.venvs/quix/bin/python bench/quix_count.py --bootstrap HOST:PORT --topic T \
        --records N --state-dir DIR

``Application(auto_offset_reset="earliest")`` with its defaults (RocksDB state, changelog
topics on, at-least-once); ``sdf.apply(count, stateful=True)`` keeps ``count`` per message key;
``app.run(count=N)`` stops after N outputs. Prints one JSON line. With ``--output-topic`` (and
no ``--records``) it runs until SIGTERM and forwards each new count (the latency benchmark). The consumer's
``session.timeout.ms`` is 6 s (see below): Tansu delays a new group's first join by about
half of it.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=0, help="stop after N (0: until SIGTERM)")
    parser.add_argument(
        "--output-topic",
        default=None,
        help="forward each new count there (bench/latency.py; the input timestamp is kept)",
    )
    parser.add_argument("--state-dir", required=True)
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="stop after this many seconds without new messages",
    )
    args = parser.parse_args()

    started = time.monotonic()
    from quixstreams import Application

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"quix-count-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        loglevel=logging.WARNING,
        # Tansu answers the first JoinGroup of a new group only after about half of
        # session.timeout.ms (measured: 23 s with librdkafka's 45 s default, 3 s with 6 s);
        # 6 s matches Apache Kafka's 3 s group.initial.rebalance.delay.ms.
        consumer_extra_config={"session.timeout.ms": 6000},
    )
    topic = app.topic(args.topic, key_deserializer="string", value_deserializer="bytes")
    processed = {"n": 0, "first": None}

    def count(value: bytes, state) -> int:  # noqa: ANN001 - quixstreams State
        total = state.get("count", 0) + 1
        state.set("count", total)
        if processed["first"] is None:
            processed["first"] = time.monotonic()
        processed["n"] += 1
        return total

    counts = app.dataframe(topic).apply(count, stateful=True)  # the app tracks its dataframes
    if args.output_topic:
        counts.to_topic(
            app.topic(args.output_topic, key_serializer="string", value_serializer="json")
        )
    run_started = time.monotonic()
    if args.records:
        app.run(count=args.records, timeout=args.timeout, collect=False)
    else:
        app.run()  # until SIGTERM (bench/latency.py)
    done = time.monotonic()
    first = processed["first"] or done
    print(
        json.dumps(
            {
                "records": processed["n"],
                "run_s": round(done - run_started, 3),
                "first_record_after_s": round(first - run_started, 3),
                "steady_records_per_s": round(processed["n"] / max(done - first, 1e-9)),
                "process_s": round(done - started, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
