"""``applyInPandasWithState`` without importing pandas into the driver.

pyspark's ``GroupedData.applyInPandasWithState`` builds its UDF through ``pandas_udf``, whose
version check imports pandas (and pyarrow) into the calling process. The driver never runs
the function (the executors' Python workers do, with pandas preloaded by the worker daemon),
yet the import stays for the whole run: some 28 MiB of private memory in the driver's Python
process (``python -m bench.workers``). :func:`apply_in_pandas_with_state` makes the same plan
through pyspark's ``vectorized_udf`` (the function ``pandas_udf`` calls after its check), so
the driver holds only pyarrow, which the UDF's return-type check needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def apply_in_pandas_with_state(
    grouped: Any,
    func: Callable[..., Any],
    output_schema: str,
    state_schema: str,
    output_mode: str,
    timeout: str,
) -> Any:
    """``grouped.applyInPandasWithState(func, output_schema, state_schema, output_mode,
    timeout)`` (``grouped``: a ``GroupedData``; schemas as DDL strings), planned as pyspark
    plans it."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.functions import vectorized_udf  # type: ignore[attr-defined]
    from pyspark.sql.types import StructType
    from pyspark.util import PythonEvalType

    frame = grouped._df
    session = grouped.session
    output = session._parse_ddl(output_schema)
    state = session._parse_ddl(state_schema)
    assert isinstance(output, StructType) and isinstance(state, StructType)
    udf = vectorized_udf(
        func,
        returnType=output,
        functionType=PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE,
        kind="pandas",
    )
    column = udf(*[frame[name] for name in frame.columns])
    planned = grouped._jgd.applyInPandasWithState(
        column._jc,
        session._jsparkSession.parseDataType(output.json()),
        session._jsparkSession.parseDataType(state.json()),
        output_mode,
        timeout,
    )
    return DataFrame(planned, session)
