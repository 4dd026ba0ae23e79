"""The Spark side: the runner (driver), the epochs' source rows and the task function
(``epoch_function``, executor side), the task keys and the store source. The only package that
ties ``engine``, ``state``, ``kafka`` and ``runtime`` to Spark."""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``processor_api.spark.read_store_df`` without importing pyspark with the package
    if name == "read_store_df":
        from processor_api.spark.store_source import read_store_df

        return read_store_df
    raise AttributeError(f"module 'processor_api.spark' has no attribute {name!r}")
