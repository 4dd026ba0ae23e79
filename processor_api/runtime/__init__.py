"""The task engine (pure Python, shared by the test driver and Spark) and the Spark runner."""
