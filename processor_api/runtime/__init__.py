"""A live task on an executor, knowing nothing of Spark.

The worker host process (``worker_host``) and the client that reaches it (``host_client``), the
task's life (``task_runner``: rebuild, process, close) and its poll loop in an epoch
(``epoch_runner``: poll, process, punctuate, commit), its input (``continuous_input``,
``input_records``), the processing guarantees (``guarantee``), delivery failures, global
stores and the
job spec the driver hands every executor (``job``). ``processor_api.spark`` drives these from
``applyInPandasWithState``; nothing here imports Spark (``job`` unpickles a topology with the
cloudpickle pyspark ships, lazily, only for topologies given as objects).
"""
