"""What a Kafka client step needs from whoever waits out broker outages for it.

A task's patience (``task.timeout.ms``, :class:`processor_api.runtime.patience.Patience`) calls
a client step again while the broker does not answer. ``kafka/`` names only the protocol here,
so that it imports nothing from ``runtime/``: the runtime hands its ``Patience`` in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class BrokerWait(Protocol):
    """Calls a client step until the broker answers, or gives up with an error of its own."""

    def call(
        self,
        role: str,
        what: str | Callable[[], str],
        call: Callable[[], T],
        *,
        step_s: float = ...,
    ) -> T:
        """``call()`` until it returns without a transient error; ``role`` names the client
        (e.g. ``"transactional producer"``), ``what`` what it waits for, ``step_s`` how long
        one try may block."""
        ...
