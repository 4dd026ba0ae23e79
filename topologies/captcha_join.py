"""Ask unverified browsers for a captcha after N actions: a stream-table join (seed 003).

The seed counts the actions of each browser (``browserActionsCountTable``), builds a table of
the browsers that solved a captcha (``captchaVerifiedTable``), left-joins the two, and asks for
a captcha when an unverified browser reaches 5 actions. The same with the Processor API, as
one sub-topology over two **co-partitioned** input topics keyed by browser hash (same key,
same partitioner, same number of partitions: a browser's actions and its verification land in
the same task, hence in the same local stores):

* source ``browser-actions``: one record = one action of the browser in the key (the value is
  not used and is read as raw bytes, whatever it holds).
* source ``captcha-verified``: one record = the browser in the key solved the captcha (value
  not used either).
* processor ``record-verification`` (child of the verification source) writes the browser to
  store ``captcha-verified`` (string -> long: the timestamp of its first verification).
* processor ``count-actions`` (child of the action source) counts actions per browser in store
  ``browser-actions-count`` (string -> long) and reads store ``captcha-verified`` (connected
  with ``connect_processor_and_state_stores``: sharing it is what puts both processors in one
  sub-topology, so both topics are read by the same task, records taken in timestamp order).
* when an action brings the count to exactly ``threshold`` (default 5) and the browser is not
  in ``captcha-verified``, it forwards ``{"browser_hash": browser, "actions": count}`` keyed by
  browser to sink ``ask-captcha`` (string key, JSON value).

Decisions (the seed leaves them open):

* The question is asked **once**, when the count reaches the threshold: further actions
  (count > threshold) emit nothing. (The seed's ``filter(count >= 5)`` on the joined table
  would ask again on every later action.)
* Whether a browser is verified is decided **at the moment** the threshold is reached, in
  stream-time order: a verification with a smaller timestamp than the threshold-reaching
  action is processed first and suppresses the question; a verification that arrives later
  emits nothing (no retraction, no second question) and is only recorded.
* A verification does not reset the action count.
* ``idle_ms`` (default: never) forgets the count of a browser idle for that long in stream
  time: the count store has a time to live (``with_ttl``), so a browser that comes back
  after a pause counts from zero again, and idle browsers leave the store (and its
  changelog) on their own instead of growing it forever.
* Records with a null key (no browser hash) are skipped with a warning.
"""

from __future__ import annotations

import json
from typing import Any

from processor_api import Processor, ProcessorContext, Record, Serde, Serdes, Stores, Topology
from processor_api.logging import get_logger
from processor_api.state import KeyValueStore

_log = get_logger(__name__)

DEFAULT_ACTIONS_TOPIC = "browser-actions"
DEFAULT_VERIFIED_TOPIC = "captcha-verified"
DEFAULT_OUTPUT_TOPIC = "ask-captcha"
DEFAULT_COUNT_STORE = "browser-actions-count"
DEFAULT_VERIFIED_STORE = "captcha-verified"
DEFAULT_THRESHOLD = 5


def _serialize_any(obj: Any) -> bytes:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, str):
        return obj.encode("utf-8")
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


ANY_VALUE_SERDE = Serde(_serialize_any, bytes, "any-value")
"""Reads any value as raw bytes (never fails); writes bytes as is, str as UTF-8, else JSON."""


def _skip_null_key(context: ProcessorContext | None, what: str) -> None:
    meta = context.record_metadata() if context else None
    _log.warning(
        "null_browser_hash_skipped",
        record=what,
        topic=meta.topic if meta else None,
        partition=meta.partition if meta else None,
        offset=meta.offset if meta else None,
    )


