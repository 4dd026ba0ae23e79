"""``processor-api query``: ask a running application's stores from a terminal, and the
``run-topology`` options that turn the endpoint on.

    processor-api query --url http://127.0.0.1:8085 totals alice
    processor-api query --url http://127.0.0.1:8085 totals --from a --to m
    processor-api query --url http://127.0.0.1:8085 per-minute alice --time-from 1700000000000
    processor-api query --url http://127.0.0.1:8085 totals alice --position-bound orders:1:41 --wait 2

What a key reads follows the store's kind (asked of the endpoint): a key-value or versioned
store's value (``--as-of`` for a version), a window store's windows, a session store's
sessions; without a key, the entries of a key-value store (``--from``/``--to`` for a range).
One JSON object per line. Exit status: 0 answered, 1 the store holds no such key, 2 bad
arguments, an unknown store, a key of the wrong type, a malformed position bound or a refused
token, 3 the task holding the key is restoring or moving, or has not reached
``--position-bound`` (within ``--wait``): ask again, 4 the endpoint does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from processor_api.errors import ConfigError
from processor_api.query.client import QueryClient
from processor_api.query.errors import (
    BadQueryError,
    EndpointUnreachableError,
    QueryError,
    TaskUnavailableError,
    UnknownStoreError,
)
from processor_api.query.position import PositionBound
from processor_api.state.json_entries import json_default


def add_query_arguments(parser: argparse.ArgumentParser) -> None:
    """``run-topology``'s ``--query-port``, ``--query-host`` and ``--query-token-file``."""
    parser.add_argument(
        "--query-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve interactive queries of the stores (HTTP, JSON) on this port of the "
        "driver (0: a free port, logged as query_server_started); off by default",
    )
    parser.add_argument(
        "--query-host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address the query endpoint binds (default %(default)s: this machine only)",
    )
    parser.add_argument(
        "--query-token-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="every query must carry 'Authorization: Bearer <the file's first line>'",
    )


def query_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RunSettings`` fields of the query options; ``ConfigError`` for bad ones."""
    port = args.query_port
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--query-port must be 0-65535, got {port}")
    if port is None and args.query_token_file is not None:
        raise ConfigError("--query-token-file needs --query-port")
    return {
        "query_port": port,
        "query_host": args.query_host,
        "query_token": None if args.query_token_file is None else read_token(args.query_token_file),
    }


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (its first line); ``ConfigError`` naming the file."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the query token file {str(path)!r}: {exc}") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise ConfigError(f"the query token file {str(path)!r} is empty")
    return token


def add_query_command(commands: Any) -> None:
    """The ``query`` sub-command of ``processor-api``."""
    query = commands.add_parser(
        "query",
        help="read a running application's stores (its run-topology --query-port endpoint)",
        description="Read a store of a running application through its query endpoint.",
    )
    query.add_argument("--url", required=True, help="the endpoint, e.g. http://127.0.0.1:8085")
    query.add_argument("--token-file", type=Path, default=None, metavar="FILE")
    query.add_argument("store")
    query.add_argument("key", nargs="?", default=None)
    query.add_argument("--from", dest="key_from", default=None, metavar="KEY")
    query.add_argument("--to", dest="key_to", default=None, metavar="KEY")
    query.add_argument("--as-of", type=int, default=None, metavar="EPOCH_MS")
    query.add_argument("--time-from", type=int, default=None, metavar="EPOCH_MS")
    query.add_argument("--time-to", type=int, default=None, metavar="EPOCH_MS")
    query.add_argument(
        "--committed", action="store_true", help="only what the task's last commit covered"
    )
    query.add_argument(
        "--position-bound",
        default=None,
        metavar="TOPIC:PARTITION:OFFSET[,...]",
        help="read-your-writes: only an answer whose task has processed these input offsets "
        "(e.g. the offset a produce got)",
    )
    query.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --position-bound: ask again for up to this long while the bound is not "
        "reached (default: answer at once)",
    )


def run_query(args: argparse.Namespace, prog: str) -> int:
    """Run ``processor-api query``; returns the exit status."""
    out = sys.stdout
    try:
        token = None if args.token_file is None else read_token(args.token_file)
        client = QueryClient(args.url, token=token)
        rows = _rows(client, args)
        if rows is None:
            print(f"{prog} query: store {args.store!r} holds no key {args.key!r}", file=sys.stderr)
            return 1
        for row in rows:
            out.write(json.dumps(row, default=json_default, ensure_ascii=False) + "\n")
        out.flush()
        return 0
    except ConfigError as exc:
        print(f"{prog} query: error: {exc}", file=sys.stderr)
        return 2
    except TaskUnavailableError as exc:
        print(f"{prog} query: not available now: {exc}", file=sys.stderr)
        return 3
    except EndpointUnreachableError as exc:
        print(f"{prog} query: error: {exc}", file=sys.stderr)
        return 4
    except QueryError as exc:
        print(f"{prog} query: error: {exc}", file=sys.stderr)
        return 2


def _rows(client: QueryClient, args: argparse.Namespace) -> Any:
    kinds = {s["store"]: s["kind"] for s in client.stores()}
    kind = kinds.get(args.store)
    if kind is None:
        raise UnknownStoreError(
            f"no store {args.store!r} in the application at {args.url}; its stores: "
            f"{', '.join(sorted(kinds)) or 'none'}"
        )
    if args.wait < 0:
        raise ConfigError(f"--wait must be >= 0 seconds, got {args.wait:g}")
    bound = None
    if args.position_bound is not None:
        try:
            bound = PositionBound.parse(args.position_bound, "--position-bound")
        except BadQueryError as exc:
            raise ConfigError(str(exc)) from None
    options: dict[str, Any] = {
        "committed": args.committed,
        "position_bound": bound,
        "wait_s": args.wait,
    }
    if args.key is None:
        if args.key_from is not None or args.key_to is not None:
            return client.range(args.store, args.key_from, args.key_to, **options)
        return client.all(args.store, **options)
    if kind in ("window", "timestamped-window"):
        return client.fetch_window(args.store, args.key, args.time_from, args.time_to, **options)
    if kind == "session":
        return client.fetch_sessions(args.store, args.key, **options)
    if args.as_of is not None:
        entry = client.get_as_of(args.store, args.key, args.as_of, **options)
    else:
        entry = client.get(args.store, args.key, **options)
    return None if entry is None else [entry]
