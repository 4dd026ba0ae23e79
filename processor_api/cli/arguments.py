"""Arguments and setup errors the commands share (``run-topology``, ``read-store``,
``processor-api``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from processor_api.errors import (
    BrokerUnavailableError,
    ConfigError,
    MissingTopicError,
    TopologyError,
)

SETUP_ERRORS = (ConfigError, BrokerUnavailableError, MissingTopicError, TopologyError)


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of a repeatable flag, split at the first ``=``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _topology_arg(text: str) -> tuple[str, Any]:
    key, value = key_value(text)
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def add_topology_and_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """``--topology-arg``, ``--kafka-config`` and ``--kafka-config-file`` (also ``read-store``)."""
    parser.add_argument(
        "--topology-arg",
        type=_topology_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for FUNCTION (JSON value)",
    )
    add_kafka_arguments(parser)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kafka-config`` and ``--kafka-config-file`` (also ``processor-api status``)."""
    parser.add_argument(
        "--kafka-config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka client setting for every client, e.g. security.protocol=SASL_SSL; "
        "prefix consumer., producer. or admin. for one kind of client (repeatable, wins over "
        "--kafka-config-file)",
    )
    parser.add_argument(
        "--kafka-config-file",
        action="append",
        default=[],
        metavar="FILE",
        help="Kafka client settings in Java properties format (client.properties)",
    )


def kafka_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Kafka client settings of ``--kafka-config-file`` and ``--kafka-config``, checked."""
    from processor_api.kafka.client_config import KafkaClientConfig, read_properties

    kafka: dict[str, Any] = {}
    for path in args.kafka_config_file:
        kafka.update(read_properties(path))
    kafka.update(dict(args.kafka_config))
    KafkaClientConfig.from_dict(kafka)  # unknown settings and bad values: ConfigError
    return kafka
