"""The job spec the driver hands every executor: every field comes from somewhere, and every
setting of the run reaches the executors (none is copied by hand, so none can be dropped)."""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass

from processor_api.config import StreamsConfig
from processor_api.kafka.client_config import KafkaClientConfig
from processor_api.runtime.job import JobSpec
from processor_api.spark.runner import METRICS_INTERVAL_S, TopologyRunner
from processor_api.spark.settings import RunSettings

TOPOLOGY = "topologies.word_count:build_topology"

#: A value other than the default for every setting of StreamsConfig.
EVERY_SETTING = {
    "application_id": "spec-app",
    "deserialization_exception_handler": "log_and_continue",
    "processing_exception_handler": "log_and_continue",
    "production_exception_handler": "log_and_continue",
    "dead_letter_topic": "spec-dlq",
    "processing_guarantee": "exactly_once_v2",
    "max_task_idle_ms": 250,
    "stream_time_idle_advance_ms": 1_500,
    "state_restore_listener": "tests.integration.metrics_listeners:SlowRestoreListener",
    "commit_interval_ms": 700,
    "schema.registry.url": "http://registry:8081",
    "schema.registry.basic.auth.user.info": "u:p",
    "task_timeout_ms": 45_000,
    "state_snapshot_interval_ms": 5_000,
    "state_snapshot_location": "s3://bucket/snapshots",
    "state_snapshot_retained": 4,
    "state_snapshot_filesystem_options": {"region": "eu-west-1"},
    "state_snapshot_max_bytes_per_second": 1_000_000,
    "num_stream_threads": 3,
    "rocksdb_block_cache_bytes": 1 << 20,
    "rocksdb_write_buffer_manager_bytes": 1 << 19,
}

#: The run-topology settings the job spec does not carry: they stay with the driver (or
#: reach the executors through ``StreamsConfig``, checked above).
DRIVER_SIDE = {
    "application_id": "in the config",
    "processing_guarantee": "in the config",
    "config": "the config",
    "checkpoint_dir": "Spark's checkpoint, on the driver",
    "master": "the Spark session",
    "available_now": "the trigger",
    "epoch_interval_s": "the trigger",
    "spark_conf": "the Spark session",
    "query_port": "the driver's query server (the hosts get the router's address)",
    "query_host": "the driver's query server",
    "query_token": "the driver's query server (the hosts prove the run's secret instead)",
    "early_start": "the driver starts the hosts (the spec then carries early_start_pid)",
}


def _settings(tmp_path, config):
    return RunSettings(
        bootstrap_servers="broker:9092",
        application_id=config.get("application_id", "spec-app"),
        processing_guarantee=config.get("processing_guarantee", "at_least_once"),
        state_dir=str(tmp_path / "state"),
        config=config,
        log_format="json",
        kafka_config={"client.id": "spec-client", "producer.linger.ms": "7"},
        metrics_port=0,
        state_dir_per_executor=True,
    )


def test_every_setting_reaches_the_executors(tmp_path):
    runner = TopologyRunner(TOPOLOGY, _settings(tmp_path, EVERY_SETTING))
    assert runner.config != StreamsConfig(), "every setting differs from its default"
    spec = runner._job_spec()
    # the executors build their StreamsConfig from the job spec's config
    assert StreamsConfig.from_dict(spec.config) == runner.config


def test_a_new_setting_reaches_the_executors_without_being_listed(tmp_path):
    runner = TopologyRunner(TOPOLOGY, _settings(tmp_path, {}))
    # a setting added to StreamsConfig later: nothing in the runner names it
    extended = make_dataclass(
        "ExtendedConfig", [("a_new_setting", int, field(default=0))], bases=(StreamsConfig,)
    )
    runner.config = extended(application_id="spec-app", a_new_setting=42)
    spec = runner._job_spec()
    assert spec.config["a_new_setting"] == 42


def test_every_job_spec_field_comes_from_the_run(tmp_path):
    settings = _settings(tmp_path, EVERY_SETTING)
    runner = TopologyRunner(TOPOLOGY, settings)
    epoch_fields = {
        "assignment": {"0": ("0_0",)},
        "start_offsets": {("words", 0): 3},
        "reset_policies": {"words": "earliest"},
    }
    spec = runner._job_spec(True, **epoch_fields)
    defaults = JobSpec("", None, {}, None, "", "", {})
    expected = {
        "run_id": runner._run_id,
        "topology_ref": TOPOLOGY,
        "topology_kwargs": {},
        "topology_pickle": None,  # a topology by reference is imported, not pickled
        "bootstrap_servers": settings.bootstrap_servers,
        "state_dir": str((tmp_path / "state").resolve()),
        "config": runner.config.to_dict(),
        "log_format": settings.log_format,
        "producer_config": defaults.producer_config,  # the executors' own (tests change it)
        "flush_timeout_s": defaults.flush_timeout_s,  # the executors' own (tests change it)
        "bounded": True,
        "task_ids": (),  # the plan's, once prepared
        "kafka": KafkaClientConfig.from_dict(settings.kafka_config),
        "metrics_interval_s": METRICS_INTERVAL_S,  # settings.metrics_port is set
        "state_dir_per_executor": settings.state_dir_per_executor,
        "query_router": None,  # no --query-port: the hosts dial no router
        "query_secret": None,
        "early_start_pid": None,  # set once the driver has started the hosts itself
        "layout": None,  # set for continuous epochs on a cluster (tasks move meanwhile)
        **epoch_fields,
    }
    assert sorted(expected) == sorted(f.name for f in fields(JobSpec)), (
        "a JobSpec field without a source in this test: say where the runner takes it from"
    )
    for name, value in expected.items():
        assert getattr(spec, name) == value, name
    carried = {"bootstrap_servers", "state_dir", "log_format", "kafka_config", "metrics_port"}
    carried |= {"state_dir_per_executor"}
    assert sorted(carried | set(DRIVER_SIDE)) == sorted(f.name for f in fields(RunSettings)), (
        "a run-topology setting neither carried to the executors nor named as the driver's"
    )
