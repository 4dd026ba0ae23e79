"""``read-store``: print a store's committed contents, read from Kafka without the application.

    read-store --bootstrap-servers 127.0.0.1:9092 --application-id sales \\
        --topology topologies.sales_aggregation:build_topology sales-totals

One JSON object per line, ``{"key": ..., "value": ..., "partition": ...}`` (plus the window or
session bounds of windowed stores, the timestamp of timestamped ones, timestamp and
``valid_to`` of versioned ones), or a table with ``--format table``. A versioned store is read
one ``--key`` at a time: its latest version or, with ``--as-of``, the one valid then. Keys and
values are deserialized with the serdes the topology gives the store; bytes print as base64.
Exit status: 0 when the store was read, 2 for bad arguments, an unknown store or application
or a selection the store cannot take, 1 when reading failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from processor_api.errors import StreamsError
from processor_api.logging import LEVELS, configure_logging

PROG = "read-store"
#: How the selection's errors name things, and the options that set them.
_OPTION_WORDS = (
    ("key range (from/to)", "--from/--to"),
    ("(give a key or a key range)", "(give --key or --from/--to)"),
    ("a prefix selects", "--prefix selects"),
    ("(give a key, and as_of", "(give --key, and --as-of"),
    ("as_of reads", "--as-of reads"),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``read-store`` arguments."""
    from processor_api.cli.arguments import add_topology_and_kafka_arguments, key_value

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print a state store's committed contents, read from its changelog "
        "(the application need not run).",
    )
    parser.add_argument("store", metavar="STORE", help="the store's name in the topology")
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT", required=True)
    parser.add_argument("--application-id", required=True, help="the application's id")
    parser.add_argument(
        "--topology",
        metavar="MODULE:FUNCTION",
        required=True,
        help="the function returning the application's Topology (its stores' serdes)",
    )
    select = parser.add_argument_group("selection (one of)")
    select.add_argument("--key", metavar="K", help="one key")
    select.add_argument("--from", dest="key_from", metavar="A", help="keys from A (inclusive)")
    select.add_argument("--to", dest="key_to", metavar="B", help="keys up to B (inclusive)")
    select.add_argument("--prefix", metavar="P", help="keys starting with P (key-value stores)")
    parser.add_argument(
        "--as-of",
        metavar="TIMESTAMP",
        type=_timestamp,
        help="versioned stores, with --key: the version valid at TIMESTAMP (epoch ms, or an "
        "ISO-8601 date-time, UTC unless it gives an offset)",
    )
    parser.add_argument("--format", choices=["json", "table"], default="json")
    parser.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run settings of the application; schema.registry.* ones reach registry serdes, "
        "and with state.snapshot.location (and state.snapshot.filesystem.options) each partition "
        "starts from its newest snapshot and reads only the changelog after it",
    )
    add_topology_and_kafka_arguments(parser)
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--log-level", choices=LEVELS, default="warning")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``read-store``; returns the exit status."""
    from processor_api.cli.arguments import SETUP_ERRORS

    args = build_parser().parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    try:
        rows = _rows(args)
        _print(rows, args.format)
    except SETUP_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except StreamsError as exc:
        print(f"{PROG}: failed: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    return 0


def _rows(args: argparse.Namespace) -> Iterable[dict[str, Any]]:
    from processor_api.cli.arguments import kafka_settings
    from processor_api.config import StreamsConfig
    from processor_api.kafka.store_reader import store_builder
    from processor_api.state.json_entries import entry_fields
    from processor_api.state.snapshots import settings_from_config as snapshot_settings
    from processor_api.store_queries import open_store_reader
    from processor_api.topology.loader import load_topology

    kafka = kafka_settings(args)
    config = StreamsConfig.from_dict(dict(args.config))
    registry = config.schema_registry
    topology = load_topology(args.topology, dict(args.topology_arg))
    # the selection is checked against the store before the broker is asked anything
    selection = _selection(args, store_builder(topology, args.store))
    reader = open_store_reader(
        args.bootstrap_servers,
        args.application_id,
        topology,
        args.store,
        kafka_config=kafka,
        registry=registry,
        snapshots=snapshot_settings(config),
    )
    entries = reader.read(selection)
    return ({**entry_fields(entry), "partition": p} for p, entry in entries)


def _selection(args: argparse.Namespace, builder: Any) -> Any:
    from processor_api.errors import ConfigError, StoreError
    from processor_api.state.selection import StoreSelection, check_selection

    store = builder.name
    values = {}
    for option, name in (("--key", "key"), ("--from", "key_from"), ("--to", "key_to")):
        values[name] = _parse_key(option, getattr(args, name), builder.key_serde, store)
    try:
        selection = StoreSelection(**values, prefix=args.prefix, as_of=args.as_of)
        check_selection(builder.kind, store, selection)
    except StoreError as exc:
        message = str(exc)
        for api, option in _OPTION_WORDS:
            message = message.replace(api, option)
        raise ConfigError(message) from None
    return selection


def _timestamp(text: str) -> int:
    """``--as-of``: epoch milliseconds, or an ISO-8601 date-time (UTC without an offset)."""
    from datetime import datetime, timezone

    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 date-time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _parse_key(option: str, text: str | None, serde: Any, store: str) -> Any:
    """A key given on the command line, typed for the store's key serde."""
    from processor_api.state.json_entries import parse_key

    return None if text is None else parse_key(text, serde, store, option)


def _print(rows: Iterable[dict[str, Any]], output: str) -> None:
    from processor_api.state.json_entries import json_default

    out = sys.stdout
    if output == "json":
        for row in rows:
            out.write(json.dumps(row, default=json_default, ensure_ascii=False) + "\n")
        out.flush()
        return
    cells = [
        {k: v if isinstance(v, str) else json.dumps(v, default=json_default) for k, v in r.items()}
        for r in rows
    ]
    columns = ["partition"] + [c for c in (cells[0] if cells else {}) if c != "partition"]
    widths = {c: max([len(c)] + [len(row.get(c, "")) for row in cells]) for c in columns}
    out.write("  ".join(c.ljust(widths[c]) for c in columns).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(row.get(c, "").ljust(widths[c]) for c in columns).rstrip() + "\n")
    out.write(f"({len(cells)} entries)\n")
    out.flush()


if __name__ == "__main__":
    sys.exit(main())