class CaptchaVerificationProcessor(Processor):
    """Records that a browser solved the captcha (first verification timestamp kept)."""

    def __init__(self, verified_store: str = DEFAULT_VERIFIED_STORE) -> None:
        self.verified_store = verified_store
        self.context: ProcessorContext | None = None
        self.verified: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context and the verified-browsers store."""
        self.context = context
        self.verified = context.get_state_store(self.verified_store)

    def process(self, record: Record) -> None:
        """Mark ``record.key`` as verified (no output)."""
        assert self.verified is not None
        if record.key is None:
            _skip_null_key(self.context, "captcha verification")
            return
        self.verified.put_if_absent(record.key, record.timestamp)


class BrowserActionCountProcessor(Processor):
    """Counts actions per browser; asks unverified browsers for a captcha at the threshold."""

    def __init__(
        self,
        count_store: str = DEFAULT_COUNT_STORE,
        verified_store: str = DEFAULT_VERIFIED_STORE,
        threshold: int = DEFAULT_THRESHOLD,
    ) -> None:
        self.count_store = count_store
        self.verified_store = verified_store
        self.threshold = threshold
        self.context: ProcessorContext | None = None
        self.counts: KeyValueStore | None = None
        self.verified: KeyValueStore | None = None

    def init(self, context: ProcessorContext) -> None:
        """Keep the context, the counts store and the (read-only here) verified store."""
        self.context = context
        self.counts = context.get_state_store(self.count_store)
        self.verified = context.get_state_store(self.verified_store)

    def process(self, record: Record) -> None:
        """Count the action; at exactly ``threshold`` actions, ask if not verified."""
        assert self.context is not None and self.counts is not None
        assert self.verified is not None
        browser = record.key
        if browser is None:
            _skip_null_key(self.context, "browser action")
            return
        count = (self.counts.get(browser) or 0) + 1
        self.counts.put(browser, count)
        if count != self.threshold:
            return
        if self.verified.get(browser) is not None:
            _log.debug("captcha_not_needed_browser_verified", browser_hash=browser, actions=count)
            return
        self.context.forward(
            Record(browser, {"browser_hash": browser, "actions": count}, record.timestamp)
        )


def build_topology(
    *,
    actions_topic: str = DEFAULT_ACTIONS_TOPIC,
    verified_topic: str = DEFAULT_VERIFIED_TOPIC,
    output_topic: str = DEFAULT_OUTPUT_TOPIC,
    count_store: str = DEFAULT_COUNT_STORE,
    verified_store: str = DEFAULT_VERIFIED_STORE,
    threshold: int = DEFAULT_THRESHOLD,
    actions_value_serde: Serde | None = None,
    verified_value_serde: Serde | None = None,
    idle_ms: int | None = None,
) -> Topology:
    """Both sources -> their processors (sharing ``verified_store``) -> sink ``output_topic``.

    ``threshold``: the action count at which an unverified browser is asked (once). The value
    serdes of the two inputs default to :data:`ANY_VALUE_SERDE` (values are not used).
    ``idle_ms``: forget a browser's count after that long without actions (stream time).
    """
    threshold = int(threshold)
    if threshold < 1:
        raise ValueError(f"threshold must be >= 1, got {threshold}")
    if count_store == verified_store:
        raise ValueError(f"the two stores need different names, both are {count_store!r}")
    counts = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(count_store), Serdes.string(), Serdes.long()
    )
    if idle_ms is not None:
        counts.with_ttl(int(idle_ms))
    verified = Stores.key_value_store_builder(
        Stores.persistent_key_value_store(verified_store), Serdes.string(), Serdes.long()
    )
    return (
        Topology()
        .add_source(
            "actions-source",
            actions_topic,
            key_serde=Serdes.string(),
            value_serde=actions_value_serde or ANY_VALUE_SERDE,
        )
        .add_source(
            "verified-source",
            verified_topic,
            key_serde=Serdes.string(),
            value_serde=verified_value_serde or ANY_VALUE_SERDE,
        )
        .add_processor(
            "record-verification",
            lambda: CaptchaVerificationProcessor(verified_store),
            "verified-source",
        )
        .add_processor(
            "count-actions",
            lambda: BrowserActionCountProcessor(count_store, verified_store, threshold),
            "actions-source",
        )
        .add_state_store(verified, "record-verification")
        .add_state_store(counts, "count-actions")
        .connect_processor_and_state_stores("count-actions", verified_store)
        .add_sink(
            "ask-captcha-sink",
            output_topic,
            "count-actions",
            key_serde=Serdes.string(),
            value_serde=Serdes.json(),
        )
    )
