"""Runnable topologies built from the seeds (user code, importable as ``topologies.<name>``).

Every module exposes ``build_topology(**settings) -> Topology`` whose keyword arguments (topic
names, store names, thresholds, window sizes, ...) all have defaults, so it can be run as
``run-topology topologies.<name>:build_topology``.

Modules:

* :mod:`topologies.sales_aggregation`: running sales total per product, notification once a
  product's total reaches a threshold (seed 000, Kafka Streams stateful aggregation).
* :mod:`topologies.word_count`: the Kafka word count, split / repartition by word / count, as two
  sub-topologies joined by a repartition topic (seed 001).
* :mod:`topologies.product_count`: ``MyProductCountProcessor``, a count per product key whose
  totals are forwarded by a STREAM_TIME punctuation every second (seed 003).
* :mod:`topologies.click_sessions`: per-session tumbling-window aggregation of click events in
  a window store, one summary per session window emitted when stream time closes the window
  (seeds 001/002).
* :mod:`topologies.captcha_join`: browser action counts joined with captcha verifications, asking
  for a captcha when an unverified browser reaches a number of actions (seed 003).
"""

__all__ = [
    "captcha_join",
    "click_sessions",
    "product_count",
    "sales_aggregation",
    "word_count",
]
