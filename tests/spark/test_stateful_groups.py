"""The run's ``applyInPandasWithState`` plan without pandas in the driver
(``spark/stateful_groups.py``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from processor_api.spark.epoch_function import OUTPUT_SCHEMA, STATE_SCHEMA
from processor_api.spark.stateful_groups import apply_in_pandas_with_state

ROOT = Path(__file__).resolve().parents[2]

#: What the driver does to plan a run's query, up to the UDF's return-type check (the step
#: that needs a session is left out: it imports nothing more).
_PLAN_IMPORTS = textwrap.dedent(
    """
    import sys
    from functools import partial

    import processor_api.spark.runner
    from pyspark.sql.pandas.functions import {udf_maker}
    from pyspark.sql.streaming.state import GroupStateTimeout
    from pyspark.sql import types
    from pyspark.util import PythonEvalType

    from processor_api.spark.epoch_function import OUTPUT_SCHEMA, run_epoch
    from processor_api.spark.stateful_groups import apply_in_pandas_with_state

    kinds = {{"long": types.LongType, "string": types.StringType, "double": types.DoubleType,
             "int": types.IntegerType}}
    output = types.StructType([
        types.StructField(name, kinds[kind]())
        for name, kind in (column.split() for column in OUTPUT_SCHEMA.split(", "))
    ])
    udf = {udf_maker}(
        partial(run_epoch, None, None),
        returnType=output,
        functionType=PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE,
        {kind})
    udf.returnType
    print("pandas" in sys.modules)
    """
)


def _imports_pandas(udf_maker: str, kind: str) -> bool:
    code = _PLAN_IMPORTS.format(udf_maker=udf_maker, kind=kind)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def test_planning_the_epoch_function_leaves_pandas_out_of_the_driver():
    # pyspark's own path (pandas_udf, as applyInPandasWithState uses it) imports pandas ...
    assert _imports_pandas("pandas_udf", "")
    # ... the run's does not
    assert not _imports_pandas("vectorized_udf", 'kind="pandas"')


@pytest.mark.integration
def test_the_plan_is_pysparks_own(spark):
    from pyspark.sql.streaming.state import GroupStateTimeout

    def func(key, frames, state):  # never called: the plans are compared
        yield from frames

    rows = spark.createDataFrame([("w0", 1)], "task string, epoch long")
    ours = apply_in_pandas_with_state(
        rows.groupBy("task"),
        func,
        OUTPUT_SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.NoTimeout,
    )
    theirs = rows.groupBy("task").applyInPandasWithState(
        func,
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    assert ours.schema == theirs.schema

    def plan(frame) -> str:
        text = frame._jdf.queryExecution().analyzed().toString()
        # expression ids and the UDF's own number differ between any two plans
        import re

        return re.sub(r"#\d+|func\(\w+\)", "", text)

    assert plan(ours) == plan(theirs)
