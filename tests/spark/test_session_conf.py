"""The run's Spark settings (``spark/session.session_conf``): a lost executor's shuffle
blocks fail fast by default, and the user's ``--spark-conf`` wins."""

from __future__ import annotations

from processor_api.spark.session import FAILOVER_CONF, session_conf
from processor_api.spark.settings import RunSettings


def _settings(**spark_conf: str) -> RunSettings:
    return RunSettings(
        bootstrap_servers="127.0.0.1:9092",
        master="local-cluster[2,2,1024]",
        spark_conf={k.replace("_", "."): v for k, v in spark_conf.items()},
    )


def test_a_fetch_from_a_lost_executor_fails_after_one_retry_of_one_second():
    conf = session_conf(_settings(), worker_count=4, workers_path="/x")
    assert conf["spark.shuffle.io.maxRetries"] == "1"
    assert conf["spark.shuffle.io.retryWait"] == "1s"
    assert FAILOVER_CONF.items() <= conf.items()
    assert conf["spark.sql.shuffle.partitions"] == "4"


def test_the_users_spark_conf_wins_over_the_failover_defaults():
    conf = session_conf(
        _settings(spark_shuffle_io_maxRetries="3", spark_shuffle_io_retryWait="5s"),
        worker_count=4,
        workers_path="/x",
    )
    assert (conf["spark.shuffle.io.maxRetries"], conf["spark.shuffle.io.retryWait"]) == ("3", "5s")
