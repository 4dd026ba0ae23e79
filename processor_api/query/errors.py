"""The errors of interactive queries, each with the HTTP status and the code that carry it."""

from __future__ import annotations

from typing import Any

from processor_api.errors import StreamsError


class QueryError(StreamsError):
    """A query that was not answered; ``status`` and ``code`` are the HTTP answer's."""

    status = 500
    code = "error"

    def __init__(
        self,
        message: str,
        retry_after_s: float | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        #: What the answer says besides the error and its code (``NotUpToBoundError``: the
        #: ``bound``, the task's ``input_position`` and the ``task``).
        self.fields: dict[str, Any] = dict(fields or {})


class BadQueryError(QueryError):
    """The query is malformed for its store: a key of the wrong type, a bad parameter, a
    read the store's kind does not serve."""

    status, code = 400, "bad_request"


class UnauthorizedError(QueryError):
    """The endpoint wants a bearer token and got none or another."""

    status, code = 401, "unauthorized"


class UnknownStoreError(QueryError):
    """The application has no task store of that name."""

    status, code = 404, "unknown_store"


class KeyNotFoundError(QueryError):
    """The store holds no value for the key."""

    status, code = 404, "missing_key"


class NotFoundError(QueryError):
    """No such endpoint."""

    status, code = 404, "not_found"


class TaskUnavailableError(QueryError):
    """The task owning the key is restoring, moving or not started yet: ask again later."""

    status, code = 503, "unavailable"


class NotUpToBoundError(TaskUnavailableError):
    """The task has not processed the input offsets the read's position bound asks for
    (Kafka Streams' ``NOT_UP_TO_BOUND``): ask again later. ``fields`` holds the ``bound``
    (``[topic, partition, offset]`` entries), the task's ``input_position`` and the ``task``."""

    status, code = 503, "not_up_to_bound"


class RegistryUnavailableError(TaskUnavailableError):
    """The Schema Registry the store's serdes use did not answer while the key or an answer
    was being (de)serialized: ask again later. The message names the registry's URL."""

    status, code = 503, "registry_unavailable"


class EndpointUnreachableError(QueryError):
    """The query endpoint does not answer (a client's error, never an HTTP answer)."""

    code = "unreachable"


#: ``code`` of an error answer -> the error raised for it.
ERRORS_BY_CODE: dict[str, type[QueryError]] = {
    cls.code: cls
    for cls in (
        BadQueryError,
        UnauthorizedError,
        UnknownStoreError,
        KeyNotFoundError,
        NotFoundError,
        TaskUnavailableError,
        NotUpToBoundError,
        RegistryUnavailableError,
    )
}
