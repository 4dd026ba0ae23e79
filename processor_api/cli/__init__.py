"""The command-line front ends, one module per command.

* :mod:`~processor_api.cli.run_topology`: ``run-topology`` (run a topology on Spark) and
  the arguments the other commands share with it;
* :mod:`~processor_api.cli.read_store`: ``read-store`` (a store's committed contents);
* :mod:`~processor_api.cli.tools`: ``processor-api`` (``status``, ``broker``);
* :mod:`~processor_api.cli.app_status`: what ``processor-api status`` reads from Kafka.

Nothing in the library imports this package: it sits on top of everything else.
"""
