"""Which Kafka topics a topology run needs, with how many partitions, and creating them.

* external source topics and global stores' topics must exist (a clear error names the
  missing ones); global topics generate no task and no changelog (they are the changelog);
* a sub-topology runs one task per partition of its source topics, which must all have the
  same partition count (co-partitioning, as Kafka Streams requires);
* repartition topics (written and read by the topology) get the partition count of the
  sub-topology that writes them, unless they exist already;
* every logged store gets ``<application.id>-<store>-changelog``, compacted, one partition
  per task;
* static sink topics that do not exist are created with the writing sub-topology's count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from processor_api.errors import MissingTopicError, TopologyError
from processor_api.kafka.admin import TopicSpec, ensure_topics, topic_partitions
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.kafka.names import changelog_topic
from processor_api.logging import get_logger
from processor_api.topology import Topology
from processor_api.topology.nodes import SubTopology

_log = get_logger("processor_api.topics")


@dataclass
class TopicPlan:
    """The topics of one run and the tasks they imply."""

    partitions_by_subtopology: dict[int, int]
    external_sources: dict[str, int]
    internal: dict[str, int]
    changelogs: dict[str, TopicSpec]
    outputs_to_create: dict[str, int]
    topic_to_subtopology: dict[str, int] = field(default_factory=dict)
    global_topics: dict[str, int] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [
            f"{sub}_{p}"
            for sub, count in sorted(self.partitions_by_subtopology.items())
            for p in range(count)
        ]

    @property
    def source_topics(self) -> list[str]:
        return list(self.external_sources) + list(self.internal)


def _existing_counts(
    bootstrap: str, topics: list[str], kafka: KafkaClientConfig | None = None
) -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        counts.update(topic_partitions(bootstrap, topics, kafka=kafka))
    except MissingTopicError as exc:
        present = [t for t in topics if t not in exc.topics]
        if present:
            counts.update(topic_partitions(bootstrap, present, kafka=kafka))
    return counts


def plan_topics(
    topology: Topology,
    bootstrap_servers: str,
    application_id: str,
    *,
    kafka: KafkaClientConfig | None = None,
) -> TopicPlan:
    """Work out every topic of the run (reads metadata, creates nothing)."""
    subs = topology.subtopologies()
    if not subs:
        raise TopologyError(
            "the topology has only global stores: no sub-topology reads a topic, so there is "
            "no task to run; add a source"
        )
    global_topics = topology.global_topics()
    internal_names = set(topology.internal_topics())
    external = [t for t in topology.source_topics() if t not in internal_names]
    sink_topics = [t for t in topology.sink_topics() if t not in internal_names]
    existing = _existing_counts(
        bootstrap_servers, external + sorted(internal_names) + sink_topics + global_topics, kafka
    )
    missing = [t for t in external + global_topics if t not in existing]
    if missing:
        raise MissingTopicError(
            f"input topic(s) {', '.join(repr(t) for t in missing)} do not exist on "
            f"{bootstrap_servers}; create them first",
            topics=tuple(missing),
        )
    writers: dict[str, list[SubTopology]] = {}
    for sub in subs:
        for sink in sub.sinks:
            if sink.topic is not None:
                writers.setdefault(sink.topic, []).append(sub)

    counts: dict[str, int] = {t: existing[t] for t in external}
    counts.update({t: existing[t] for t in internal_names if t in existing})
    by_sub: dict[int, int] = {}
    for _ in range(len(subs) + 1):  # repartition chains resolve upstream first
        for sub in subs:
            if sub.id in by_sub:
                continue
            known = [counts[t] for t in sub.source_topics if t in counts]
            unknown = [t for t in sub.source_topics if t not in counts]
            if unknown:
                upstream = [
                    by_sub.get(w.id) for t in unknown for w in writers.get(t, []) if w.id != sub.id
                ]
                if any(c is None for c in upstream) or not upstream:
                    continue
                for t in unknown:
                    counts[t] = max(c for c in upstream if c is not None)
                known = [counts[t] for t in sub.source_topics]
            if len(set(known)) > 1:
                detail = ", ".join(f"{t} ({counts[t]})" for t in sub.source_topics)
                raise TopologyError(
                    f"sub-topology {sub.id} reads topics that are not co-partitioned: {detail}; "
                    "all its source topics need the same number of partitions"
                )
            by_sub[sub.id] = known[0]
    unresolved = [sub.id for sub in subs if sub.id not in by_sub]
    if unresolved:
        raise TopologyError(
            f"cannot work out the partition count of sub-topologies {unresolved}: their "
            "repartition topics form a cycle; create those topics first"
        )

    changelogs: dict[str, TopicSpec] = {}
    for sub in subs:
        for store_name in sub.store_names:
            builder = topology.store_builders[store_name]
            if not builder.logging_enabled:
                continue
            name = changelog_topic(application_id, store_name)
            config = {"cleanup.policy": "compact", **builder.logging_config}
            changelogs[name] = TopicSpec(name, by_sub[sub.id], config)

    outputs: dict[str, int] = {}
    for topic in sink_topics:
        if topic not in existing:
            outputs[topic] = max(by_sub[w.id] for w in writers[topic])
    return TopicPlan(
        partitions_by_subtopology=by_sub,
        external_sources={t: counts[t] for t in external},
        internal={t: counts[t] for t in sorted(internal_names)},
        changelogs=changelogs,
        outputs_to_create=outputs,
        topic_to_subtopology={t: sub.id for sub in subs for t in sub.source_topics},
        global_topics={t: existing[t] for t in global_topics},
    )


def create_topics(
    plan: TopicPlan, bootstrap_servers: str, *, kafka: KafkaClientConfig | None = None
) -> list[str]:
    """Create the repartition, changelog and missing output topics; returns those created."""
    specs = [TopicSpec(t, n, {}) for t, n in plan.internal.items()]
    specs += list(plan.changelogs.values())
    specs += [TopicSpec(t, n, {}) for t, n in plan.outputs_to_create.items()]
    created = ensure_topics(bootstrap_servers, specs, kafka=kafka) if specs else []
    for topic in created:
        _log.info(
            "topic_created",
            topic=topic,
            partitions=next(s.partitions for s in specs if s.name == topic),
        )
    return created
