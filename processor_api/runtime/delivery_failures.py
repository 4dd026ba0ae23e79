"""What a task does with the records its producer reported undeliverable after they were sent.

The producer reports such a failure in a record's delivery report, after ``produce()``
returned (``kafka/delivery.py``); the task's flush before its commit hands them here, and
each is offered to the ``production.exception.handler`` with the record as the report gives
it (topic, partition, key, value, headers, timestamp) and a ``RecordDeliveryError``, as Kafka
Streams' ``RecordCollectorImpl.recordSendError`` does. Fatal and fencing errors never get here
(the flush fails on them first).

* ``at_least_once``: ``fail`` fails the batch (nothing past it is committed); when every
  response is ``continue`` the records are dropped (one warning event each, counted) and the
  batch commits; dead-letter records of the responses are produced and waited for.
* ``exactly_once_v2``: a failed send leaves the producer's transaction abortable (librdkafka
  refuses to commit it, as Kafka's Java producer does), so the transaction is aborted and the
  task's work since its last commit is done again, whatever the handler answers. The handler
  is still asked (it may count or alert), its dead-letter records are not sent (they would be
  aborted with the transaction), and the commit fails with a ``DeliveryError`` that says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from processor_api.config import StreamsConfig
from processor_api.engine.error_handling import ErrorHandling
from processor_api.engine.records import OutputRecord
from processor_api.error_handlers import handler_name
from processor_api.errors import DeliveryError
from processor_api.kafka.delivery import FailedDelivery
from processor_api.topology.nodes import SubTopology

#: The timestamp a handler sees for a record whose delivery report carries none.
NO_TIMESTAMP = -1


class TaskDeliveryFailures:
    """The production exception handler of one task for failed deliveries (a
    ``DeliveryFailureHandler``): see the module docs.

    ``send`` produces dead-letter records (through the task's producer); ``exactly_once``
    says the task's records go out in a transaction. :attr:`dropped` counts the records
    dropped so far.
    """

    def __init__(
        self,
        config: StreamsConfig,
        task_id: str,
        subtopology: SubTopology,
        send: Callable[[OutputRecord], None],
        *,
        exactly_once: bool,
    ) -> None:
        self._errors = ErrorHandling(config, task_id, send)
        self._exactly_once = exactly_once
        writers = Counter(sink.topic for sink in subtopology.sinks if sink.topic is not None)
        # the sink that wrote a record, when one fixed-topic sink alone writes its topic
        self._sink_of = {
            sink.topic: sink.name
            for sink in subtopology.sinks
            if sink.topic is not None and writers[sink.topic] == 1
        }
        self.dropped = 0

    def __call__(self, failures: Sequence[FailedDelivery]) -> None:
        """Offer each failure to the handler; raise ``DeliveryError`` to fail the batch."""
        handler = handler_name(self._errors.production)
        for failure in failures:
            record = OutputRecord(
                failure.topic,
                failure.key,
                failure.value,
                NO_TIMESTAMP if failure.timestamp is None else failure.timestamp,
                failure.headers,
                failure.partition,
            )
            error = failure.exception()
            response = self._errors.on_delivery_error(
                record,
                error,
                processor=self._sink_of.get(failure.topic),
                in_transaction=self._exactly_once,
            )
            if response.failed:
                raise DeliveryError(
                    f"{failure.describe()}; {len(failures)} record(s) failed in total; "
                    f"the production exception handler {handler} answered fail"
                    + (f";{_ABORTED}" if self._exactly_once else "")
                ) from error
        if self._exactly_once:
            raise DeliveryError(
                f"{failures[0].describe()}; {len(failures)} record(s) failed in total; the "
                f"production exception handler {handler} answered continue, but" + _ABORTED
            )
        self.dropped += len(failures)


_ABORTED = (
    " under exactly_once_v2 a failed delivery leaves the transaction abortable: it is "
    "aborted and the task's work since its last commit is done again when the task runs "
    "again, whatever the handler answers"
)
