"""Orders enriched with customers from a global store.

A Kafka Streams user would write ``orders.join(customersGlobalTable, (id, order) ->
order.customerId, ...)``; with the Processor API it is a global store and one processor::

    topology.addGlobalStore(customersStore, "CUSTOMERS_SOURCE", stringDeserializer,
                            jsonDeserializer, "customers", "CUSTOMERS_UPDATER", CustomerUpdater::new);
    topology.addSource("ORDERS_SOURCE", "orders");
    topology.addProcessor("ENRICH", OrderEnricher::new, "ORDERS_SOURCE");
    topology.addSink("ENRICHED_SINK", "orders-enriched", "ENRICH");

Here:

* global store ``customers`` (string -> JSON, RocksDB, logging disabled: the ``customers``
  topic is its changelog) filled from every partition of topic ``customers`` (key = customer
  id, value = the customer as a JSON object; a null value deletes the customer) by processor
  ``CUSTOMERS_UPDATER``. Because the store is global, ``orders`` and ``customers`` need not be
  co-partitioned: every task sees every customer.
* source ``orders``: key = order id (string), value = JSON ``{"customer_id": ..., ...}``.
* processor ``ENRICH`` looks the order's ``customer_id`` up in the store and forwards the order
  with a ``customer`` field holding the customer (a left join: ``null`` when the customer is
  unknown), or, with ``inner_join=True``, drops orders of unknown customers, logging each.
* sink ``orders-enriched`` (string key, JSON value).

Bad input: an order value that is not a JSON object with a string ``customer_id`` is skipped
with a warning naming topic, partition and offset (nothing is forwarded); a customer value
that is not valid JSON goes to the deserialization exception handler, like any input record.
"""

from __future__ import annotations

from typing import Any

from processor_api import Processor, ProcessorContext, Record, Serdes, Stores, Topology
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_ORDERS_TOPIC = "orders"
DEFAULT_CUSTOMERS_TOPIC = "customers"
DEFAULT_OUTPUT_TOPIC = "orders-enriched"
DEFAULT_STORE_NAME = "customers"


class CustomerUpdater(Processor):
    """The global store's processor: the latest value of each customer (null deletes it)."""

    def __init__(self, store_name: str = DEFAULT_STORE_NAME) -> None:
        self.store_name = store_name
        self.store: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the global store this processor maintains."""
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        """Put the customer, or delete it on a null value; null keys cannot be stored."""
        assert self.store is not None
        if record.key is None:
            return
        if record.value is None:
            self.store.delete(record.key)
        else:
            self.store.put(record.key, record.value)


class OrderEnricher(Processor):
    """Adds the order's customer (looked up in the global store) to the order."""

    def __init__(self, store_name: str = DEFAULT_STORE_NAME, inner_join: bool = False) -> None:
        self.store_name = store_name
        self.inner_join = inner_join
        self.context: ProcessorContext | None = None
        self.customers: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the (read-only) global store."""
        self.context = context
        self.customers = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        """Forward ``{**order, "customer": customer-or-None}`` (see the module docs)."""
        assert self.context is not None and self.customers is not None
        order: Any = record.value
        customer_id = order.get("customer_id") if isinstance(order, dict) else None
        if not isinstance(customer_id, str):
            self._warn("order_without_customer_id_skipped", order)
            return
        customer = self.customers.get(customer_id)
        if customer is None and self.inner_join:
            self._warn("order_of_unknown_customer_dropped", customer_id)
            return
        self.context.forward(record.with_value({**order, "customer": customer}))

    def _warn(self, event: str, detail: Any) -> None:
        assert self.context is not None
        meta = self.context.record_metadata()
        _log.warning(
            event,
            topic=meta.topic if meta else None,
            partition=meta.partition if meta else None,
            offset=meta.offset if meta else None,
            detail=repr(detail)[:200],
        )


def build_topology(
    *,
    orders_topic: str = DEFAULT_ORDERS_TOPIC,
    customers_topic: str = DEFAULT_CUSTOMERS_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    store_name: str = DEFAULT_STORE_NAME,
    inner_join: bool = False,
    persistent: bool = True,
) -> Topology:
    """Global store ``store_name`` from ``customers_topic``; ``orders_topic`` -> ``ENRICH`` ->
    ``output_topic``."""
    supplier = (
        Stores.persistent_key_value_store(store_name)
        if persistent
        else Stores.in_memory_key_value_store(store_name)
    )
    customers = Stores.key_value_store_builder(
        supplier, Serdes.string(), Serdes.json()
    ).with_logging_disabled()
    return (
        Topology()
        .add_global_store(
            customers,
            "CUSTOMERS_SOURCE",
            customers_topic,
            "CUSTOMERS_UPDATER",
            lambda: CustomerUpdater(store_name),
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
        .add_source(
            "ORDERS_SOURCE", orders_topic, key_serde=Serdes.string(), value_serde=Serdes.json()
        )
        .add_processor("ENRICH", lambda: OrderEnricher(store_name, inner_join), "ORDERS_SOURCE")
        .add_sink(
            "ENRICHED_SINK",
            output_topic,
            "ENRICH",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )
