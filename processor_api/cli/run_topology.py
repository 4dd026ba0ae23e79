"""``run-topology``: run a Processor API topology on Spark Structured Streaming.

    run-topology topologies.sales_aggregation:build_topology \\
        --bootstrap-servers 127.0.0.1:9092 --application-id sales --state-dir ./state

Exit status: 0 when the run ended normally (``--available-now`` finished, or SIGTERM/Ctrl-C),
1 when the run failed, 2 for bad arguments or setup (module, the topology function raising,
broker, topics, config keys, a processor's ``init()`` failing the setup check on the driver).

A failure prints its cause on one line (``run-topology: failed: ...``, the last one) and writes
everything known about it (Python and JVM stack traces) to
``STATE_DIR/APP_ID/logs/failure-*.txt``, named on the line before.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from processor_api.cli.arguments import (
    SETUP_ERRORS,
    add_topology_and_kafka_arguments,
    kafka_settings,
    key_value,
)
from processor_api.errors import (
    ConfigError,
    StreamsError,
    TopologyLoadError,
)
from processor_api.logging import LEVELS, configure_logging, get_logger
from processor_api.query.command import add_query_arguments, query_settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-topology",
        description="Run a Kafka-Streams-style Processor API topology on Spark.",
    )
    parser.add_argument(
        "topology",
        metavar="MODULE:FUNCTION",
        help="function returning a Topology, e.g. topologies.sales_aggregation:build_topology",
    )
    broker = parser.add_mutually_exclusive_group(required=True)
    broker.add_argument("--bootstrap-servers", metavar="HOST:PORT")
    broker.add_argument(
        "--embedded-broker",
        action="store_true",
        help="start an embedded Kafka-protocol broker (Tansu) for this run",
    )
    parser.add_argument(
        "--application-id",
        default=None,
        help="prefix of internal topics and state (default: the module name)",
    )
    parser.add_argument("--state-dir", default="./state", help="local store directory")
    parser.add_argument(
        "--state-dir-per-executor",
        action="store_true",
        help="each executor keeps its tasks' stores under STATE_DIR/executor-<id>/ (separate "
        "disks for executors sharing a machine, e.g. local-cluster[...])",
    )
    parser.add_argument(
        "--early-start",
        choices=("process", "open", "off"),
        default="process",
        help="local masters: the driver starts the worker hosts while Spark starts; 'process' "
        "(a new checkpoint: they process until the first epoch, with --available-now up to "
        "the run's end offsets), 'open' (they open and "
        "restore their tasks only), 'off' (the first epoch call starts them)",
    )
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="Spark checkpoint (default: STATE_DIR/APP_ID/_spark_checkpoint)",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    parser.add_argument(
        "--processing-guarantee",
        default="at_least_once",
        choices=["at_least_once", "exactly_once_v2"],
    )
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything in the input topics now, then exit 0",
    )
    parser.add_argument(
        "--epoch-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="length of a Spark epoch (default 60 s): tasks run Kafka Streams' poll loop "
        "throughout and commit every commit.interval.ms; the epoch bounds how far Spark's "
        "checkpoint trails the commits in Kafka, not latency",
    )
    # accepted, hidden: every run is in epochs (the flag chose them in earlier versions)
    parser.add_argument("--epochs", action="store_true", help=argparse.SUPPRESS)
    # removed with the micro-batch runtime: given, they stop the run saying so (REMOVED_FLAGS)
    parser.add_argument("--micro-batches", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trigger-interval", metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--max-records-per-batch", metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="runtime settings, e.g. processing.exception.handler=log_and_continue",
    )
    add_topology_and_kafka_arguments(parser)
    parser.add_argument(
        "--spark-conf", type=key_value, action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument(
        "--cleanup",
        action="store_true",
        help="wipe this application's local state first (stores are restored "
        "from their changelogs)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve /metrics (Prometheus), /health/live and /health/ready on this port "
        "(0: a free port, logged as metrics_server_started); off by default",
    )
    add_query_arguments(parser)
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default="info",
        help="debug also shows Spark's own warnings, its progress bar and Python warnings",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``run-topology``; returns the exit status."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    log = get_logger("processor_api.cli.run_topology")
    # JSON logs carry the error as an event; on the console the plain line below says it once
    report = log.error if args.log_format == "json" else log.debug
    try:
        return _run(args, log)
    except SETUP_ERRORS as exc:
        report("setup_failed", error=str(exc), error_type=type(exc).__name__)
        if isinstance(exc, TopologyLoadError):  # the user's code raised: keep its traceback
            _write_report(args, exc, None)
        print(f"run-topology: error: {exc}", file=sys.stderr)
        return 2
    except StreamsError as exc:
        report("run_failed", error=str(exc), error_type=type(exc).__name__)
        _write_report(args, exc, exc.details)
        print(f"run-topology: failed: {exc}", file=sys.stderr)  # the last line: the cause
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug: one line here, the traceback in a file
        report("run_crashed", error=str(exc), error_type=type(exc).__name__)
        _write_report(args, exc, None)
        print(f"run-topology: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _application_id(args: argparse.Namespace) -> str:
    config_id = _config_value(args, "application_id")
    return args.application_id or config_id or args.topology.partition(":")[0].replace(".", "-")


def _config_value(args: argparse.Namespace, key: str) -> Any:
    from processor_api.config import canonical_key

    values = [v for k, v in args.config if canonical_key(k) == key]
    return values[-1] if values else None


def _write_report(args: argparse.Namespace, exc: BaseException, details: str | None) -> None:
    """Write the failure's full text under the state dir and name the file on one line."""
    text = "".join(traceback.format_exception(exc))
    if details:
        text += "\n" + details.rstrip() + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        directory = Path(args.state_dir) / _application_id(args) / "logs"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"failure-{stamp}.txt"
        path.write_text(f"run-topology {' '.join(sys.argv[1:])}\n\n{text}", encoding="utf-8")
    except (OSError, StreamsError) as write_error:
        print(f"run-topology: could not write the error report: {write_error}", file=sys.stderr)
        return
    print(f"run-topology: full error report (stack traces): {path.resolve()}", file=sys.stderr)


def _check_arguments(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Config keys, Kafka client settings and flag conflicts, before anything starts.

    Returns the ``--config`` dict and the merged Kafka client settings.
    """
    from processor_api.config import StreamsConfig, canonical_key

    config = dict(args.config)
    StreamsConfig.from_dict(config)  # unknown keys and bad values: ConfigError, exit 2
    for key, flag, value in (
        ("application_id", "--application-id", args.application_id),
        ("processing_guarantee", "--processing-guarantee", args.processing_guarantee),
    ):
        given = _config_value(args, key)
        if given is not None and value is not None and str(given) != str(value):
            if key == "processing_guarantee" and value == "at_least_once":
                args.processing_guarantee = given  # the flag was left at its default
                continue
            raise ConfigError(f"--config {key}={given} contradicts {flag} {value}")
    config = {k: v for k, v in config.items() if canonical_key(k) != "application_id"}
    return config, kafka_settings(args)


#: Flags of the micro-batch runtime, removed with it, and what replaces each.
REMOVED_FLAGS = {
    "micro_batches": ("--micro-batches", "every run is in epochs"),
    "trigger_interval": (
        "--trigger-interval",
        "tasks process records as they arrive and commit every commit.interval.ms "
        "(--config commit.interval.ms=...); --epoch-interval sets the length of an epoch",
    ),
    "max_records_per_batch": (
        "--max-records-per-batch",
        "tasks process records as they arrive and commit every commit.interval.ms "
        "(--config commit.interval.ms=...)",
    ),
}


def _refuse_removed_flags(args: argparse.Namespace) -> None:
    """Stop a command written for the removed micro-batch runtime, saying what to use."""
    for dest, (flag, instead) in REMOVED_FLAGS.items():
        if getattr(args, dest) not in (None, False):
            raise ConfigError(f"{flag} was removed with the micro-batch runtime: {instead}")


def _local_broker_defaults(
    bootstrap: str, kafka_config: dict[str, Any], embedded: bool, log: Any
) -> dict[str, Any]:
    """``kafka_config`` plus the producer settings that keep a Tansu broker healthy, when the
    run's broker is one (``--embedded-broker``, or a ``processor-api broker``)."""
    from processor_api.kafka.client_config import KafkaClientConfig
    from processor_api.kafka.local_broker import broker_is_tansu, with_tansu_defaults

    if not embedded and not broker_is_tansu(bootstrap, KafkaClientConfig.from_dict(kafka_config)):
        return kafka_config
    adjusted = with_tansu_defaults(kafka_config)
    if adjusted != kafka_config:
        log.info(
            "producer_linger_for_tansu",
            linger_ms=adjusted["producer.linger.ms"],
            detail="Tansu's cost per request grows with the record batches a partition holds: "
            "the runtime's producers send fewer, larger batches (--kafka-config "
            "producer.linger.ms=N overrides)",
        )
    return adjusted


def _run(args: argparse.Namespace, log: Any) -> int:
    from processor_api.config import StreamsConfig
    from processor_api.runtime.executor_dirs import state_dirs_here
    from processor_api.spark.mock_registries import refuse_in_process_registries
    from processor_api.spark.runner import RunSettings, TopologyRunner
    from processor_api.state.locks import ApplicationLock
    from processor_api.state.manager import wipe_application_state
    from processor_api.topology.loader import load_topology

    config, kafka_config = _check_arguments(args)
    topology_kwargs = dict(args.topology_arg)
    topology = load_topology(args.topology, topology_kwargs)  # fail fast on a bad path
    refuse_in_process_registries(topology, StreamsConfig.from_dict(config).schema_registry)
    application_id = _application_id(args)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port must be 0-65535, got {args.metrics_port}")
    _refuse_removed_flags(args)
    queries = query_settings(args)
    with ExitStack() as stack:
        stack.enter_context(ApplicationLock(args.state_dir, application_id))
        if args.cleanup:
            wiped = sum(
                wipe_application_state(directory, application_id)
                for directory in {Path(args.state_dir)}
                | set(state_dirs_here(args.state_dir, per_executor=True))
            )
            log.info("local_state_wiped", application_id=application_id, tasks=wiped)
        bootstrap = args.bootstrap_servers
        if args.embedded_broker:
            from processor_api.testing.embedded import EmbeddedKafka

            if kafka_config:
                log.warning(
                    "kafka_config_with_embedded_broker",
                    detail="the embedded broker is plaintext without authentication; "
                    "security settings will make every client fail",
                )
            broker = stack.enter_context(EmbeddedKafka())
            bootstrap = broker.bootstrap_servers
            internal = set(topology.internal_topics())
            for topic in [*topology.source_topics(), *topology.global_topics()]:
                if topic not in internal:
                    broker.create_topic(topic, 1)
            log.info("embedded_broker_started", bootstrap_servers=bootstrap)
        kafka_config = _local_broker_defaults(bootstrap, kafka_config, args.embedded_broker, log)
        settings = RunSettings(
            bootstrap_servers=bootstrap,
            application_id=application_id,
            state_dir=args.state_dir,
            checkpoint_dir=args.checkpoint_dir,
            master=args.master,
            processing_guarantee=args.processing_guarantee,
            available_now=args.available_now,
            epoch_interval_s=args.epoch_interval,
            state_dir_per_executor=args.state_dir_per_executor,
            early_start=args.early_start,
            config=config,
            log_format=args.log_format,
            spark_conf=dict(args.spark_conf),
            kafka_config=kafka_config,
            metrics_port=args.metrics_port,
            **queries,
        )
        runner = TopologyRunner(args.topology, settings, topology_kwargs=topology_kwargs)
        runner.prepare()
        result = runner.run()
        log.info(
            "done",
            records=result.records,
            outputs=result.outputs,
            batches=result.batches,
            duration_s=round(result.duration_s, 2),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
