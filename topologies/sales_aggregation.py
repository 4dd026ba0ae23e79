"""Sales aggregation with a threshold notification (seed 000).

The seed ("Kafka Streams - Stateful Aggregation - Part 1") is a Kafka Streams DSL application::

    builder.stream("sales-events-v1", Consumed.with(String, String))
        .groupBy((key, value) -> key)
        .aggregate(() -> 0L, this::aggregate,
                   Materialized.as("PRODUCT_AGGREGATED_SALES")   // String -> Long
                       .withCachingDisabled())
        .filter((product, salesValue) -> salesValue >= 2000)
        .mapValues((key, value) -> new NotificationEvent(key, value))
        .toStream()
        .to("notifications-events-v1", Produced.with(String, Json))

Here it is one processor over a persistent store:

* source ``sales-events-v1``: key = product (string), value = a string holding the JSON sale
  event ``{"product": ..., "value": ...}`` (string serdes, as the seed's ``Consumed.with``);
  the JSON is parsed by the processor.
* processor ``aggregate``: adds the sale's ``value`` to the running total of the record key
  (the seed groups by key, not by the ``product`` field) in store ``PRODUCT_AGGREGATED_SALES``
  (string -> long, RocksDB, change-logged, caching disabled as in the seed).
* every update whose new total is >= ``threshold`` (default 2000) forwards
  ``{"product": key, "value": total}`` keyed by product to sink ``notifications-events-v1``
  (string key, JSON value). With caching disabled, the seed's ``filter`` sees every update, so
  a product already above the threshold is notified again on each further sale; so is it here.

Bad input: the seed's ``aggregate`` ignores an event it cannot parse. Here an event that is not
valid JSON, is not a JSON object, or whose ``value`` is missing or not an integer is skipped
with a warning naming topic/partition/offset: the store is not touched and nothing is emitted
(the seed would re-emit the unchanged total; there is no reason to notify on garbage). Records
with a null key or null value are skipped too, as Kafka Streams' aggregations do.
"""

from __future__ import annotations

import json
from typing import Any

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_INPUT_TOPIC = "sales-events-v1"
DEFAULT_OUTPUT_TOPIC = "notifications-events-v1"
DEFAULT_STORE_NAME = "PRODUCT_AGGREGATED_SALES"
DEFAULT_THRESHOLD = 2000


class InvalidSaleEvent(ValueError):
    """A sale event that cannot be aggregated (bad JSON, missing or non-integer value)."""


def parse_sale_value(raw: Any) -> int:
    """Return the integer ``value`` of a sale event given as a JSON string.

    Raises :class:`InvalidSaleEvent` when ``raw`` is not a JSON object with an integer
    ``value`` (a float with an integral value such as ``1000.0`` is accepted).
    """
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", errors="strict")
    try:
        event = json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidSaleEvent(f"not valid JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise InvalidSaleEvent(f"expected a JSON object, got {type(event).__name__}")
    if "value" not in event:
        raise InvalidSaleEvent("missing 'value'")
    value = event["value"]
    if isinstance(value, bool):
        raise InvalidSaleEvent(f"'value' must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise InvalidSaleEvent(f"'value' must be an integer, got {value!r}")


class SalesAggregator(Processor):
    """Keeps a running sales total per product and notifies once it reaches a threshold.

    Forwards ``Record(product, {"product": product, "value": total})`` on every update whose
    total is >= ``threshold``.
    """

    def __init__(self, store_name: str = DEFAULT_STORE_NAME, threshold: int = DEFAULT_THRESHOLD):
        self.store_name = store_name
        self.threshold = threshold
        self.context: ProcessorContext | None = None
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the totals store."""
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def _skip(self, reason: str) -> None:
        meta = self.context.record_metadata() if self.context else None
        _log.warning(
            "sale_event_skipped",
            reason=reason,
            topic=meta.topic if meta else None,
            partition=meta.partition if meta else None,
            offset=meta.offset if meta else None,
        )

    def process(self, record: Record) -> None:
        """Add the sale to the product's total; forward a notification at/above threshold."""
        assert self.context is not None and self.store is not None
        if record.key is None:
            self._skip("null key (product)")
            return
        if record.value is None:
            self._skip("null value")
            return
        try:
            amount = parse_sale_value(record.value)
        except (InvalidSaleEvent, UnicodeDecodeError) as exc:
            self._skip(f"malformed sale event: {exc}")
            return
        total = (self.store.get(record.key) or 0) + amount
        self.store.put(record.key, total)
        if total >= self.threshold:
            self.context.forward(record.with_value({"product": record.key, "value": total}))


def build_topology(
    *,
    input_topic: str = DEFAULT_INPUT_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    threshold: int = DEFAULT_THRESHOLD,
) -> Topology:
    """Source ``input_topic`` -> ``aggregate`` (store ``store_name``) -> sink ``output_topic``.

    ``threshold``: the total from which every update produces a notification.
    """
    threshold = int(threshold)
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(store_name), Serdes.string(), Serdes.long()
    ).with_caching_disabled()
    return (
        Topology()
        .add_source(
            "sales-source", input_topic, key_serde=Serdes.string(), value_serde=Serdes.string()
        )
        .add_processor("aggregate", lambda: SalesAggregator(store_name, threshold), "sales-source")
        .add_state_store(store, "aggregate")
        .add_sink(
            "notifications-sink",
            output_topic,
            "aggregate",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )
