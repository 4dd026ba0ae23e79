"""The task engine: pure Python, shared by the test driver and the Spark runtime.

It runs one task's processors over records, fires punctuation and serializes sink records;
it knows stores (``state``) but neither Kafka clients nor Spark.
"""
