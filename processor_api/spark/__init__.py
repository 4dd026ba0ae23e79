"""The Spark runtime: the runner (driver side), the task function (executor side), the data
sources and the task keys. The only package that ties ``engine``, ``state`` and ``kafka`` to
Spark."""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``processor_api.spark.read_store_df`` without importing pyspark with the package
    if name == "read_store_df":
        from processor_api.spark.store_source import read_store_df

        return read_store_df
    raise AttributeError(f"module 'processor_api.spark' has no attribute {name!r}")
