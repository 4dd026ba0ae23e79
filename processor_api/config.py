"""Runtime configuration: the keys a topology run understands.

Keys may be written Kafka-style with dots or dashes (``application.id``,
``processing.exception.handler``) or with underscores; they are normalized to underscores.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from processor_api.errors import ConfigError
from processor_api.handlers import resolve_handler

HANDLERS = ("log_and_fail", "log_and_continue")  # built-ins; "module:callable" names others
HANDLER_KEYS = (
    "deserialization_exception_handler",
    "processing_exception_handler",
    "production_exception_handler",
)


class ProcessingGuarantee(str, Enum):
    """Kafka Streams' ``processing.guarantee`` values this runtime implements."""

    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE_V2 = "exactly_once_v2"

    @property
    def isolation_level(self) -> str:
        """The consumer isolation level that goes with the guarantee."""
        if self is ProcessingGuarantee.EXACTLY_ONCE_V2:
            return "read_committed"
        return "read_uncommitted"


GUARANTEES = tuple(g.value for g in ProcessingGuarantee)


def normalize_key(key: str) -> str:
    return key.strip().replace(".", "_").replace("-", "_").lower()


@dataclass
class StreamsConfig:
    """Validated settings of a topology run (test driver or Spark)."""

    application_id: str = "processor-api-app"
    deserialization_exception_handler: str = "log_and_fail"
    processing_exception_handler: str = "log_and_fail"
    production_exception_handler: str = "log_and_fail"
    dead_letter_topic: str | None = None
    processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, config: dict[str, Any] | None) -> StreamsConfig:
        """Build from a user dict; unknown keys are kept in ``extra``."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for raw_key, value in (config or {}).items():
            key = normalize_key(raw_key)
            if key.startswith("default_") and key[len("default_") :] in known:
                key = key[len("default_") :]
            if key in known:
                values[key] = value
            else:
                extra[key] = value
        result = cls(**values, extra=extra)
        result.validate()
        return result

    def validate(self) -> None:
        for name in HANDLER_KEYS:
            resolve_handler(name, getattr(self, name))  # ConfigError naming key and value
        if self.processing_guarantee not in GUARANTEES:
            raise ConfigError(
                f"processing_guarantee must be one of {GUARANTEES}, "
                f"got {self.processing_guarantee!r}"
            )
        self.processing_guarantee = ProcessingGuarantee(self.processing_guarantee)
        if not self.application_id or not isinstance(self.application_id, str):
            raise ConfigError(
                f"application_id must be a non-empty string, got {self.application_id!r}"
            )
        if self.dead_letter_topic == "":
            self.dead_letter_topic = None

    @property
    def exactly_once(self) -> bool:
        """True under ``exactly_once_v2``."""
        return self.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE_V2
