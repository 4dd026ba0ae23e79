"""``processor-api broker``: an embedded broker (Tansu) in the foreground, for local development.

    processor-api broker --port 9092 --topic orders:3 --topic customers

prints the broker's address (``127.0.0.1:PORT``, alone on stdout's first line) and keeps it
until Ctrl-C or SIGTERM, so other terminals can produce to it, run ``run-topology
--bootstrap-servers 127.0.0.1:PORT`` against it as often as they like, and read the results.
Unlike ``run-topology --embedded-broker`` the broker outlives each run; like it, storage is
memory only: topics are gone when it stops. Exit status: 0 after Ctrl-C/SIGTERM, 1 when the
broker process died, 2 for bad arguments or a broker that cannot start (port taken).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from processor_api.errors import BrokerUnavailableError, StreamsError
from processor_api.logging import LEVELS, configure_logging

PROG = "processor-api"
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
    """The ``processor-api`` arguments (one sub-command so far: ``broker``)."""
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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``processor-api``; returns the exit status."""
    args = build_parser().parse_args(argv)
    configure_logging("console", args.log_level)
    return _broker(args.port, args.topic)


def _broker(port: int | None, topics: list[tuple[str, int]]) -> int:
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
            f"{', '.join(f'{n}:{p}' for n, p in topics) or 'none yet'}; Ctrl-C stops it",
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
