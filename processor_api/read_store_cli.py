"""``read-store``: print a store's committed contents, read from Kafka without the application.

    read-store --bootstrap-servers 127.0.0.1:9092 --application-id sales \\
        --topology topologies.sales_aggregation:build_topology sales-totals

One JSON object per line, ``{"key": ..., "value": ..., "partition": ...}`` (plus the window or
session bounds of windowed stores and the timestamp of timestamped ones), or a table with
``--format table``. Keys and values are deserialized with the serdes the topology gives the
store; bytes print as base64. Exit status: 0 when the store was read, 2 for bad arguments, an
unknown store or application, 1 when reading failed.
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


def build_parser() -> argparse.ArgumentParser:
    """The ``read-store`` arguments."""
    from processor_api.cli import _key_value, add_topology_and_kafka_arguments

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
    parser.add_argument("--format", choices=["json", "table"], default="json")
    parser.add_argument(
        "--config",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run settings of the application; schema.registry.* ones reach registry serdes",
    )
    add_topology_and_kafka_arguments(parser)
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--log-level", choices=LEVELS, default="warning")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``read-store``; returns the exit status."""
    from processor_api.cli import SETUP_ERRORS

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
    from processor_api.cli import kafka_settings
    from processor_api.config import StreamsConfig
    from processor_api.store_queries import entry_fields, open_store_reader

    kafka = kafka_settings(args)
    registry = StreamsConfig.from_dict(dict(args.config)).schema_registry
    reader = open_store_reader(
        args.bootstrap_servers,
        args.application_id,
        args.topology,
        args.store,
        kafka_config=kafka,
        topology_kwargs=dict(args.topology_arg),
        registry=registry,
    )
    key_serde = reader.builder.key_serde
    selection = _selection(args, key_serde, args.store)
    entries = reader.read(selection)
    return ({**entry_fields(entry), "partition": p} for p, entry in entries)


def _selection(args: argparse.Namespace, key_serde: Any, store: str) -> Any:
    from processor_api.errors import ConfigError, StoreError
    from processor_api.state.selection import StoreSelection

    values = {}
    for option, name in (("--key", "key"), ("--from", "key_from"), ("--to", "key_to")):
        values[name] = _parse_key(option, getattr(args, name), key_serde, store)
    try:
        return StoreSelection(**values, prefix=args.prefix)
    except StoreError as exc:
        raise ConfigError(str(exc).replace("key range (from/to)", "--from/--to")) from None


def _parse_key(option: str, text: str | None, serde: Any, store: str) -> Any:
    """A key given on the command line, typed for the store's key serde."""
    from processor_api.errors import ConfigError

    if text is None:
        return None
    name = getattr(serde, "name", "custom")
    if name == "string":
        return text
    if name == "bytes":
        return text.encode()
    try:
        key = json.loads(text)
    except ValueError:
        key = text  # e.g. a custom serde of plain text
    try:
        serde.serialize(key)
    except Exception as exc:  # noqa: BLE001 - any serde failure is a bad argument
        raise ConfigError(
            f"{option} {text!r} does not fit the key serde ({name}) of store {store!r}: {exc}"
        ) from None
    return key


def _print(rows: Iterable[dict[str, Any]], output: str) -> None:
    from processor_api.store_queries import json_default

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
