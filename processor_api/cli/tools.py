"""``processor-api``: tools around a Processor API application.

``processor-api status --bootstrap-servers HOST:PORT --application-id APP [--json]`` shows what
Kafka says about an application, running or stopped (``app_status.py``): per task its committed
input positions and lag, stream time, last commit and its age, changelog sizes. Exit status: 0,
2 for bad arguments, a broker that does not answer or an application that never committed.

``processor-api query --url URL STORE [KEY]`` reads a running application's stores through
its ``run-topology --query-port`` endpoint (``query/command.py``).

``processor-api broker``: an embedded broker (Tansu) in the foreground, for local development.

    processor-api broker --port 9092 --topic orders:3 --topic customers

prints the broker's address (``127.0.0.1:PORT``, alone on stdout's first line) and keeps it
until Ctrl-C or SIGTERM, so other terminals can produce to it, run ``run-topology
--bootstrap-servers 127.0.0.1:PORT`` against it as often as they like, and read the results.
Unlike ``run-topology --embedded-broker`` the broker outlives each run; like it, storage is
memory only: topics are gone when it stops. Its cost per request grows with the record batches
a partition holds, so it tells producers to linger (``run-topology`` against it does:
:mod:`processor_api.kafka.local_broker`). Exit status: 0 after Ctrl-C/SIGTERM, 1 when the broker
process died, 2 for bad arguments or a broker that cannot start (port taken).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from processor_api.cli.arguments import add_kafka_arguments, kafka_settings
from processor_api.errors import BrokerUnavailableError, ConfigError, StreamsError
from processor_api.logging import LEVELS, configure_logging
from processor_api.query.command import add_query_command, run_query

PROG = "processor-api"
ALIVE_WITHIN_S = 120.0  # app_status.ALIVE_WITHIN_S, without importing the Kafka clients
#: How often the foreground loop checks that the broker process is still alive (seconds).
_ALIVE_CHECK_S = 1.0


def _topic(text: str) -> tuple[str, int]:
    name, sep, count = text.rpartition(":")
    if not sep:
        name, count = text, "1"
    if not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME or NAME:PARTITIONS, got {text!r}")
    return name, int(count)


def build_parser() -> argparse.ArgumentParser:
    """The ``processor-api`` arguments (sub-commands ``broker`` and ``status``)."""
    parser = argparse.ArgumentParser(prog=PROG, description="Processor API tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    broker = commands.add_parser(
        "broker",
        help="run an embedded Kafka-protocol broker (Tansu) in the foreground",
        description="Run an embedded Kafka-protocol broker (Tansu, memory-only storage) on "
        "127.0.0.1 until Ctrl-C; prints its address first.",
    )
    broker.add_argument(
        "--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)"
    )
    broker.add_argument(
        "--topic",
        type=_topic,
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS]",
        help="create this topic once the broker is up (repeatable; 1 partition by default)",
    )
    broker.add_argument("--log-level", choices=LEVELS, default="warning")
    status = commands.add_parser(
        "status",
        help="show an application's tasks as Kafka holds them (lag, last commit, stores)",
        description="Per task: committed input positions and lag, stream time, last commit "
        "and its age, changelog sizes; read from Kafka only (commit markers, the consumer "
        "group, end offsets), while the application runs or after it stopped.",
    )
    status.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    status.add_argument("--application-id", required=True)
    status.add_argument("--json", action="store_true", help="JSON for scripts")
    status.add_argument(
        "--alive-within",
        type=float,
        default=ALIVE_WITHIN_S,
        metavar="SECONDS",
        help="a task whose last commit is younger looks alive (default %(default)g)",
    )
    add_kafka_arguments(status)
    status.add_argument("--log-level", choices=LEVELS, default="warning")
    add_query_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``processor-api``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "query":
        return run_query(args, PROG)
    configure_logging("console", args.log_level)
    if args.command == "status":
        return _status(args)
    return _broker(args.port, args.topic)


def _status(args: argparse.Namespace) -> int:
    from processor_api.cli.app_status import application_status, format_table
    from processor_api.kafka.client_config import KafkaClientConfig

    try:
        kafka = KafkaClientConfig.from_dict(kafka_settings(args))
        status = application_status(
            args.bootstrap_servers,
            args.application_id,
            kafka=kafka,
            alive_within_s=args.alive_within,
        )
    except (ConfigError, StreamsError) as exc:
        print(f"{PROG} status: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(status.to_json() + "\n" if args.json else format_table(status))
    return 0


def _broker(port: int | None, topics: list[tuple[str, int]]) -> int:
    from processor_api.kafka.local_broker import TANSU_PRODUCER_LINGER_MS
    from processor_api.testing.embedded import EmbeddedKafka, _log_tail

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = EmbeddedKafka(port)
    try:
        try:
            broker.start()
            for name, partitions in topics:
                broker.create_topic(name, partitions)
        except (BrokerUnavailableError, StreamsError) as exc:
            print(f"{PROG} broker: error: {exc}", file=sys.stderr)
            return 2
        print(broker.bootstrap_servers, flush=True)
        print(
            f"{PROG} broker: Tansu on {broker.bootstrap_servers} (pid {broker.pid}, memory "
            f"only: topics are lost when it stops); topics: "
            f"{', '.join(f'{n}:{p}' for n, p in topics) or 'none yet'}; Ctrl-C stops it.\n"
            f"{PROG} broker: its cost per request grows with the record batches a partition "
            f"holds: give producers linger.ms {TANSU_PRODUCER_LINGER_MS} "
            f"or more (run-topology does) and it keeps up with a steady feed far longer "
            f"(docs/running/local-broker.md)",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(_ALIVE_CHECK_S):
            if not broker.is_running:
                log = broker.log_path
                tail = _log_tail(log) if log is not None else "<no log>"
                print(
                    f"{PROG} broker: failed: the broker process exited; its log ends with:\n{tail}",
                    file=sys.stderr,
                )
                return 1
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
