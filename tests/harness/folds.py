"""Seed 000's sales aggregation as data: the input sales, and the reference fold the output
is checked against (exactly-once / at-least-once, see :func:`compare`)."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from processor_api.kafka.partitioner import default_partition
from tests.harness.topics import TopicRecord, produce

SALES = "topologies.sales_aggregation:build_topology"
SALES_STORE = "PRODUCT_AGGREGATED_SALES"
THRESHOLD = 2000


@dataclass(frozen=True)
class Sale:
    product: str
    value: int
    timestamp: int


def make_sales(
    count: int, products: int, seed: int, start_ts: int = 1_700_000_000_000
) -> list[Sale]:
    """``count`` sales over ``products`` products, values 1..199 (deterministic)."""
    rnd = random.Random(seed)
    names = [f"product-{i:04d}" for i in range(products)]
    return [Sale(rnd.choice(names), rnd.randint(1, 199), start_ts + i) for i in range(count)]


def product_partition(product: str, partitions: int) -> int:
    """The partition :func:`produce_sales` places ``product`` in when given the topic's
    ``partitions``: Java's default partitioner (murmur2 of the key), which the runtime's
    producers use too, so each task's notifications go to its own output partition and no
    two tasks' transactions are open on one partition."""
    return default_partition(product.encode(), partitions)


def produce_sales(
    bootstrap: str, topic: str, sales: list[Sale], partitions: int | None = None
) -> int:
    """The seed's wire format: key = product, value = JSON ``{"product", "value"}`` string.
    Placed by the producer's partitioner, or with ``partitions`` by
    :func:`product_partition`."""
    return produce(
        bootstrap,
        topic,
        (
            (
                s.product.encode(),
                json.dumps({"product": s.product, "value": s.value}).encode(),
                None if partitions is None else product_partition(s.product, partitions),
                s.timestamp,
            )
            for s in sales
        ),
    )


def fold_totals(sales: Iterable[Sale]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for sale in sales:
        totals[sale.product] += sale.value
    return dict(totals)


def expected_notifications(
    sales: Iterable[Sale], threshold: int = THRESHOLD
) -> dict[str, list[int]]:
    """Per product, the running totals >= ``threshold`` in input order (one per update).

    All sales of a product have the same key, so they are in one partition, in produce order.
    """
    running: Counter[str] = Counter()
    expected: dict[str, list[int]] = {}
    for sale in sales:
        running[sale.product] += sale.value
        if running[sale.product] >= threshold:
            expected.setdefault(sale.product, []).append(running[sale.product])
    return expected


@dataclass
class Comparison:
    """Reference fold vs what a reader saw, summed over products.

    * ``expected``/``seen``: notification records;
    * ``missing``: expected (product, total) pairs never seen;
    * ``extra``: records beyond the expected multiset (duplicates, or totals that should not
      exist); ``wrong``: seen (product, total) pairs that are not expected at all;
    * ``order_violations`` (at-least-once): a product's sequence jumping ahead past a total it
      had not emitted yet (see :func:`compare`);
    * ``equal``: every product's sequence equals the expected one;
    * ``totals_equal``: the final store totals equal the fold and each product's last
      notification is its final total (when >= threshold).
    """

    expected: int = 0
    seen: int = 0
    missing: int = 0
    extra: int = 0
    wrong: int = 0
    order_violations: int = 0
    equal: bool = False
    totals_equal: bool = False
    examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def notifications_by_product(records: Iterable[TopicRecord]) -> dict[str, list[int]]:
    """Per product, the notified totals in (partition, offset) order."""
    seen: dict[str, list[int]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        product = record.key.decode() if record.key is not None else None
        value = json.loads(record.value)["value"] if record.value is not None else None
        seen.setdefault(product, []).append(value)
    return seen


def compare(
    expected: dict[str, list[int]],
    seen: dict[str, list[int]],
    guarantee: str,
    totals: dict[str, int],
    store: dict[str, int] | None,
    threshold: int = THRESHOLD,
) -> Comparison:
    """Exactly-once: every product's notified totals equal the expected list.

    At-least-once: no (product, total) is missing or wrong (every seen total is an expected
    one), and each product's sequence is a concatenation of runs ``E[s:e]`` of its expected
    list ``E`` where each run starts at or before the end of the previous one (a re-run
    re-emits from the last committed position, never skips ahead). Running totals of a product
    strictly increase, so each total has one index in ``E``.

    Both: the final store equals the fold, and the last notification of each product is its
    final total if that is >= ``threshold``.
    """
    result = Comparison()
    result.expected = sum(len(v) for v in expected.values())
    result.seen = sum(len(v) for v in seen.values())
    result.equal = True
    for product in sorted(set(expected) | set(seen), key=str):
        want, got = expected.get(product, []), seen.get(product, [])
        if want != got:
            result.equal = False
        missing = Counter(want) - Counter(got)
        extra = Counter(got) - Counter(want)
        result.missing += sum(missing.values())
        result.extra += sum(extra.values())
        index = {total: i for i, total in enumerate(want)}
        wrong = [t for t in got if t not in index]
        result.wrong += len(wrong)
        position = 0
        for total in got:
            i = index.get(total)
            if i is None:
                continue
            if i > position:
                result.order_violations += 1
            position = i + 1
        if (missing or extra or wrong) and len(result.examples) < 5:
            result.examples.append(
                f"{product}: missing {sorted(missing.elements())[:5]} extra "
                f"{sorted(extra.elements())[:5]} wrong {wrong[:5]}"
            )
    last_ok = all(
        (seen.get(p) or [None])[-1] == total for p, total in totals.items() if total >= threshold
    )
    result.totals_equal = store == totals and last_ok if store is not None else last_ok
    if guarantee == "exactly_once_v2":
        result.order_violations = 0 if result.equal else result.order_violations
    return result


def is_ok(comparison: Comparison, guarantee: str) -> bool:
    if guarantee == "exactly_once_v2":
        return comparison.equal and comparison.totals_equal
    return (
        comparison.missing == 0
        and comparison.wrong == 0
        and comparison.order_violations == 0
        and comparison.totals_equal
    )
