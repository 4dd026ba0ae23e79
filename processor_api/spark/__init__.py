"""The Spark runtime: the runner (driver side), the task function (executor side), the data
sources and the task keys. The only package that ties ``engine``, ``state`` and ``kafka`` to
Spark."""
